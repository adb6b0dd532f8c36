import ArgumentParser
import Glibc

@main
struct Stampede: ParsableCommand {
    static let version = "0.1.0"

    static let configuration = CommandConfiguration(
        commandName: "stampede",
        abstract: "A TFTP server for booting whole racks at once; a drop-in for in.tftpd.",
        discussion: """
            With no subcommand, stampede serves (the in.tftpd command line):
              stampede -l -s -a 127.0.0.1:6969 /srv/tftp
            It is also a client (get, put), a load generator (storm), and writes the CA
            list UEFI HTTPS Boot trusts (tls-ca).
            Installed (or linked) as in.tftpd, it is the server alone, as tftpd-hpa's is.
            """,
        subcommands: [ServeCommand.self, Get.self, Put.self, Storm.self, TLSCA.self, Machines.self],
        defaultSubcommand: ServeCommand.self
    )

    /// The name this process was started under (syslog's identity, as in.tftpd uses its own).
    static let invokedName: String = {
        let path = CommandLine.arguments.first ?? "stampede"
        return path.split(separator: "/").last.map(String.init) ?? "stampede"
    }()

    /// The in.tftpd whose command line, options and remap language Stampede takes.
    static let compatibleWith = "tftp-hpa 7.3"

    /// What -V prints: in.tftpd 7.3's lines (under tftpd-hpa's names the first starts as its
    /// does, so that a script that reads the version of "tftp-hpa" finds one), and what this
    /// build and kernel have.
    static func versionText(ioURing: (available: Bool, reason: String)) -> String {
        let first = isInTFTPD ? "\(compatibleWith) compatible (stampede \(version))"
                              : "stampede \(version) (\(compatibleWith) compatible command line)"
        return """
            \(first)
            Filename remap: yes
            I/O threads:    yes (one worker per core)
            Capabilities:   none
            Jail:           yes (openat2)
            Backends:       glibc, io_uring (\(ioURing.available ? "works here" : "not here: \(ioURing.reason)"))
            tcpwrappers:    no
            """
    }

    static var isInTFTPD: Bool { ["in.tftpd", "tftpd"].contains(invokedName) }

    /// As in.tftpd, every argument belongs to the server: "get" is then a directory name.
    static func main() {
        // A write to a connection its peer closed fails (EPIPE) instead of ending the process:
        // sendfile and OpenSSL's writes take no MSG_NOSIGNAL (the servers', and storm's HTTPS).
        signal(SIGPIPE, SIG_IGN)
        let arguments = spellingOut(Array(CommandLine.arguments.dropFirst()))
        if isInTFTPD {
            ServeCommand.main(arguments)
        } else {
            main(arguments)
        }
    }

    /// in.tftpd's options whose value may be left out, which the parser does not take:
    /// `--stderr=FORMAT` and `--stdout=FORMAT` said as `--stderr --logformat FORMAT`, and a bare
    /// `--normalize` as `--normalize=path` (its default; the next word is not its value).
    static func spellingOut(_ arguments: [String]) -> [String] {
        arguments.flatMap { argument -> [String] in
            for flag in ["--stderr", "--stdout"] where argument.hasPrefix(flag + "=") {
                return [flag, "--logformat", String(argument.dropFirst(flag.count + 1))]
            }
            if argument == "--normalize" { return ["--normalize=path"] }
            return [argument]
        }
    }
}
