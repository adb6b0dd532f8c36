/// The profiles `stampede storm --profile NAME` knows, in the same text format an operator writes
/// for `--profile-file` (`stampede storm --show-profile NAME` prints one to start from). The
/// options, their order, the retransmit intervals and the tries are each firmware's own, from its
/// source; where a firmware's timing is a table or a formula, the line approximates it and says so.
/// Each `reboot` line says what the firmware does when its boot failed, from its source; the count
/// and the delay are the storm's (`storm --reboot` plays them): a real machine goes on retrying
/// as long as it is set to, after a POST much longer than 5 s.
extension BootProfile {
    public static let builtInNames = ["uefi", "ipxe", "pxelinux", "grub", "uboot", "uefi-ipxe", "uefi-ipxe-follow", "uefi-ipxe-tftp", "rpi4",
                                        "uefi-secure-boot", "ipxe2-signed", "arm64"]

    private static let uefiDHCP = """
        # EDK2's PXE DHCP (PxeBcDhcp4Discover): a DISCOVER resent after 4, 8, 16 and 32 s; a proxy's
        # offer without the bypass is followed by the boot server REQUEST on 4011 (storm --dhcp).
        firmware uefi retry=4s tries=4 backoff=8
        dhcp  pxe arch=7
        """

    private static let ipxeDHCP = """
        # iPXE's own DHCP, with its user class: a DISCOVER resent after 1, 2, 4 and 8 s
        # (DHCP_DISC_START_TIMEOUT_SEC to DHCP_DISC_END_TIMEOUT_SEC; storm --dhcp).
        firmware ipxe retry=1s tries=4 backoff=8
        """

    private static let uefiStages = """
        # EDK2's PXE (OVMF, most UEFI servers): PxeBcTftpGetFileSize asks tsize, blksize (the IPv4
        # MTU 1500 - 32) and windowsize (PcdPxeTftpWindowSize, 4 since 2018); it answers the OACK
        # with ERROR 8 and asks again without tsize. A fixed 4 s timeout, 6 tries (PXEBC_MTFTP_*);
        # a block out of order is answered at once with an ACK of the block before the one it
        # expects, and every ACK it sends starts its tries over (Mtftp4RrqHandleData).
        firmware uefi retry=4s tries=6 backoff=1 unexpected=ack
        """

    private static let uefiReboot = """
        # When every boot option failed, EDK2's boot manager tries them again as often as the
        # platform's retry policy says (BootRetryPolicy's AllRetryTime on server firmware, often
        # "unlimited"; upstream OVMF waits at its menu instead). The next try begins with DHCP.
        reboot 3 after=5s
        """

    /// The UEFI PXE loading iPXE over TFTP, and iPXE looking for autoexec.ipxe beside it before
    /// its own DHCP: where the uefi-ipxe chains begin. iPXE runs the autoexec.ipxe it finds (a
    /// machine's record writes one) in place of that DHCP and the script it names.
    private static var uefiToIPXE: String {
        """
        \(uefiDHCP)
        \(uefiStages)
        probe ipxe.efi tsize blksize=1468 windowsize=4
        get   ipxe.efi blksize=1468 windowsize=4
        \(ipxeFirmware)
        try   autoexec.ipxe blksize=1432 tsize follow
        \(ipxeDHCP)
        dhcp  ipxe arch=7
        \(ipxeFirmware)
        """
    }

    /// Shim, as the firmware loaded it: its optional files beside itself (not found is fine),
    /// then its next loader beside itself, each through the firmware's own TFTP (EDK2's, which
    /// adds windowsize) with shim's blksize of 512. Seen in the suite's Secure Boot boot.
    private static func shim(loading loader: String) -> String {
        """
        # shim (16.1) asks its optional revocation and certificate files beside itself, then its
        # next loader, through the firmware's TFTP with blksize 512 (EDK2 adds windowsize).
        try   revocations_sku.efi blksize=512 windowsize=4
        try   revocations_sbat.efi blksize=512 windowsize=4
        try   shim_certificate_0.efi blksize=512 windowsize=4
        get   \(loader) blksize=512 windowsize=4
        """
    }

