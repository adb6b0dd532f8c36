import CStampedeSys

/// A network interface, as the kernel names and numbers it.
public struct NetworkInterface: Equatable, Sendable {
    public var name: String
    public var index: Int32

    public init(name: String, index: Int32) {
        self.name = name
        self.index = index
    }

    /// The interface that holds `address` (an address of this host), or ENOENT.
    public static func holding(_ address: SocketAddress) throws(Errno) -> NetworkInterface {
        var storage = address.storage
        var name = [CChar](repeating: 0, count: 64)
        let result = stampede_interface_of(&storage, &name, name.count)
        if let error = Errno(result: result) { throw error }
        return NetworkInterface(name: String(decoding: name.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self),
                                index: result)
    }
}
