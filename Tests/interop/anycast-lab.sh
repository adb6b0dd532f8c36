#!/bin/bash
# A rack behind an ECMP fabric, in network namespaces (root): one client namespace whose machines
# each send from an address of their own, one router with a multipath route for an anycast
# address through N server namespaces, each of which holds that address. Used by the suite
# (Tests/interop/test_anycast.py) and by `make bench-anycast`; an operator can run it by hand to
# see the trap TFTP falls into behind a fabric that hashes ports.
#
#   anycast-lab.sh up NAME SERVERS POLICY [resilient]
#       POLICY: net.ipv4.fib_multipath_hash_policy on the router, 0 (addresses) or 1 (ports too).
#       resilient: a resilient next-hop group (only a lost server's flows move), else the
#       kernel's hash-threshold route (removing one next hop moves others' flows too).
#   anycast-lab.sh exec NAME WHERE COMMAND...   WHERE: client, router, or 1..SERVERS
#   anycast-lab.sh withdraw NAME I              the route stops sending to server I
#   anycast-lab.sh restore NAME I               and sends to it again
#   anycast-lab.sh down NAME                    kills what runs inside, deletes the namespaces
#
# Addresses: the anycast service 10.252.0.1; machines 10.251.0.0/16 (a local route in the client
# namespace takes them all: storm --source-range 10.251.0.1); client-router 10.250.0.0/30;
# router-server I 10.250.I.0/30.
set -euo pipefail

ANYCAST=10.252.0.1
RACK=10.251.0.0/16

usage() { sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 64; }

ns() { echo "$1-$2"; }                       # ns NAME client|router|sI
inside() { local n=$1; shift; ip netns exec "$n" "$@"; }
# set NS KEY=VALUE...: sysctls of that namespace (written to /proc/sys from inside it).
set_sysctl() {
    local n=$1; shift
    for pair in "$@"; do inside "$n" sh -c "echo ${pair#*=} > /proc/sys/$(echo "${pair%%=*}" | tr . /)"; done
}

# The router's route to the anycast address through the servers listed (their numbers).
route() {
    local name=$1; shift
    local router; router=$(ns "$name" router)
    if [ -f "/run/stampede-anycast-$name.resilient" ]; then
        local group; group=$(printf '%s/' "$@"); group=${group%/}
        if [ $# -eq 0 ]; then
            inside "$router" ip route del "$ANYCAST/32" 2>/dev/null || true
            inside "$router" ip nexthop del id 100 2>/dev/null || true
        elif inside "$router" ip nexthop show id 100 > /dev/null 2>&1; then
            inside "$router" ip nexthop replace id 100 group "$group" type resilient buckets 128
        else
            inside "$router" ip nexthop add id 100 group "$group" type resilient buckets 128
            inside "$router" ip route replace "$ANYCAST/32" nhid 100
        fi
    else
        local hops=()
        for i in "$@"; do hops+=(nexthop via "10.250.$i.2" dev "s$i"); done
        if [ $# -eq 0 ]; then
            inside "$router" ip route del "$ANYCAST/32" 2>/dev/null || true
        else
            inside "$router" ip route replace "$ANYCAST/32" "${hops[@]}"
        fi
    fi
    echo "$*" > "/run/stampede-anycast-$name.up"
}

up() {
    local name=$1 servers=$2 policy=$3 kind=${4:-hash-threshold}
    [[ $servers =~ ^[1-9]$ ]] || { echo "anycast-lab: SERVERS is 1..9, not '$servers'" >&2; exit 64; }
    [[ $policy =~ ^[01]$ ]] || { echo "anycast-lab: POLICY is 0 or 1, not '$policy'" >&2; exit 64; }
    local client router; client=$(ns "$name" client); router=$(ns "$name" router)
    for n in "$client" "$router"; do ip netns add "$n"; inside "$n" ip link set lo up; done
    set_sysctl "$router" net.ipv4.ip_forward=1 "net.ipv4.fib_multipath_hash_policy=$policy" \
        net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0

    ip link add c0 netns "$client" type veth peer name c0 netns "$router"
    inside "$client" ip addr add 10.250.0.2/30 dev c0
    inside "$router" ip addr add 10.250.0.1/30 dev c0
    for n in "$client" "$router"; do inside "$n" ip link set c0 up; done
    inside "$client" ip route add default via 10.250.0.1
    # Every machine's address is the client namespace's own: storm binds 10.251.x.y directly.
    inside "$client" ip route add local "$RACK" dev lo
    inside "$router" ip route add "$RACK" via 10.250.0.2

    local all=()
    for i in $(seq 1 "$servers"); do
        local server; server=$(ns "$name" "s$i")
        ip netns add "$server"
        inside "$server" ip link set lo up
        set_sysctl "$server" net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
        ip link add "s$i" netns "$server" type veth peer name "s$i" netns "$router"
        inside "$server" ip addr add "10.250.$i.2/30" dev "s$i"
        inside "$router" ip addr add "10.250.$i.1/30" dev "s$i"
        inside "$server" ip link set "s$i" up
        inside "$router" ip link set "s$i" up
        inside "$server" ip addr add "$ANYCAST/32" dev lo
        inside "$server" ip route add default via "10.250.$i.1"
        [ "$kind" = resilient ] && inside "$router" ip nexthop add id "$i" via "10.250.$i.2" dev "s$i"
        all+=("$i")
    done
    rm -f "/run/stampede-anycast-$name.resilient"
    case $kind in
        resilient) touch "/run/stampede-anycast-$name.resilient" ;;
        hash-threshold) ;;
        *) echo "anycast-lab: the route is 'resilient' or the default, not '$kind'" >&2; exit 64 ;;
    esac
    route "$name" "${all[@]}"
}

# The servers the route now uses, minus or plus one.
change() {
    local name=$1 which=$2 how=$3
    local now; read -r -a now < "/run/stampede-anycast-$name.up"
    local next=()
    for i in "${now[@]}"; do [ "$i" = "$which" ] || next+=("$i"); done
    [ "$how" = restore ] && next+=("$which")
    route "$name" $(printf '%s\n' "${next[@]}" | sort -n)
}

down() {
    local name=$1
    local n rest
    while read -r n rest; do
        [[ $n == "$name-"* ]] || continue
        ip netns pids "$n" | xargs -r kill -9 2>/dev/null || true
        ip netns del "$n"
    done < <(ip netns list)
    rm -f "/run/stampede-anycast-$name.up" "/run/stampede-anycast-$name.resilient"
}

[ $# -ge 2 ] || usage
command=$1 name=$2; shift 2
case $command in
    up) [ $# -ge 2 ] || usage; up "$name" "$@" ;;
    exec)
        [ $# -ge 2 ] || usage
        where=$1; shift
        case $where in
            # exec: the command is this process, so that a signal to it reaches the command.
            client|router) exec ip netns exec "$(ns "$name" "$where")" "$@" ;;
            [1-9]) exec ip netns exec "$(ns "$name" "s$where")" "$@" ;;
            *) usage ;;
        esac ;;
    withdraw|restore) [ $# -eq 1 ] || usage; change "$name" "$1" "$command" ;;
    down) down "$name" ;;
    *) usage ;;
esac
