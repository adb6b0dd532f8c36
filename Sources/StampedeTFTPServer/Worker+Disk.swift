import StampedeBase
import StampedeFiles
import StampedeIO
import StampedeProtocol
import Synchronization

/// What a worker hands the disk thread of an upload.
enum UploadWork: Sendable {
    /// The blocks gathered so far (a window, at least 64 KiB: `Upload.beginWrite`).
    case write
    /// The rest, then trim, fsync, rename, the directory's fsync.
    case commit
}

/// Work handed to the disk thread (`DiskWork`, one job after another) and its outcome heard back:
/// a worker's loop never writes an upload's file nor waits for the disk to fsync it. The worker
/// gathers an upload's blocks and hands them over a window (at least 64 KiB) at a time; while that
/// write runs it gathers the next window, and if that one is full too it holds the client's ACK
/// (`Transfer.ackHeld`) until the write is done, so a slow disk slows that upload alone (blocks
/// sent past the window meanwhile are dropped: `Upload.hasRoom`). Its last block taken, the transfer is `.committing`:
/// the disk thread writes the rest and commits, after any write still running; the outcome is
/// posted here and wakes the loop through its mailbox (`loads.wake`), and that turn sends the last
/// ACK (or the ERROR).
extension Worker {
    /// The upload's last block is taken: its commit goes to the disk thread.
    func commit(_ slot: Int, now: Nanoseconds) {
        guard let upload = table[slot].upload else { return }
        table[slot].phase = .committing
        table[slot].ackHeld = false
        wheel.cancel(slot)
        hand(upload, of: slot, .commit)
    }

    /// Hands the blocks the upload gathered to the disk thread, unless a write of it runs: false
    /// then, and the caller holds the ACK.
    func writeGathered(_ slot: Int, _ upload: Upload) -> Bool {
        guard upload.beginWrite() else { return false }
        hand(upload, of: slot, .write)
        return true
    }

    private func hand(_ upload: Upload, of slot: Int, _ work: UploadWork) {
        diskPending += 1
        let tag = table.tag(of: slot)
        // The disk thread touches the upload's file, then only the worker's mailbox (a mutex).
        disk.submit { [self] in
            var failure: Errno?
            do throws(Errno) {
                switch work {
                case .write: try upload.writeStaged()
                case .commit: try upload.commitFile()
                }
            } catch { failure = error }
            diskOutcomes.withLock { $0.append((tag, work, failure)) }
            loads.wake()
        }
    }

    /// The outcomes the disk thread posted since the last turn: a write's upload hands over what
    /// gathered meanwhile and lets its held ACK go; a commit's transfer sends its last ACK and
    /// dallies; either one's failure sends its ERROR and ends the transfer.
    func collectDiskOutcomes(now: Nanoseconds) {
        guard diskPending > 0 else { return }
        let outcomes = diskOutcomes.withLock { outcomes in
            defer { outcomes.removeAll(keepingCapacity: true) }
            return outcomes
        }
        for (tag, work, failure) in outcomes {
            diskPending -= 1
            guard let slot = table.slot(for: tag) else { continue }
            switch work {
            case .write: wrote(slot, failure: failure, now: now)
            case .commit: committed(slot, failure: failure, now: now)
            }
        }
    }

    private func wrote(_ slot: Int, failure: Errno?, now: Nanoseconds) {
        guard let upload = table[slot].upload else { return }
        upload.wrote()
        // Committing: the commit, after this write on the same thread, says how both went.
        guard table[slot].phase == .receiving else { return }
        if let failure {
            // Disk full, an I/O error: the temporary file goes with the transfer.
            sendError(slot, failure.tftpError)
            finish(slot, .serverError(failure.tftpError), now: now)
            return
        }
        if upload.writeIsDue { _ = writeGathered(slot, upload) }
        if table[slot].ackHeld {
            // The client waited for this ACK: it says every block taken, and the wait for the
            // next block starts now.
            table[slot].ackHeld = false
            let receiver = table[slot].receiver!
            sendReply(slot, .ack(receiver.numbering.wire(receiver.received)))
            table[slot].receiver!.replied(now: now)
            scheduleTimer(slot)
        }
    }

    private func committed(_ slot: Int, failure: Errno?, now: Nanoseconds) {
        guard table[slot].phase == .committing else { return }
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
