import StampedeBase
import StampedeIO
import StampedeProtocol
import Synchronization

/// Work handed to the disk thread (`DiskWork`) and its outcome heard back: a worker's loop never
/// waits for the disk to fsync. An upload's last block written, its transfer is `.committing`:
/// the worker hands the `Upload` over (and touches it no more), the disk thread commits it and
/// posts the outcome here and wakes the loop through its mailbox (`loads.wake`), and that turn
/// sends the last ACK (or the ERROR).
extension Worker {
    func commit(_ slot: Int, now: Nanoseconds) {
        guard let upload = table[slot].upload else { return }
        table[slot].phase = .committing
        wheel.cancel(slot)
        diskPending += 1
        let tag = table.tag(of: slot)
        // The disk thread touches the upload, then only the worker's mailbox (a mutex).
        disk.submit { [self] in
            var failure: Errno?
            do throws(Errno) { try upload.commitFile() } catch { failure = error }
            diskOutcomes.withLock { $0.append((tag, failure)) }
            loads.wake()
        }
    }

    /// The outcomes the disk thread posted since the last turn: each commit's transfer sends its
    /// last ACK and dallies, or its ERROR and ends.
    func collectDiskOutcomes(now: Nanoseconds) {
        guard diskPending > 0 else { return }
        let outcomes = diskOutcomes.withLock { outcomes in
            defer { outcomes.removeAll(keepingCapacity: true) }
            return outcomes
        }
        for (tag, failure) in outcomes {
            diskPending -= 1
            guard let slot = table.slot(for: tag), table[slot].phase == .committing else { continue }
            if let failure {
                // Disk full, an I/O error: the temporary file is gone, the target as it was.
                sendError(slot, failure.tftpError)
                table[slot].phase = .receiving
                finish(slot, .serverError(failure.tftpError), now: now)
            } else {
                committed(slot, now: now)
            }
        }
    }
}
