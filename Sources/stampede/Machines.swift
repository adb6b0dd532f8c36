import ArgumentParser
import Glibc
import StampedeDHCP
import StampedeIO
import StampedeMachines

/// `stampede machines`: what the machine records (`serve --machines DIR`) say and do, from the
/// command line.
struct Machines: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "machines", abstract: "Act on the machine records of serve --machines DIR.", subcommands: [Done.self])

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
