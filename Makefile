# Stampede: `make run` serves a demo root; `make test` installs what is missing and runs everything.
SHELL := /bin/bash
SWIFT ?= swift
PREFIX ?= /usr/local
PORT ?= 6969
VENV := .build/venv
PYTHON := $(VENV)/bin/python
BIN := .build/release/stampede
DEMO := .build/demo-root

# apt-get as root, or through sudo; nothing when everything is there already.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# Every external command the test suite and the benchmarks run, as COMMAND:DEBIAN-PACKAGE. `make
# deps` installs the packages of TEST_COMMANDS, `make bench-deps` those of BENCH_COMMANDS. The
# suite checks the test commands before its first test and names the package of any missing
# (Tests/interop/conftest.py); Tests/interop/test_external_commands.py fails when a test or a
# benchmark runs a command of a non-essential package that is not listed here.
TEST_COMMANDS := curl:curl tftp:tftp-hpa atftp:atftp busybox:busybox ip:iproute2 nft:nftables \
	mount:mount umount:mount prlimit:util-linux unshare:util-linux dnsmasq:dnsmasq-base \
	qemu-system-x86_64:qemu-system-x86 qemu-system-aarch64:qemu-system-arm prometheus:prometheus promtool:prometheus \
	systemd-analyze:systemd dpkg-buildpackage:dpkg-dev dh:debhelper lintian:lintian openssl:openssl \
	kea-dhcp6:kea-dhcp6-server radvd:radvd
BENCH_COMMANDS := dnsmasq:dnsmasq-base wrk:wrk git:git perf:linux-perf
commands_of = $(foreach c,$(1),$(word 1,$(subst :, ,$(c))))
packages_of = $(sort $(foreach c,$(1),$(word 2,$(subst :, ,$(c)))))
# The firmware the suite boots (Tests/interop/test_firmware.py): OVMF's UEFI, AAVMF (ARM64 UEFI),
# iPXE for UEFI, the iPXE ROMs QEMU's NICs carry.
FIRMWARE_PACKAGES := ovmf qemu-efi-aarch64 ipxe ipxe-qemu
# The slow disk of Tests/interop/test_disk.py: a FUSE file system in Python (fusepy loads libfuse 2).
FUSE_PACKAGES := libfuse2
# The parity test's peer runs from a Debian unstable tree made with debootstrap (parity-deps).
PARITY_PACKAGES := debootstrap
# /etc/services, for -S with a service name (Tests/interop/test_cli.py).
SERVICES_PACKAGES := netbase
# The C++ runtime the Swift runtime uses, linked into the binary (below, build).
STATIC_PACKAGES := libstdc++-12-dev
# --https's TLS: OpenSSL 3's headers and libssl, which the binary links dynamically (the package
# depends on libssl3, so that Debian's security updates reach it).
TLS_PACKAGES := libssl-dev
# What the build itself needs (make run on a machine with only the toolchain), then what the tests need.
BUILD_PACKAGES := liburing-dev $(TLS_PACKAGES) pkg-config $(STATIC_PACKAGES)
APT_PACKAGES := python3-venv $(FIRMWARE_PACKAGES) $(FUSE_PACKAGES) $(PARITY_PACKAGES) $(SERVICES_PACKAGES) \
	$(call packages_of,$(TEST_COMMANDS))
BENCH_PACKAGES := libwrap0 $(call packages_of,$(BENCH_COMMANDS))
# A machine with the Swift toolchain alone may have no cc: the toolchain's clang builds the C tests.
ifeq ($(origin CC),default)
CC := $(shell command -v cc >/dev/null 2>&1 && echo cc || echo clang)
endif

