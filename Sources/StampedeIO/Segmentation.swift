import CStampedeSys
import Glibc

/// Whether a backend sends a window of DATA as one segmented send (UDP GSO, `UDP_SEGMENT`): the
/// kernel walks its UDP/IP path once for the whole run and cuts it into datagrams at the device,
/// or in software just before it where the device cannot. The client receives exactly the
/// datagrams it would have received one by one.
public enum Segmentation: Sendable, Equatable, CustomStringConvertible {
    /// Windows go out as one send each.
    case on
    /// Turned off (`--no-gso`): one datagram per send, as before.
    case off
    /// The kernel refused `UDP_SEGMENT`: one datagram per send.
    case unavailable(String)

    /// The most datagrams one segmented send carries, and the most bytes in all (the kernel's
    /// limits: 64 segments, one UDP datagram's worth of payload).
    public static let maximumSegments = Int(STAMPEDE_SEGMENTS_MAX)
    public static let maximumBytes = Int(STAMPEDE_SEGMENTED_BYTES_MAX)

    /// What a backend asked for `requested` uses: `.on` where the kernel takes UDP_SEGMENT.
    public static func probe(requested: Bool) -> Segmentation {
        guard requested else { return .off }
        let result = stampede_segment_probe(AF_INET)
        if let error = Errno(result: result) { return .unavailable("the kernel refuses UDP_SEGMENT: \(error)") }
        return .on
    }

    /// How many datagrams of `datagramSize` bytes (header + payload) one segmented send carries.
    public static func segmentsPerSend(datagramSize: Int) -> Int {
        max(1, min(maximumSegments, maximumBytes / max(1, datagramSize)))
    }

    public var isOn: Bool { self == .on }

    public var description: String {
        switch self {
        case .on: return "windows sent with UDP GSO"
        case .off: return "no UDP GSO (--no-gso)"
        case .unavailable(let reason): return "no UDP GSO (\(reason))"
        }
    }
}
