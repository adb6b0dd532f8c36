/// Why a DHCP request got no answer, as the metrics count it.
public enum BootIgnored: Int, CaseIterable, Sendable {
    case malformed, notBootClient, notForProxy, addressRequest, unknownArchitecture, noBootFile, tooManyHops, repeated
    case otherServer, otherBootServerType, bootIntegrityServices, bootFileTooLong
    case machineIgnored, machineLocal, unknownMachine, machineDone, machineAPIAsking

    public init(_ silence: ProxyAnswer.Silence) {
        switch silence {
        case .notBootClient: self = .notBootClient
        case .notForProxy: self = .notForProxy
        case .addressRequest: self = .addressRequest
        case .unknownArchitecture: self = .unknownArchitecture
        case .noBootFile: self = .noBootFile
        case .tooManyHops: self = .tooManyHops
        case .otherServer: self = .otherServer
        case .otherBootServerType: self = .otherBootServerType
        case .bootIntegrityServices: self = .bootIntegrityServices
        case .bootFileTooLong: self = .bootFileTooLong
        case .leftAlone(.ignored): self = .machineIgnored
        case .leftAlone(.local): self = .machineLocal
        case .leftAlone(.done): self = .machineDone
        case .leftAlone(.unknown), .leftAlone(.discovered): self = .unknownMachine
        case .leftAlone(.asking): self = .machineAPIAsking
        }
    }

    /// A DHCPv6 message's silence, counted as its DHCP kin's.
    public init(_ silence: ProxyAnswer6.Silence) {
        switch silence {
        case .malformed, .noClientID: self = .malformed
        case .notBootClient: self = .notBootClient
        case .notForProxy: self = .notForProxy
        case .otherServer: self = .otherServer
        case .tooManyRelays: self = .tooManyHops
        case .unknownArchitecture: self = .unknownArchitecture
        case .noBootFile: self = .noBootFile
        case .leftAlone(let why): self = BootIgnored(ProxyAnswer.Silence.leftAlone(why))
        }
    }

    public var label: String {
        switch self {
        case .malformed: "malformed"
        case .notBootClient: "not_boot_client"
        case .notForProxy: "not_for_proxy"
        case .addressRequest: "address_request"
        case .unknownArchitecture: "unknown_architecture"
        case .noBootFile: "no_boot_file"
        case .tooManyHops: "too_many_hops"
        case .repeated: "repeated"
        case .otherServer: "other_server"
        case .otherBootServerType: "other_boot_server_type"
        case .bootIntegrityServices: "boot_integrity_services"
        case .bootFileTooLong: "boot_file_too_long"
        case .machineIgnored: "machine_ignored"
        case .machineLocal: "machine_local"
        case .unknownMachine: "unknown_machine"
        case .machineDone: "machine_done"
        case .machineAPIAsking: "machine_api_asking"
        }
    }
}
