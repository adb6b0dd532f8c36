import StampedeFiles
import StampedeIO
import StampedeProtocol
import StampedeServing

// How TFTP says what the file service and the limits refuse: its ERROR codes and messages, and the
// class each refusal has in the metrics.

extension Errno {
    /// The TFTP error a client gets for a failed file operation.
    var tftpError: TFTPError { TFTPError(fileRefusal) }
}

extension TFTPError {
    /// A file refusal as TFTP says it: its code and its message.
    public init(_ refusal: FileRefusal) {
        switch refusal.reason {
        case .notFound: self.init(.fileNotFound, refusal.message)
        case .denied: self.init(.accessViolation, refusal.message)
        case .diskFull: self.init(.diskFull, refusal.message)
        case .exists: self.init(.fileExists, refusal.message)
        case .busy: self.init(.notDefined, refusal.message, busy: true)
        case .failed: self.init(.notDefined, refusal.message)
        }
    }
}

extension Admission {
    /// The limits a server's configuration sets.
    public convenience init(_ configuration: ServerConfiguration) {
        self.init(maxTransfers: configuration.maxTransfers, maxPerClient: configuration.maxTransfersPerClient,
                  maxPerPrefix: configuration.maxTransfersPerPrefix, loopbackUncounted: configuration.loopbackUncountedPerClient)
    }
}

extension TFTPError {
    /// A limit's refusal as TFTP says it: ERROR 0, and a busy one (silence unless `--when-busy error`).
    init(_ refusal: Admission.Refusal) {
        self.init(.notDefined, refusal.message, busy: true)
    }
}

extension WorkerMetrics.Result {
    /// The class of a refusal (an ERROR sent, or due when busy).
    init(_ error: TFTPError) {
        if error.isBusy {
            self = .busy
            return
        }
        switch error.code {
        case .fileNotFound: self = .notFound
        case .accessViolation, .fileExists: self = .accessDenied
        case .illegalOperation, .unknownTransferID, .optionNegotiation: self = .protocolError
        default: self = .serverError
        }
    }
}
