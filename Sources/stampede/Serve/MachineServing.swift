import Glibc
import Logging
import StampedeDHCP
import StampedeIO
import StampedeMachines

/// What `--machines` makes of a server, each part with its one owner: the records in force and
/// their watch, which machine holds which address (the proxy learns it), how far each machine's
/// boot got (its changes said as JSON events), and the loader files written for each machine (the
/// file service asks them before the root).
struct MachineServing {
    let records: MachineRecords
    let watch: RecordWatch
    let bindings = MachineBindings()
    let progress: MachineProgress
    let boot: MachineBoot

    /// `httpBase`: where done URLs point (the first boot network's HTTP).
    init(records: MachineRecords, watch: RecordWatch, httpBase: String?, logger: Logger, json: Bool) {
        self.records = records
        self.watch = watch
        // Told of each change only when it is said: JSON events, or the debug log.
        let said: @Sendable (MachineProgress.Entry) -> Void = { entry in
            if json {
                let mac = entry.mac.hardwareAddressText()
                logger.info("machine", metadata: [
                    "event": "machine", "client": "\(mac)", "stage": "\(entry.stage.label)", "record": "\(entry.record ?? "")",
                    "why": "\(entry.why ?? "")", "address": "\(entry.address?.host ?? "")",
                ])
            } else {
                logger.debug("machine \(entry.mac.hardwareAddressText())\(entry.record.map { " (\($0))" } ?? ""): \(entry.stage.label)\(entry.why.map { ": \($0)" } ?? "")")
            }
        }
        progress = MachineProgress(changed: json || logger.logLevel <= .debug ? said : nil)
        boot = MachineBoot(records: records, bindings: bindings, httpBase: httpBase, progress: progress)
    }
}