    /// iPXE 2.0 (and iPXE built since 2022) with no embedded script, as it starts: autoexec.ipxe
    /// beside itself, then at the root (one name twice when it was loaded from the root), before
    /// its own DHCP, whose answer names the script; the one it finds it runs instead.
    private static func ipxeStarts(arch: Int) -> String {
        """
        \(ipxeFirmware)
        try   autoexec.ipxe blksize=1432 tsize follow
        try   autoexec.ipxe blksize=1432 tsize follow
        \(ipxeDHCP)
        dhcp  ipxe arch=\(arch)
        \(ipxeFirmware)
        """
    }

    private static let ipxeFirmware = """
        # iPXE: blksize min(MTU, 1432) and tsize, no windowsize; its retry timer starts at 1/4 s and
        # doubles up to 10 s, then gives up (DEFAULT_MIN_TIMEOUT, DEFAULT_MAX_TIMEOUT).
        firmware ipxe retry=250ms tries=8 backoff=40
        """

    public static let builtInTexts: [String: String] = [
        "uefi": """
            profile uefi
            \(uefiDHCP)
            \(uefiStages)
            probe bootx64.efi tsize blksize=1468 windowsize=4
            get   bootx64.efi blksize=1468 windowsize=4
            \(uefiReboot)
            """,
        "ipxe": """
            profile ipxe
            \(ipxeDHCP)
            dhcp  ipxe arch=0
            \(ipxeFirmware)
            # autoexec.ipxe is looked for first and usually absent; then the script DHCP named.
            try   autoexec.ipxe blksize=1432 tsize
            get   boot.ipxe blksize=1432 tsize
            get   vmlinuz blksize=1432 tsize
            get   initrd.img blksize=1432 tsize
            # iPXE as the network card's ROM: a failed autoboot returns to the BIOS, which tries
            # the next boot device; a rack's BIOS is set to try the network again.
            reboot 3 after=5s
            """,
        "pxelinux": """
            profile pxelinux
            # PXELINUX 6: tsize and blksize 1408, nothing else, and it fails on an option it did not
            # ask for. Its timeouts follow a table from about 1/8 s growing to seconds: approximated.
            # The BIOS's PXE ROM first: its DHCP, as the PXE spec times it (4, 8, 16, 32 s; storm --dhcp).
            firmware pxe retry=4s tries=4 backoff=8
            dhcp  pxe arch=0
            firmware pxelinux retry=125ms tries=12 backoff=16
            get   pxelinux.0 tsize blksize=1408
            get   ldlinux.c32 tsize blksize=1408
            # The config search: UUID, 01-MAC, the IP in hex shortened a digit at a time, default.
            first pxelinux.cfg/${uuid} pxelinux.cfg/01-${mac:hexhyp} pxelinux.cfg/${ip:hex} pxelinux.cfg/${ip:hex:7} pxelinux.cfg/${ip:hex:6} pxelinux.cfg/${ip:hex:5} pxelinux.cfg/${ip:hex:4} pxelinux.cfg/${ip:hex:3} pxelinux.cfg/${ip:hex:2} pxelinux.cfg/${ip:hex:1} pxelinux.cfg/default tsize blksize=1408
            get   vmlinuz tsize blksize=1408
            get   initrd.img tsize blksize=1408
            # "Boot failed: press a key to retry, or wait for reset...": PXELINUX resets the machine.
            reboot 3 after=5s
            """,
        "grub": """
            profile grub
            # GRUB 2 (grubnetx64.efi): blksize 1024 and tsize. It polls 40 times, 400 ms apart
            # growing by 20 ms (GRUB_NET_TRIES, GRUB_NET_INTERVAL): a fixed 400 ms here.
            firmware grub retry=400ms tries=40 backoff=1
            first grub/grub.cfg-01-${mac:hexhyp} grub/grub.cfg-${ip:hex} grub/grub.cfg-${ip:hex:7} grub/grub.cfg-${ip:hex:6} grub/grub.cfg-${ip:hex:5} grub/grub.cfg-${ip:hex:4} grub/grub.cfg-${ip:hex:3} grub/grub.cfg-${ip:hex:2} grub/grub.cfg-${ip:hex:1} grub/grub.cfg blksize=1024 tsize
            # Reading a kernel's header and seeking back closes the file (ERROR "closed") and opens it again.
            head  4096 vmlinuz blksize=1024 tsize
            get   vmlinuz blksize=1024 tsize
            get   initrd.img blksize=1024 tsize
            # A failed `linux` or `initrd` returns to GRUB's menu, whose timeout boots the entry again.
            reboot 3 after=5s
            """,
        "uboot": """
            profile uboot
            # U-Boot: timeout 5, tsize, blksize 1468 (its cap without IP defragmentation), in that
            # order; windowsize only when tftpwindowsize is set. 5 s, 10 tries (TIMEOUT_COUNT).
            firmware uboot retry=5s tries=10 backoff=1
            # `pxe get`: the PXELINUX-style config search, without the UUID.
            first pxelinux.cfg/01-${mac:hexhyp} pxelinux.cfg/${ip:hex} pxelinux.cfg/${ip:hex:7} pxelinux.cfg/${ip:hex:6} pxelinux.cfg/${ip:hex:5} pxelinux.cfg/${ip:hex:4} pxelinux.cfg/${ip:hex:3} pxelinux.cfg/${ip:hex:2} pxelinux.cfg/${ip:hex:1} pxelinux.cfg/default timeout=5 tsize blksize=1468
            get   Image timeout=5 tsize blksize=1468
            get   board.dtb timeout=5 tsize blksize=1468
            get   initrd.img timeout=5 tsize blksize=1468
            # bootretry (CONFIG_BOOT_RETRY_TIME): the board resets when its boot command fails.
            reboot 3 after=5s
            """,
        "rpi4": """
            profile rpi4
            # A Raspberry Pi 4's boot ROM (its EEPROM bootloader, network boot in BOOT_ORDER): a
            # DHCP try every DHCP_REQ_TIMEOUT (4 s) within DHCP_TIMEOUT (45 s), its defaults; it
            # takes only an offer whose option 43 holds "Raspberry Pi Boot" (storm --dhcp).
            firmware rpi4 retry=4s tries=11 backoff=1
            dhcp  rpi arch=0
            # TFTP_FILE_TIMEOUT gives a file 30 s: approximated as 1 s, 30 tries. start4.elf is
            # looked for under the serial number first; found there, every later file comes from
            # there, else the prefix is dropped and the root serves them all.
            firmware rpi4 retry=1s tries=30 backoff=1
            first ${serial}/start4.elf start4.elf
            get   ${dir}fixup4.dat
            # The VideoCore firmware (start4.elf) then reads its configuration, the device tree,
            # the command line and the kernel.
            try   ${dir}config.txt
            get   ${dir}bcm2711-rpi-4-b.dtb
            try   ${dir}cmdline.txt
            get   ${dir}kernel8.img
            # A failed boot goes on to the next mode of BOOT_ORDER; 0xf starts it over.
            reboot 3 after=5s
            """,
        "uefi-secure-boot": """
            profile uefi-secure-boot
            # Secure Boot's chain as Debian ships it (docs/secure-boot.md), each request as the
            # suite's OVMF with Secure Boot on makes it: the UEFI PXE loads shim (offered as
            # shimx64.efi), shim loads GRUB's signed network image beside itself as grubx64.efi.
            \(uefiDHCP)
            \(uefiStages)
            probe shimx64.efi tsize blksize=1468 windowsize=4
            get   shimx64.efi blksize=1468 windowsize=4
            \(shim(loading: "grubx64.efi"))
            # GRUB 2.14 names files from the root: its module lists under its prefix (not found
            # is fine), the prefix's grub.cfg, and what that names.
            firmware grub retry=400ms tries=40 backoff=1
            try   /grub/x86_64-efi/command.lst blksize=1024 tsize
            try   /grub/x86_64-efi/fs.lst blksize=1024 tsize
            try   /grub/x86_64-efi/crypto.lst blksize=1024 tsize
            try   /grub/x86_64-efi/terminal.lst blksize=1024 tsize
            get   /grub/grub.cfg blksize=1024 tsize
            get   /vmlinuz blksize=1024 tsize
            get   /initrd.img blksize=1024 tsize
            \(uefiReboot)
            """,
        "ipxe2-signed": """
            profile ipxe2-signed
            # iPXE 2.0's signed chain (docs/secure-boot.md): the UEFI PXE loads iPXE's shim
            # (offered as shimx64.efi), which loads ipxe.efi beside itself; iPXE, signed and so
            # with no embedded script, looks for autoexec.ipxe, then its DHCP names the script,
            # fetched with what it names over HTTP (the storm's --http).
            \(uefiDHCP)
            \(uefiStages)
            probe shimx64.efi tsize blksize=1468 windowsize=4
            get   shimx64.efi blksize=1468 windowsize=4
            \(shim(loading: "ipxe.efi"))
            \(ipxeStarts(arch: 7))
            http  GET boot.ipxe
            http  GET vmlinuz
            http  GET initrd.img
            \(uefiReboot)
            """,
        "arm64": """
            profile arm64
            # An ARM64 UEFI server (AAVMF in the suite): EDK2's PXE, architecture 11, loads iPXE's
            # arm64 build (ipxe-arm64.efi, the efi-arm64 selector's default); iPXE 2.0 looks for
            # autoexec.ipxe, then its DHCP names the script, fetched with the arm64 kernel and
            # initrd over HTTP (the storm's --http).
            # EDK2's PXE DHCP (PxeBcDhcp4Discover): a DISCOVER resent after 4, 8, 16 and 32 s.
            firmware uefi retry=4s tries=4 backoff=8
            dhcp  pxe arch=11
            \(uefiStages)
            probe ipxe-arm64.efi tsize blksize=1468 windowsize=4
            get   ipxe-arm64.efi blksize=1468 windowsize=4
            \(ipxeStarts(arch: 11))
            http  GET boot.ipxe
            http  GET vmlinuz
            http  GET initrd.img
            \(uefiReboot)
            """,
        "uefi-ipxe": """
            profile uefi-ipxe
            # The chain most racks run: the UEFI PXE loads iPXE over TFTP; iPXE looks for
            # autoexec.ipxe on the TFTP server, then fetches the script DHCP named, and what it
            # names, over HTTP (the storm's --http), on one connection it keeps.
            \(uefiToIPXE)
            http  GET boot.ipxe
            http  GET vmlinuz
            http  GET initrd.img
            \(uefiReboot)
            """,
        "uefi-ipxe-follow": """
            profile uefi-ipxe-follow
            # The same chain, iPXE running the script it fetched as it is written: the kernel,
            # initrds and chained scripts it names, fetched in turn (a machine record's boot,
            # storm --machines: each machine's own).
            \(uefiToIPXE)
            http  GET boot.ipxe follow
            \(uefiReboot)
            """,
        "uefi-ipxe-tftp": """
            profile uefi-ipxe-tftp
            # The same chain on a site without an HTTP server: iPXE reads everything over TFTP.
            \(uefiToIPXE)
            get   boot.ipxe blksize=1432 tsize
            get   vmlinuz blksize=1432 tsize
            get   initrd.img blksize=1432 tsize
            \(uefiReboot)
            """,
    ]
}
