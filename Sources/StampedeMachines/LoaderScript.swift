/// What each loader reads, written for one machine from its record's `RenderedBoot` (its values
/// checked when the record was read), or, for a machine to boot from its disk or not from here,
/// what tells the loader to go back to the firmware's next boot device.
public enum LoaderScript {
    /// iPXE's script (`boot.ipxe`, `autoexec.ipxe`): a path is written from the root (`/path`),
    /// which iPXE takes on the server and in the protocol the script came from, wherever the
    /// script was asked (a signed iPXE asks `autoexec.ipxe` in its own directory). Each initrd is
    /// named on the kernel's command line (`initrd=NAME`), as UEFI kernels loaded by iPXE need.
    public static func iPXE(_ boot: RenderedBoot?, for name: String) -> String {
        let record = safe(name)
        guard let boot else { return "#!ipxe\n# \(record): not booted from the network here\nexit\n" }
        // Written into one string: a rack's every machine asks for its script within seconds.
        var script = "#!ipxe\n# "
        script.reserveCapacity(256)
        script += record
        script += "\n"
        if let message = boot.message { script += "echo \(message)\n" }
        script += "kernel "
        script += fromRoot(boot.kernel)
        for initrd in boot.initrds {
            script += " initrd="
            script += initrd.lastPathComponent
        }
        if !boot.commandLine.isEmpty {
            script += " "
            script += boot.commandLine
        }
        script += "\n"
        for initrd in boot.initrds {
            script += "initrd "
            script += fromRoot(initrd)
            script += "\n"
        }
        return script + "boot\n"
    }

    /// A URL as it is; a path beneath the root as `/path`.
    static func fromRoot(_ location: String) -> String {
        location.containsBytes("://") || location.hasPrefix("/") ? location : "/" + location
    }

    /// iPXE's script while the machine API is asked what the machine boots: a second's wait,
    /// then `name` (the script asked, beside itself) again.
    public static func iPXEWaiting(again name: String) -> String {
        "#!ipxe\n# the machine API is being asked what this machine boots\nsleep 1\nchain --replace --autofree \(name)\n"
    }

    /// GRUB's configuration (`grub.cfg-01-<mac>`): a path from the boot server's root, a URL as
    /// GRUB's network device names it (`(http,host:port)/path`).
    public static func grub(_ boot: RenderedBoot?, for name: String) -> String {
        let record = safe(name)
        guard let boot else { return "# \(record): not booted from the network here\nexit\n" }
        return """
            # \(record)
            set timeout=0
            menuentry "\(record.split(separator: "/").last.map(String.init) ?? record)" {
                linux \(grubPath(boot.kernel))\(boot.commandLine.isEmpty ? "" : " " + boot.commandLine)
            \(boot.initrds.isEmpty ? "" : "    initrd " + boot.initrds.map(grubPath).joined(separator: " ") + "\n")}

            """
    }

    /// PXELINUX's configuration (`pxelinux.cfg/01-<mac>`).
    public static func pxelinux(_ boot: RenderedBoot?, for name: String) -> String {
        let record = safe(name)
        guard let boot else { return "# \(record): not booted from the network here\nDEFAULT local\nLABEL local\n  LOCALBOOT 0\n" }
        return "# \(record)\nDEFAULT stampede\nLABEL stampede\n  KERNEL \(boot.kernel)\n"
            + (boot.initrds.isEmpty ? "" : "  INITRD \(boot.initrds.joined(separator: ","))\n")
            + (boot.commandLine.isEmpty ? "" : "  APPEND \(boot.commandLine)\n")
    }

    /// A record's name as a script may hold it: letters, digits and `-._/`, the rest `_` (a file's
    /// name may hold anything, a newline too).
    static func safe(_ name: String) -> String {
        String(decoding: name.utf8.map { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "/"): byte
            default: UInt8(ascii: "_")
            }
        }, as: UTF8.self)
    }

    /// `http://host:port/path` → `(http,host:port)/path`; a path → `/path`.
    static func grubPath(_ location: String) -> String {
        for scheme in ["http", "tftp"] {
            let prefix = scheme + "://"
            guard location.lowercased().hasPrefix(prefix) else { continue }
            let rest = location.dropFirst(prefix.count)
            let slash = rest.firstIndex(of: "/") ?? rest.endIndex
            return "(\(scheme),\(rest[..<slash]))" + (slash == rest.endIndex ? "/" : String(rest[slash...]))
        }
        return fromRoot(location)
    }
}
