import ArgumentParser
import Glibc
import StampedeDHCP
import StampedeIO
import StampedeMachines
import StampedeHTTPWire

/// `stampede machines`: what the machine records (`serve --machines DIR`) say and do, from the
/// command line.
struct Machines: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "machines", abstract: "Show the machines a server boots by its records (serve --machines DIR), or say one is done.",
        subcommands: [List.self, Done.self], defaultSubcommand: List.self)

    /// `stampede machines [list] --metrics HOST:PORT`: the server's `/machines` as a table.
    struct List: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "Print how far each machine's boot got, from a server's metrics listener (GET /machines).",
            discussion: """
                A machine a line: its MAC, its record, its stage (left_alone, dhcp, boot_file, script, kernel, initrd, done),
                its address, when it was last heard of, and why it was left alone; then how many machines are at each stage.
                  stampede machines --metrics 10.0.0.1:9469 --stage dhcp
                """)

        @Option(name: .customLong("metrics"), help: ArgumentHelp("The server's --metrics listener (default: 127.0.0.1:9469).", valueName: "HOST:PORT"))
        var metrics = "127.0.0.1:9469"
        @Option(name: .customLong("stage"), help: ArgumentHelp("Only the machines at this stage.", valueName: "STAGE"))
        var stage: String?

        func validate() throws {
            let stages = MachineProgress.Stage.allCases.map(\.label)
            if let stage, !stages.contains(stage) { throw ValidationError("--stage \(stage): one of \(stages.joined(separator: ", ")).") }
        }

        func run() throws {
            let url = "http://\(metrics)/machines"
            do {
                let rows = try ProgressTable.rows(try HTTPClient.body(url))
                print(ProgressTable.table(rows, now: Int(time(nil)), stage: stage), terminator: "")
            } catch let failure as HTTPClient.Failure {
                writeToStandardError("stampede machines: \(failure)\n")
                throw ExitCode(69)
            } catch {
                writeToStandardError("stampede machines: \(url): \(error)\n")
                throw ExitCode(76)
            }
        }
    }

    /// `stampede machines done MAC --machines DIR`: what a machine's done URL does, by hand.
    struct Done: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "done",
            abstract: "Say that a machine's boot is done: a record that boots it once leaves it to its disk from now on.",
            discussion: """
                Writes DIR/.done-<mac>, as the machine's done URL does; a server watching DIR reads it at once.
                Remove the file to boot the machine again.
                  stampede machines done 52:54:00:12:34:56 --machines /etc/stampede/machines
                """)

        @Argument(help: ArgumentHelp("The machine's hardware address (52:54:00:12:34:56).", valueName: "MAC")) var mac: String
        @Option(name: .customLong("machines"), help: ArgumentHelp("The records' directory, as serve --machines names it.", valueName: "DIR"))
        var directory: String

        func validate() throws {
            if MachineRecord.hardwareAddress(mac) == nil { throw ValidationError("\(mac): not a hardware address like 52:54:00:12:34:56.") }
        }

        func run() throws {
            let address = MachineRecord.hardwareAddress(mac)!
            let records: MachineDirectory
            let book: MachineBook
            do {
                records = try MachineDirectory(directory)
                book = try records.read(unknown: .ignore)
            } catch {
                writeToStandardError(error.errors.map { "stampede machines done: \($0)\n" }.joined())
                throw ExitCode(78)
            }
            guard let record = book.record(for: MachineIdentity(hardwareAddress: address)), record.once else {
                writeToStandardError("stampede machines done: no record in \(directory) boots \(mac) once (once = yes): nothing to be done\n")
                throw ExitCode(65)
            }
            do {
                let written = try records.replace(MachineDirectory.doneFile(for: address), "done \(time(nil))\n")
                print("\(mac): done (\(record.name)): its next boot is from its disk (\(written))")
            } catch {
                writeToStandardError("stampede machines done: cannot write in \(directory): \(error)\n")
                throw ExitCode(73)
            }
        }
    }
}
