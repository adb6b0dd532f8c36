/// RFC 1350 netascii on a Unix host: newline LF travels as CR LF, a bare CR as CR NUL.
public enum Netascii {
    /// Size of `bytes` once encoded.
    public static func encodedCount(of bytes: UnsafeRawBufferPointer) -> Int {
        var count = bytes.count
        for byte in bytes where byte == 0x0A || byte == 0x0D { count += 1 }
        return count
    }

    /// Encodes a whole file image at once: a read converts once per image, never per packet,
    /// so a CR LF pair is never split across a block boundary by the conversion.
    public static func encode(_ bytes: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) -> Int {
        var o = 0
        for byte in bytes {
            switch byte {
            case 0x0A:
                out[o] = 0x0D; out[o + 1] = 0x0A; o += 2
            case 0x0D:
                out[o] = 0x0D; out[o + 1] = 0x00; o += 2
            default:
                out[o] = byte; o += 1
            }
        }
        return o
    }

    public static func encode(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBytes { input in
            [UInt8](unsafeUninitializedCapacity: encodedCount(of: input)) { buffer, count in
                count = encode(input, into: UnsafeMutableRawBufferPointer(buffer))
            }
        }
    }
}

/// Decodes netascii arriving block by block. A CR that ends one block is held until the next
/// block says what it was (CR LF → LF, CR NUL → CR); a CR followed by anything else is kept
/// as sent, since lenient beats losing bytes.
public struct NetasciiDecoder: Sendable {
    private var pendingCR = false

    public init() {}

    /// Decodes `input` into `out` (which must hold input.count + 1 bytes); returns bytes written.
    public mutating func decode(_ input: UnsafeRawBufferPointer, into out: UnsafeMutableRawBufferPointer) -> Int {
        var o = 0
        for byte in input {
            if pendingCR {
                pendingCR = false
                switch byte {
                case 0x0A:
                    out[o] = 0x0A; o += 1; continue
                case 0x00:
                    out[o] = 0x0D; o += 1; continue
                default:
                    out[o] = 0x0D; o += 1
                }
            }
            if byte == 0x0D {
                pendingCR = true
            } else {
                out[o] = byte; o += 1
            }
        }
        return o
    }

    /// End of the transfer: a CR still held is written as it came.
    public mutating func finish(into out: UnsafeMutableRawBufferPointer) -> Int {
        guard pendingCR else { return 0 }
        pendingCR = false
        out[0] = 0x0D
        return 1
    }

    public static func decode(_ blocks: [[UInt8]]) -> [UInt8] {
        var decoder = NetasciiDecoder()
        var result: [UInt8] = []
        for block in blocks {
            let part = [UInt8](unsafeUninitializedCapacity: block.count + 1) { buffer, count in
                count = block.withUnsafeBytes { decoder.decode($0, into: UnsafeMutableRawBufferPointer(buffer)) }
            }
            result += part
        }
        result += [UInt8](unsafeUninitializedCapacity: 1) { buffer, count in
            count = decoder.finish(into: UnsafeMutableRawBufferPointer(buffer))
        }
        return result
    }
}
