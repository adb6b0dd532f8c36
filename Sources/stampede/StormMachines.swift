import ArgumentParser
import StampedeMachines
import StampedeStorm

extension Storm {
    /// `--machines DIR`: the records a server boots by (`serve --machines`), each that selects a
    /// MAC one machine of the storm, with that MAC and the record's UUID; a record with a kernel
    /// says what its iPXE script must name.
    static func machines(from directory: String, into plan: inout StormPlan) throws {
        let book: MachineBook
        do { book = try MachineDirectory(directory, reading: true).read(unknown: .ignore) } catch {
            throw ValidationError("--machines \(directory):\n" + error.errors.map(\.description).joined(separator: "\n"))
        }
        for record in book.records {
            guard let mac = record.selectors.lazy.compactMap({ entry -> [UInt8]? in
                if case .hardwareAddress(let mac) = entry.selector { return mac } else { return nil }
            }).first else { continue }
            let uuid = record.selectors.lazy.compactMap { entry -> [UInt8]? in
                guard case .uuid(let text) = entry.selector else { return nil }
                let digits = Array(text.filter(\.isHexDigit))
                return digits.count == 32 ? stride(from: 0, to: 32, by: 2).map { UInt8(String(digits[$0...$0 + 1]), radix: 16)! } : nil
            }.first
            plan.machineList.append((mac, uuid))
            if let boot = record.boot { plan.machineBoots[mac] = PlannedBoot(kernel: boot.kernel, initrds: boot.initrds) }
        }
        guard !plan.machineList.isEmpty else { throw ValidationError("--machines \(directory): no record selects a machine by its MAC.") }
        if let total = plan.total, total > plan.machineList.count {
            throw ValidationError("--total \(total): --machines \(directory) has \(plan.machineList.count) machines.")
        }
        plan.total = plan.total ?? plan.machineList.count
    }
}