RING_SOURCES := $(wildcard CSources/CStampedeRing/*.c) CSources/CStampedeSys/sys.c
RING_TEST := .build/ring-test-sanitized
SANITIZE_FLAGS := -std=gnu11 -D_GNU_SOURCE -Wall -Wextra -Werror -g -fno-omit-frame-pointer -fsanitize=address,undefined

.PHONY: all build build-deps manual run test test-prepare fuzz-short unit interop parity-deps secure-boot unstable-boot package-deps boot-kernel deb sanitize bench-static bench-previous bench-http bench-config-search bench-https bench-dhcp bench-machines bench-rack bench-lockstep fuzz soak bench bench-loss bench-anycast bench-busy bench-disk bench-metrics bench-deps bench-micro bench-floor bench-thresholds bench-report deps install clean

all: build

# The binary a host without Swift runs: the Swift runtime linked in (--static-swift-stdlib), and
# the C++ runtime it uses too (-lstdc++ finds a linker script that names libstdc++.a), so that it
# needs only libc6's libraries, libgcc-s1 (which libc6 pulls in) and liburing2; no RUNPATH.
STATIC_CXX := .build/static-libstdc++
build: build-deps
	@mkdir -p $(STATIC_CXX) && echo "INPUT($$($(CC) -print-file-name=libstdc++.a))" > $(STATIC_CXX)/libstdc++.so
	$(SWIFT) build -c release --product stampede --static-swift-stdlib --disable-local-rpath -Xlinker -L$(CURDIR)/$(STATIC_CXX) \
		-Xlinker -z -Xlinker now

# Installs the Debian packages in $(1) that are missing, then checks that the commands in $(2) run.
define apt_install
	@missing=""; \
	for p in $(1); do dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		$(SUDO) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi
	@for t in $(2); do (PATH="$$PATH:/usr/sbin:/sbin"; command -v $$t >/dev/null) || { echo "missing $$t after install"; exit 1; }; done
endef

build-deps:
	$(call apt_install,$(BUILD_PACKAGES),pkg-config)

# The suite's Python packages, at the versions it was last run with. pytest-xdist 3.8 keeps a
# group's tests on one worker (Tests/interop/conftest.py) under pytest 8, not under pytest 9.2,
# where every test runs on any worker.
PYTHON_PACKAGES := pytest==8.4.2 pytest-xdist==3.8.0 tftpy==0.8.7 fusepy==3.0.1

deps: build-deps
	$(call apt_install,$(APT_PACKAGES),$(call commands_of,$(TEST_COMMANDS)))
	@[ -x $(PYTHON) ] || python3 -m venv $(VENV)
	@frozen="$$($(VENV)/bin/pip freeze 2>/dev/null)"; for p in $(PYTHON_PACKAGES); do \
		grep -qixF "$$p" <<< "$$frozen" || { $(VENV)/bin/pip install -q $(PYTHON_PACKAGES); break; }; done

$(DEMO):
	mkdir -p $(DEMO)/pxelinux.cfg
	printf 'Hello from Stampede.\n' > $(DEMO)/hello.txt
	printf 'DEFAULT linux\nLABEL linux\n  KERNEL vmlinuz\n' > $(DEMO)/pxelinux.cfg/default
	head -c 4194304 /dev/urandom > $(DEMO)/vmlinuz
	chmod -R a+rX $(DEMO)

run: build $(DEMO)
	@echo
	@echo "Serving $(DEMO) on 127.0.0.1:$(PORT). Fetch a file from another terminal:"
	@echo "  curl -o hello.txt tftp://127.0.0.1:$(PORT)/hello.txt"
	@echo "  $(BIN) get 127.0.0.1:$(PORT) vmlinuz --blksize 1468"
	@echo "Stop with Ctrl-C."
	@echo
	$(BIN) -l -L -a 127.0.0.1:$(PORT) -u "$$(id -un)" $(CURDIR)/$(DEMO)

unit:
	$(SWIFT) test

# The io_uring engine's own C tests under AddressSanitizer and UndefinedBehaviorSanitizer.
sanitize: deps
	mkdir -p .build
	$(CC) $(SANITIZE_FLAGS) -ICSources/CStampedeRing/include -ICSources/CStampedeRing -ICSources/CStampedeSys/include \
		Tests/CStampedeRingTests/ring_test.c $(RING_SOURCES) $$(pkg-config --cflags --libs liburing) -o $(RING_TEST)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:free_fill_byte=190:max_free_fill_size=1048576 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 $(RING_TEST)

# libFuzzer harnesses for the parsers (Fuzz/*Fuzz, ordinary targets of the package): built with
# -sanitize=fuzzer in a build folder of their own, each runs FUZZ_SECONDS from its seed corpus in
# Fuzz/corpus (make test runs a short round). A crash leaves its input in .build/fuzz/crash-*:
# add it to the seed corpus, which every run replays (`swift run PacketFuzz FILE` replays one).
FUZZ_SECONDS ?= 60
# Each target's name (its corpus, Fuzz/corpus/NAME) and its harness, the package's product.
FUZZ_HARNESSES := packet:PacketFuzz optionack:OptionAckFuzz remap:RemapFuzz dhcp:DHCPFuzz head:HeadFuzz
FUZZ_TARGETS := $(foreach h,$(FUZZ_HARNESSES),$(word 1,$(subst :, ,$(h))))
FUZZ_BUILD ?= .build-fuzz
# Optimized, for many runs a second. make test's short round compiles them with -Onone instead, in
# a build folder of its own (33 s against 62 s from clean; its 5 s a target are for the corpus
# more than for the search).
FUZZ_SWIFTC_FLAGS ?=

fuzz: build-deps
	mkdir -p .build/fuzz $(addprefix .build/fuzz/corpus-,$(FUZZ_TARGETS))
	@for h in $(FUZZ_HARNESSES); do p=$${h#*:}; \
		$(SWIFT) build -c release --scratch-path $(FUZZ_BUILD) --product $$p $(FUZZ_SWIFTC_FLAGS) \
			-Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING -Xswiftc -use-ld=lld 2>&1 | grep -E "error|warning: unre|Compiling|Build" | tail -1; \
		test -x $(FUZZ_BUILD)/release/$$p || { echo "fuzz harness $$p did not build"; exit 1; }; \
	done
	@# Side by side, as many at once as there are cores (each its own core for FUZZ_SECONDS), and
	@# what each said, in turn, after.
	@rm -f .build/fuzz/*.status; echo "fuzzing $(FUZZ_TARGETS) for $(FUZZ_SECONDS) s each, $$(nproc) at once"; \
	printf '%s\n' $(FUZZ_HARNESSES) | tr : ' ' | xargs -P $$(nproc) -L 1 sh -c \
		'timeout $$(( $(FUZZ_SECONDS) + 120 )) $(FUZZ_BUILD)/release/$$1 -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 \
		-artifact_prefix=.build/fuzz/ .build/fuzz/corpus-$$0 Fuzz/corpus/$$0 > .build/fuzz/$$0.log 2>&1; echo $$? > .build/fuzz/$$0.status'; \
	status=0; \
	for t in $(FUZZ_TARGETS); do \
		echo "$$t:"; grep -E "^(Done|stat::number_of_executed_units)|ERROR|crash-|deadly" .build/fuzz/$$t.log; \
		[ "$$(cat .build/fuzz/$$t.status)" = 0 ] || { echo "fuzz target $$t failed: see .build/fuzz/$$t.log and .build/fuzz/crash-*"; status=1; }; \
	done; \
	exit $$status

# Ten minutes of continuous storm against a fresh server; RSS and fds sampled and required flat.
soak: build
	python3 Benchmarks/soak.py

# The peers `make bench` compares with: dnsmasq from Debian; tftpd-hpa and atftpd conflict as
# Debian packages (and would start services), so their .debs are unpacked under .build/peers.
PEER_DEBS := tftpd-hpa atftpd
PEERS := .build/peers

# The in.tftpd the parity tests (Tests/interop/test_parity*.py, through parity.py) hold Stampede
# to: Debian unstable's tftpd-hpa, which needs a newer glibc than this Debian's, so it runs from
# a minimal unstable tree made once with debootstrap (about 30 s) and kept under .build.
# Unstable moves: the version is
# printed, and a tree whose in.tftpd is not the one the parity corpus was written for is said
# loudly here and skipped by the test (rm -rf $(SID) makes it again).
SID := .build/sid
PARITY_TFTPD := tftp-hpa 7.3
parity-deps: deps
	@if [ ! -x $(SID)/usr/sbin/in.tftpd ]; then \
		echo "making $(SID): Debian unstable with tftpd-hpa (debootstrap)"; \
		mkdir -p $(dir $(SID)) && $(SUDO) rm -rf $(SID).new && \
		$(SUDO) debootstrap --variant=minbase --include=tftpd-hpa,dnsmasq-base sid $(SID).new http://deb.debian.org/debian >$(SID).log 2>&1 || \
			{ tail -20 $(SID).log; exit 1; }; \
		mv $(SID).new $(SID); \
	fi
	@v=$$($(SUDO) chroot $(SID) /usr/sbin/in.tftpd -V 2>&1 | head -1); echo "parity peer: $$v ($(SID))"; \
	[ "$$v" = "$(PARITY_TFTPD)" ] || echo "WARNING: $(SID) has $$v, the parity corpus was written for $(PARITY_TFTPD): the parity tests skip"

# Secure Boot's signed chain, for the firmware tests: shim (signed by Microsoft, holding Debian's
# CA) and GRUB's network image (signed by Debian, GRUB 2.14: it reads a proxyDHCP offer), from the
# unstable tree's archive (apt-get download in $(SID); its mirror's Release may be past its
# validity date, which a download does not need), kept under .build.
SECURE_BOOT := .build/secure-boot
secure-boot: parity-deps
	@if [ ! -s $(SECURE_BOOT)/shimx64.efi ] || [ ! -s $(SECURE_BOOT)/grubx64.efi ]; then \
		echo "fetching $(SECURE_BOOT): shim-signed and grub-efi-amd64-signed from Debian unstable"; \
		mkdir -p $(SECURE_BOOT) && rm -rf $(SECURE_BOOT)/debs && \
		$(SUDO) chroot $(SID) sh -c 'apt-get -qq -o Acquire::Check-Valid-Until=false update; mkdir -p /tmp/secure-boot && cd /tmp/secure-boot && \
			rm -f *.deb && apt-get download -qq shim-signed grub-efi-amd64-signed' >$(SECURE_BOOT).log 2>&1 || { tail -5 $(SECURE_BOOT).log; exit 1; }; \
		$(SUDO) mv $(SID)/tmp/secure-boot $(SECURE_BOOT)/debs && \
		for deb in $(SECURE_BOOT)/debs/*.deb; do dpkg-deb -x $$deb $(SECURE_BOOT)/debs/tree; done && \
		cp $(SECURE_BOOT)/debs/tree/usr/lib/shim/shimx64.efi.signed $(SECURE_BOOT)/shimx64.efi.part && \
		cp $(SECURE_BOOT)/debs/tree/usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed $(SECURE_BOOT)/grubx64.efi.part && \
		mv $(SECURE_BOOT)/shimx64.efi.part $(SECURE_BOOT)/shimx64.efi && mv $(SECURE_BOOT)/grubx64.efi.part $(SECURE_BOOT)/grubx64.efi && \
		ls $(SECURE_BOOT)/debs/*.deb | sed 's|.*/||' > $(SECURE_BOOT)/versions && rm -rf $(SECURE_BOOT)/debs; \
	fi
	@# Debian 12's signed GRUB network image (2.06), which stops at its prompt behind a proxy: the
	@# firmware test shows the hint the server logs for it. From bookworm's archive whatever the
	@# host runs (a list of its own in the tree, beside unstable's).
	@if [ ! -s $(SECURE_BOOT)/grubx64-bookworm.efi ]; then \
		echo "fetching $(SECURE_BOOT)/grubx64-bookworm.efi: grub-efi-amd64-signed from Debian 12"; \
		$(SUDO) chroot $(SID) sh -c 'mkdir -p /var/lib/apt/bookworm-lists/partial /tmp/bookworm && \
			echo "deb http://deb.debian.org/debian bookworm main" > /etc/apt/bookworm.list && \
			apt="-o Dir::Etc::SourceList=/etc/apt/bookworm.list -o Dir::Etc::SourceParts=- -o Dir::State::Lists=/var/lib/apt/bookworm-lists" && \
			apt-get -qq $$apt update && cd /tmp/bookworm && rm -f *.deb && apt-get download -qq $$apt grub-efi-amd64-signed' \
			>$(SECURE_BOOT).log 2>&1 || { tail -5 $(SECURE_BOOT).log; exit 1; }; \
		deb=$$(ls $(SID)/tmp/bookworm/grub-efi-amd64-signed_*.deb) && \
		dpkg-deb --fsys-tarfile $$deb | tar -xO ./usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed > $(SECURE_BOOT)/grubx64-bookworm.efi.part && \
		mv $(SECURE_BOOT)/grubx64-bookworm.efi.part $(SECURE_BOOT)/grubx64-bookworm.efi && \
		echo "$${deb##*/}" > $(SECURE_BOOT)/bookworm-version && $(SUDO) rm -rf $(SID)/tmp/bookworm; \
	fi
	@echo "secure boot chain: $$(tr '\n' ' ' < $(SECURE_BOOT)/versions)and $$(cat $(SECURE_BOOT)/bookworm-version) ($(SECURE_BOOT))"

# iPXE 2.0 (Debian unstable's ipxe: ipxe-amd64.efi, ipxe-arm64.efi, builds with no embedded
# script), and what an ARM64 machine boots in the firmware tests: Debian unstable's arm64 kernel
# (vmlinuz-arm64, the image linux-image-arm64 names) and a static busybox for its initramfs
# (busybox-arm64); the tree learns the arm64 architecture to download them (nothing is installed).
# After secure-boot: both update the tree's package lists, which one apt-get at a time may hold
# (make -j would run them side by side).
UNSTABLE_BOOT := .build/unstable-boot
UNSTABLE_BOOT_FILES := ipxe-amd64.efi ipxe-arm64.efi vmlinuz-arm64 busybox-arm64
unstable-boot: parity-deps secure-boot
	@if ! (cd $(UNSTABLE_BOOT) 2>/dev/null && ls $(UNSTABLE_BOOT_FILES) >/dev/null 2>&1); then \
		echo "fetching $(UNSTABLE_BOOT): ipxe, linux-image-arm64 and busybox-static:arm64 from Debian unstable"; \
		mkdir -p $(UNSTABLE_BOOT) && rm -rf $(UNSTABLE_BOOT)/debs && \
		$(SUDO) chroot $(SID) sh -c 'dpkg --add-architecture arm64 && apt-get -qq -o Acquire::Check-Valid-Until=false update; \
			mkdir -p /tmp/unstable-boot && cd /tmp/unstable-boot && rm -f *.deb && \
			image=$$(apt-cache depends linux-image-arm64:arm64 | sed -n "s/^ *Depends: \(linux-image-[^ :]*\).*/\1/p" | head -1) && \
			binary=$$(apt-cache depends $$image:arm64 | sed -n "s/^ *Depends: \(linux-binary-[^ :]*\).*/\1/p" | head -1) && \
			apt-get download -qq ipxe $$image:arm64 $${binary:+$$binary:arm64} busybox-static:arm64' >$(UNSTABLE_BOOT).log 2>&1 || \
			{ tail -5 $(UNSTABLE_BOOT).log; exit 1; }; \
		$(SUDO) mv $(SID)/tmp/unstable-boot $(UNSTABLE_BOOT)/debs && \
		for deb in $(UNSTABLE_BOOT)/debs/*.deb; do dpkg-deb -x $$deb $(UNSTABLE_BOOT)/debs/tree; done && \
		tree=$(UNSTABLE_BOOT)/debs/tree && \
		cp $$tree/usr/lib/ipxe/ipxe-amd64.efi $$tree/usr/lib/ipxe/ipxe-arm64.efi $(UNSTABLE_BOOT)/ && \
		cp $$(find $$tree/boot $$tree/usr/lib/modules -name 'vmlinuz*' -size +1M 2>/dev/null | head -1) $(UNSTABLE_BOOT)/vmlinuz-arm64 && \
		cp $$tree/usr/bin/busybox $(UNSTABLE_BOOT)/busybox-arm64 && \
		ls $(UNSTABLE_BOOT)/debs/*.deb | sed 's|.*/||' > $(UNSTABLE_BOOT)/versions && rm -rf $(UNSTABLE_BOOT)/debs; \
	fi
	@echo "from Debian unstable: $$(tr '\n' ' ' < $(UNSTABLE_BOOT)/versions)($(UNSTABLE_BOOT))"

bench-deps: deps parity-deps
	$(call apt_install,$(BENCH_PACKAGES),$(call commands_of,$(BENCH_COMMANDS)))
	@if [ ! -x $(PEERS)/usr/sbin/in.tftpd ] || [ ! -x $(PEERS)/usr/sbin/atftpd ]; then \
		mkdir -p $(PEERS)/debs && cd $(PEERS)/debs && \
		{ apt-get download $(PEER_DEBS) 2>/dev/null || { $(SUDO) apt-get update -qq && apt-get download $(PEER_DEBS); }; } && \
		for d in *.deb; do dpkg-deb -x $$d ..; done; \
	fi
	@# The peers of today (tftp-hpa 7.3, dnsmasq 2.93) run from the Debian unstable tree; a tree
	@# made before dnsmasq was in it gets it now.
	@[ -x $(SID)/usr/sbin/dnsmasq ] || { $(SUDO) chroot $(SID) sh -c 'apt-get -o Acquire::Check-Valid-Until=false update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends dnsmasq-base' >$(SID).log 2>&1 || { tail -20 $(SID).log; exit 1; }; }
	@# nginx-light, the HTTP file server bench-http compares with; policy-rc.d keeps its service from starting.
	@[ -x $(SID)/usr/sbin/nginx ] || { printf '#!/bin/sh\nexit 101\n' | $(SUDO) tee $(SID)/usr/sbin/policy-rc.d >/dev/null && $(SUDO) chmod 755 $(SID)/usr/sbin/policy-rc.d && \
		$(SUDO) chroot $(SID) sh -c 'apt-get -o Acquire::Check-Valid-Until=false update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends nginx-light' >$(SID).log 2>&1 || { tail -20 $(SID).log; exit 1; }; }
	@# liburing2: bench-https runs Stampede from the tree too, on the OpenSSL nginx links.
	@[ -e $(SID)/usr/lib/x86_64-linux-gnu/liburing.so.2 ] || { $(SUDO) chroot $(SID) sh -c 'apt-get -o Acquire::Check-Valid-Until=false update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends liburing2' >$(SID).log 2>&1 || { tail -20 $(SID).log; exit 1; }; }
	@$(PEERS)/usr/sbin/in.tftpd -V 2>&1 | head -1; $(PEERS)/usr/sbin/atftpd -V 2>&1 | head -1; dnsmasq --version | head -1
	@chroot $(SID) /usr/sbin/in.tftpd -V 2>&1 | head -1; chroot $(SID) /usr/sbin/dnsmasq --version | head -1

# Stampede on both backends and every peer, the same scenarios, one table (results/bench.*).
bench: build bench-deps .build/floor .build/floor-lockstep .build/pixieapi
	python3 Benchmarks/compare.py
	python3 Benchmarks/proxy_dhcp.py
	python3 Benchmarks/machines_rack.py
	python3 Benchmarks/https_vs_nginx.py

# An earlier build beside this one (PREVIOUS: a commit, by default the one before HEAD; built once
# per commit under .build/previous by Benchmarks/previous.sh): every scenario of `make bench` on
# both backends, no peers, in interleaved rounds, and each scenario's cost as a ratio of the
# earlier build's: results/bench-previous.{json,md}.
PREVIOUS ?= HEAD~1
bench-previous: build bench-deps .build/floor .build/floor-lockstep
	previous=$$(Benchmarks/previous.sh $(PREVIOUS)) && \
	BENCH_BASELINE=$$previous BENCH_BASELINE_LABEL=previous BENCH_OUTPUT=bench-previous \
	BENCH_SERVERS=stampede-uring,stampede-glibc,stampede-uring-previous,stampede-glibc-previous python3 Benchmarks/compare.py

# The rack scenario alone, both backends, three interleaved rounds, and where each round's
# datagrams were dropped: results/bench-rack.{json,md}.
bench-rack: build .build/floor .build/floor-lockstep
	BENCH_OUTPUT=bench-rack BENCH_SCENARIOS=rack BENCH_SERVERS=stampede-uring,stampede-glibc BENCH_ROUNDS=3 BENCH_RACK_ROUNDS=3 \
		python3 Benchmarks/compare.py

# Lockstep alone (rack-boot, storm), both backends beside dnsmasq 2.93 in five interleaved rounds,
# with the kernel's price for lockstep (Benchmarks/Floor/lockstep.c): results/bench-lockstep.{json,md}.
bench-lockstep: build bench-deps .build/floor .build/floor-lockstep
	BENCH_OUTPUT=bench-lockstep BENCH_SCENARIOS=rack-boot,storm BENCH_SERVERS=stampede-uring,stampede-glibc,dnsmasq BENCH_ROUNDS=5 \
		python3 Benchmarks/compare.py

# A rack booting from its first DHCP packet, Stampede (--proxy-dhcp) beside dnsmasq's proxy and
# nginx, and a DISCOVER storm (root: network namespaces): results/bench-dhcp.{json,md}.
bench-dhcp: build bench-deps
	python3 Benchmarks/proxy_dhcp.py

# What knowing each machine costs: a rack following each machine's own script, without records,
# with a record per machine and with pixiecore's API, both backends (root): results/bench-machines.{json,md}.
bench-machines: build .build/pixieapi
	python3 Benchmarks/machines_rack.py

# pixiecore's API for bench-machines' api racks, in C (a stand-in for a service on a host of its
# own that takes little of the cores the server and the storm share).
.build/pixieapi: Benchmarks/PixieAPI/pixieapi.c | build-deps
	mkdir -p .build
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror $< -o $@

# PXELINUX's config search (ten names not there per machine), 10,000 machines, both backends
# beside dnsmasq 2.93: server CPU per request, results/bench-config-search.{json,md}.
bench-config-search: build bench-deps
	python3 Benchmarks/config_search.py

# --http beside nginx-light (sendfile on) on the same root, with wrk: results/bench-http.{json,md}.
bench-http: build bench-deps
	python3 Benchmarks/http_vs_nginx.py

# --https beside nginx-light (ssl, sendfile on, the same certificate and suites): wrk's keep-alive
# bulk and openssl s_time's full handshakes: results/bench-https.{json,md}.
bench-https: build bench-deps
	python3 Benchmarks/https_vs_nginx.py

# The static binary (build) against the dynamically linked one it replaced, on both backends,
# interleaved in one run: results/bench-static.{json,md,svg}, the dynamic rows as stampede-*-dynamic.
DYNAMIC_BIN := .build/bench/stampede-dynamic
bench-static: bench-deps .build/floor .build/floor-lockstep
	$(SWIFT) build -c release --product stampede
	mkdir -p $(dir $(DYNAMIC_BIN)) && cp $(BIN) $(DYNAMIC_BIN)
	$(MAKE) build
	BENCH_BASELINE=$(CURDIR)/$(DYNAMIC_BIN) BENCH_BASELINE_LABEL=dynamic BENCH_OUTPUT=bench-static \
		BENCH_SERVERS=stampede-uring,stampede-glibc,stampede-uring-dynamic,stampede-glibc-dynamic \
		BENCH_SCENARIOS=rack-boot,initrd,uefi,storm python3 Benchmarks/compare.py

# The kernel floor: the same datagrams with sendmmsg, GSO, zero-copy GSO (syscall and io_uring); no TFTP.
.build/floor: Benchmarks/Floor/floor.c | build-deps
	mkdir -p .build
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -pthread $< $$(pkg-config --cflags --libs liburing) -o $@

# The kernel's price for lockstep: a datagram out and its ACK in per block, 1,000 socket pairs,
# served by io_uring and by epoll; no TFTP.
.build/floor-lockstep: Benchmarks/Floor/lockstep.c | build-deps
	mkdir -p .build
	$(CC) -std=gnu11 -O2 -Wall -Wextra -Werror -pthread $< $$(pkg-config --cflags --libs liburing) -o $@

bench-floor: .build/floor .build/floor-lockstep
	.build/floor --zerocopy
	.build/floor-lockstep

# rack-boot through 1 % loss, fixed vs adaptive retransmit timeout (root: netns + nftables).
bench-loss: build
	Benchmarks/rack-boot-loss.sh

# Three servers behind one anycast address (root: netns): the hash-policy table, a server lost
# mid-boot, a drain, 2,000 machines each: results/bench-anycast.{json,md}.
bench-anycast: build
	python3 Benchmarks/anycast.py

# A full server answering ERROR 0 vs nothing: how many of 1,000 machines boot (--when-busy).
bench-busy: build
	python3 Benchmarks/busy.py

# How long a slow disk (a FUSE mirror whose fsync takes a second) stalls the other transfers;
# BASELINE=PATH adds an older build, interleaved (root: FUSE).
bench-disk: build deps
	$(PYTHON) Benchmarks/disk_stall.py --binary current=$(BIN) $(if $(BASELINE),--binary baseline=$(BASELINE))

# What the metrics cost: server CPU per GB without --metrics, and with it scraped every second.
bench-metrics: build
	python3 Benchmarks/metrics_cost.py --config off=$(BIN) --config scraped=$(BIN),--metrics

# docs/BENCHMARKS.md from the results the benches wrote (results/*.md), each section stamped.
bench-report:
	python3 Benchmarks/report.py

# stampede(8)'s option lists written again from the binary's own flags (Tools/manual.py): after a
# flag or its help changed. The suite fails while docs/stampede.8 is not what this writes.
manual: build
	python3 Tools/manual.py $(BIN) docs/stampede.8 --write

# Hot-path micro-benchmarks; fails if malloc counts (or, threefold, times) exceed Benchmarks/Thresholds.
# A package of their own (Benchmarks/Package.swift), built in Benchmarks/.build.
bench-micro: build-deps
	$(SWIFT) package --package-path Benchmarks benchmark thresholds check --target HotPath --path $(CURDIR)/Benchmarks/Thresholds

bench-thresholds: build-deps
	$(SWIFT) package --package-path Benchmarks --allow-writing-to-package-directory benchmark thresholds update --target HotPath --path $(CURDIR)/Benchmarks/Thresholds

# The interop suite, its tests spread over INTEROP_WORKERS processes (pytest-xdist): most of them
# wait (on clients, timeouts, firmware), so four share two cores; those whose load is CPU, or
# that measure, run one at a time in their groups (Tests/interop/conftest.py, SERIAL_GROUPS).
INTEROP_WORKERS ?= 4
INTEROP = STAMPEDE_BIN=$(CURDIR)/$(PACKAGED_BIN) $(PYTHON) -m pytest -q -rs --durations=40 -n $(INTEROP_WORKERS) --dist loadgroup Tests/interop
interop: deb deps package-deps boot-kernel secure-boot unstable-boot
	$(INTEROP)

# What the suite needs made first, side by side (make -j): the release build and the package
# while debootstrap makes the two Debian trees and the boot kernel is fetched (a clean clone's
# first run spends minutes on each). The fuzz harnesses build after the release build, not
# beside it: two Swift builds at once on 2 cores took longer than one after the other (clean
# clone: 861 s to the end of the unit tests with them side by side, about 600 s without); after
# it, they take the CPU the package's lintian and the trees leave.
test-prepare: deps parity-deps secure-boot unstable-boot package-deps boot-kernel deb sanitize .build/floor-lockstep .build/pixieapi fuzz-short

# make test's short round of fuzzing (a make fuzz of 5 s a target, unoptimized).
fuzz-short: build
	$(MAKE) fuzz FUZZ_SECONDS=5 FUZZ_SWIFTC_FLAGS="-Xswiftc -Onone" FUZZ_BUILD=.build-fuzz-short

test:
	@date +'%T make test: the builds, the package, the Debian trees, the fuzz targets'
	$(MAKE) -j4 --output-sync=target test-prepare
	@date +'%T make test: the unit tests'
	$(SWIFT) test
	@date +'%T make test: the interop suite'
	$(INTEROP)

# What the firmware test boots over HTTP (Tests/interop/test_firmware.py): Debian's kernel, the
# one linux-image-amd64 names, out of its package (downloaded once, not installed), and the
# static PID 1 of its initramfs.
BOOT_KERNEL := .build/boot-kernel
boot-kernel: $(BOOT_KERNEL)/vmlinuz $(BOOT_KERNEL)/init
$(BOOT_KERNEL)/vmlinuz: | deps
	mkdir -p $(BOOT_KERNEL)
	image=$$(apt-cache depends linux-image-amd64 | sed -n 's/^ *Depends: \(linux-image-[^ ]*\)$$/\1/p' | head -1); \
	cd $(BOOT_KERNEL) && { apt-get download -q $$image 2>/dev/null || { $(SUDO) apt-get update -qq && apt-get download -q $$image; }; } && \
	dpkg-deb --fsys-tarfile $${image}_*.deb | tar -xO --wildcards './boot/vmlinuz-*' > vmlinuz.part && mv vmlinuz.part vmlinuz && rm -f $${image}_*.deb
$(BOOT_KERNEL)/init: Tests/interop/initrd/init.c
	mkdir -p $(BOOT_KERNEL) && $(CC) -static -Os -Wall -Wextra -Werror -o $@ $<

# The Debian package, stampede_VERSION_ARCH.deb (and its -dbgsym) in .build/deb: debhelper
# packages a staging tree that holds the static binary, the man page (docs/stampede.8), the
# shell completions the binary writes, the units of contrib/systemd and debian/; lintian must
# find no error and no warning (none is overridden).
# The version is Stampede.version's, the one -V and stampede_build_info say.
VERSION := $(shell sed -n 's/^ *static let version = "\(.*\)"$$/\1/p' Sources/stampede/Stampede.swift)
DEB_ARCH := $(shell dpkg --print-architecture)
DEB_DIR := .build/deb
DEB := $(DEB_DIR)/stampede_$(VERSION)_$(DEB_ARCH).deb
STAGE := $(DEB_DIR)/stampede-$(VERSION)
# The binary as the package ships it (stripped): the one the interop suite runs.
PACKAGED_BIN := $(DEB_DIR)/root/usr/sbin/stampede
MAINTAINER := $(shell sed -n 's/^Maintainer: //p' debian/control)
deb: build deps
	rm -rf $(DEB_DIR) && mkdir -p $(STAGE)/completions/bash $(STAGE)/completions/zsh $(STAGE)/completions/fish $(STAGE)/examples
	cp -r debian $(STAGE)/ && cp $(BIN) README.md $(STAGE)/ && mkdir -p $(STAGE)/docs && cp docs/*.md $(STAGE)/docs/
	python3 Tools/manual.py $(BIN) docs/stampede.8 | sed 's/@VERSION@/$(VERSION)/' > $(STAGE)/stampede.8
	$(BIN) --generate-completion-script bash | sed "1{/^#!/d}" > $(STAGE)/completions/bash/stampede
	$(BIN) --generate-completion-script zsh > $(STAGE)/completions/zsh/_stampede
	$(BIN) --generate-completion-script fish > $(STAGE)/completions/fish/stampede.fish
	for unit in stampede.service stampede.socket; do sed 's|@SBINDIR@|/usr/sbin|g' contrib/systemd/$$unit > $(STAGE)/debian/$$unit; done
	cp contrib/systemd/stampede.sysusers $(STAGE)/debian/stampede.sysusers
	sed 's|@SBINDIR@|/usr/sbin|g' contrib/systemd/stampede-standalone.service > $(STAGE)/examples/stampede-standalone.service
	cp contrib/inetd/inetd.conf contrib/systemd/stampede-http.conf contrib/systemd/stampede-proxy-dhcp.conf contrib/systemd/stampede-proxy-dhcp6.conf \
		contrib/systemd/stampede-https.socket contrib/systemd/stampede-https.conf $(STAGE)/examples/
	printf 'stampede (%s) unstable; urgency=medium\n\n  * Stampede %s, built from commit %s.\n\n -- %s  %s\n' \
		'$(VERSION)' '$(VERSION)' "$$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" '$(MAINTAINER)' \
		"$$(git log -1 --format=%aD 2>/dev/null || date -R)" > $(STAGE)/debian/changelog
	cd $(STAGE) && dpkg-buildpackage --build=binary --unsigned-source --unsigned-changes > ../build.log 2>&1 || { tail -30 ../build.log; exit 1; }
	lintian --fail-on error,warning $(DEB_DIR)/stampede_$(VERSION)_$(DEB_ARCH).changes
	dpkg-deb -x $(DEB) $(DEB_DIR)/root
	@ls -l $(DEB_DIR)/*.deb $(PACKAGED_BIN)

# A minimal tree of this machine's own Debian release, for Tests/interop/test_package.py: a host
# that has never seen Swift, where the package is installed, run, swapped with tftpd-hpa and
# purged (through an overlay: the tree stays as made). Made once with debootstrap (about a
# minute) and kept under .build; what the package depends on and tftpd-hpa wait, downloaded and
# not installed, in its apt cache, so that the test needs no network.
HOST_TREE := .build/host-tree
HOST_RELEASE := $(shell . /etc/os-release && echo $$VERSION_CODENAME)
# What the tests install into it: the package's dependencies both ways (systemd, the first of its
# alternatives, which apt picks by itself, and the standalone sysusers) and tftpd-hpa. The suite
# runs in network namespaces of its own, with no way out: what apt needs must be here before.
HOST_TREE_DOWNLOADS := liburing2 libssl3 systemd tftpd-hpa | systemd-standalone-sysusers
package-deps: deps
	@if [ ! -x $(HOST_TREE)/usr/bin/apt-get ]; then \
		echo "making $(HOST_TREE): Debian $(HOST_RELEASE), minbase (debootstrap)"; \
		$(SUDO) rm -rf $(HOST_TREE).new && \
		$(SUDO) debootstrap --variant=minbase $(HOST_RELEASE) $(HOST_TREE).new http://deb.debian.org/debian >$(HOST_TREE).log 2>&1 || \
			{ tail -20 $(HOST_TREE).log; exit 1; }; \
		mv $(HOST_TREE).new $(HOST_TREE); \
	fi
	@if [ "$$(cat $(HOST_TREE)/.downloaded 2>/dev/null)" != "$(HOST_TREE_DOWNLOADS)" ]; then \
		echo "downloading into $(HOST_TREE)'s apt cache: $(HOST_TREE_DOWNLOADS)"; \
		$(SUDO) chroot $(HOST_TREE) apt-get update -qq >>$(HOST_TREE).log 2>&1 && \
		echo '$(HOST_TREE_DOWNLOADS)' | tr '|' '\n' | while read -r set; do \
			$(SUDO) chroot $(HOST_TREE) env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
				--download-only --no-install-recommends $$set >>$(HOST_TREE).log 2>&1 || \
				{ tail -20 $(HOST_TREE).log; exit 1; }; \
		done && \
		echo '$(HOST_TREE_DOWNLOADS)' | $(SUDO) tee $(HOST_TREE)/.downloaded >/dev/null; \
	fi

# The binary in $(PREFIX)/sbin, beside where in.tftpd lives; UNITS=1 adds the systemd units
# (contrib/systemd: standalone with /etc/default/tftpd-hpa, or socket-activated as the user tftp,
# which the sysusers file makes); the drop-ins and stampede-https.socket stay examples, as the
# package ships them.
SBINDIR = $(PREFIX)/sbin
UNITDIR ?= /lib/systemd/system
UNITS ?=
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(SBINDIR)/stampede
	@if [ -n "$(UNITS)" ]; then \
		for unit in contrib/systemd/stampede.service contrib/systemd/stampede.socket contrib/systemd/stampede-standalone.service; do \
			install -d $(DESTDIR)$(UNITDIR) && \
			sed 's|@SBINDIR@|$(SBINDIR)|g' $$unit > $(DESTDIR)$(UNITDIR)/$$(basename $$unit) && \
			chmod 0644 $(DESTDIR)$(UNITDIR)/$$(basename $$unit) && echo "installed $(DESTDIR)$(UNITDIR)/$$(basename $$unit)"; \
		done; \
		install -D -m 0644 contrib/systemd/stampede.sysusers $(DESTDIR)/usr/lib/sysusers.d/stampede.conf && \
		echo "installed $(DESTDIR)/usr/lib/sysusers.d/stampede.conf (the tftp user)"; \
		[ -z "$(DESTDIR)" ] && command -v systemd-sysusers >/dev/null && systemd-sysusers stampede.conf || true; \
		command -v systemctl >/dev/null && [ -z "$(DESTDIR)" ] && systemctl daemon-reload || true; \
	fi

clean:
	rm -rf .build .build-fuzz .build-fuzz-short Benchmarks/.build
