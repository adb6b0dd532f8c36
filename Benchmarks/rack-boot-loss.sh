#!/bin/bash
# `make bench-loss`: rack-boot (1,000 clients x 1 MiB, lockstep, blksize 1468) through 1 % UDP
# loss (LOSS=N to change) in a network namespace made here, once with --fixed-timeout (tftpd-hpa's
# behaviour) and once with the adaptive timeout. Needs root (ip netns, nftables). Prints storm's JSON.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$PWD/.build/release/stampede
ROOT=$PWD/.build/bench-root
LOSS=${LOSS:-1}
mkdir -p "$ROOT"
[ -f "$ROOT/1mib.bin" ] || head -c 1048576 /dev/urandom > "$ROOT/1mib.bin"
chmod 755 "$ROOT"; chmod 644 "$ROOT/1mib.bin"
for mode in fixed adaptive; do
    ns=stampede-bench-loss-$$-$mode
    ip netns add "$ns"
    trap 'ip netns pids "$ns" 2>/dev/null | xargs -r kill; ip netns del "$ns" 2>/dev/null || true' EXIT
    ip -n "$ns" link set lo up
    # Each datagram each way, as the suite's lossy tests do: lo cuts every segmented send into its
    # datagrams, and the rule drops them on input (on output a segmented send is one packet).
    ip -n "$ns" link set lo gso_max_segs 1
    ip netns exec "$ns" nft add table inet loss
    ip netns exec "$ns" nft 'add chain inet loss in { type filter hook input priority 0; }'
    ip netns exec "$ns" nft add rule inet loss in meta l4proto udp numgen random mod 100 lt "$LOSS" drop
    extra=(); [ "$mode" = fixed ] && extra=(--fixed-timeout)
    ip netns exec "$ns" prlimit --nofile=20000:20000 "$BIN" -l -L -a 127.0.0.1:6969 -u root --verbosity 0 \
        "${extra[@]}" "$ROOT" > /dev/null 2>&1 &
    sleep 1
    echo "$mode: $(ip netns exec "$ns" prlimit --nofile=20000:20000 "$BIN" storm 127.0.0.1:6969 1mib.bin \
        --clients 1000 --blksize 1468 --verify "$ROOT/1mib.bin" --json || true)"
    ip netns pids "$ns" | xargs -r kill
    sleep 1
    ip netns del "$ns"
    trap - EXIT
done
