import ArgumentParser

@main
struct Stampede: ParsableCommand {
    static let version = "0.1.0"

    static let configuration = CommandConfiguration(
        commandName: "stampede",
        abstract: "A TFTP server for booting whole racks at once; a drop-in for in.tftpd.",
        discussion: """
            With no subcommand, stampede serves (the in.tftpd command line):
              stampede -l -s -a 127.0.0.1:6969 /srv/tftp
            It is also a client (get, put) and a load generator (storm).
            """,
        subcommands: [Serve.self, Get.self, Put.self, Storm.self],
        defaultSubcommand: Serve.self
    )
}
