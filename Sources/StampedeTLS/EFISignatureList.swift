/// UEFI's list of trusted certificates (UEFI 2.10 §32.4.1, EFI_SIGNATURE_LIST): what EDK2's
/// HTTP Boot reads from its `TlsCaCertificate` variable, OVMF from QEMU's
/// `-fw_cfg name=etc/edk2/https/cacerts`, and a BMC takes as its TLS CA setting. One list per
/// certificate (X.509 entries differ in size; a list holds entries of one size), each:
///
///     SignatureType       16  EFI_CERT_X509_GUID
///     SignatureListSize    4  the list's bytes, header included
///     SignatureHeaderSize  4  0
///     SignatureSize        4  16 + the certificate's DER
///     SignatureOwner      16  who added it (Stampede's GUID)
///     SignatureData        n  the certificate, DER
///
/// Little-endian; a GUID's first three fields too.
public enum EFISignatureList {
    /// EFI_CERT_X509_GUID, a5c059a1-94e4-4aa7-87b5-ab155c2bf072.
    public static let x509 = guid(0xa5c0_59a1, 0x94e4, 0x4aa7, [0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72])
    /// The owner Stampede writes: 7b1d1c53-5c0a-4f6e-9b1d-53746d706564 (made for it).
    public static let owner = guid(0x7b1d_1c53, 0x5c0a, 0x4f6e, [0x9b, 0x1d, 0x53, 0x74, 0x6d, 0x70, 0x65, 0x64])

    /// The lists of `certificates` (DER each), one after another.
    public static func encode(_ certificates: [[UInt8]]) -> [UInt8] {
        var out: [UInt8] = []
        for der in certificates {
            let signatureSize = 16 + der.count
            out += x509
            out += littleEndian(UInt32(28 + signatureSize))
            out += littleEndian(UInt32(0))
            out += littleEndian(UInt32(signatureSize))
            out += owner
            out += der
        }
        return out
    }

    /// The certificates of lists made by `encode` (or by EDK2's tools): X.509 entries only; nil
    /// when the bytes are not lists.
    public static func decode(_ bytes: [UInt8]) -> [[UInt8]]? {
        var certificates: [[UInt8]] = []
        var at = 0
        while at < bytes.count {
            guard bytes.count - at >= 28 else { return nil }
            let listSize = Int(uint32(bytes, at + 16)), headerSize = Int(uint32(bytes, at + 20)), size = Int(uint32(bytes, at + 24))
            guard listSize >= 28 + headerSize, listSize <= bytes.count - at, size > 16,
                  (listSize - 28 - headerSize) % size == 0 else { return nil }
            if Array(bytes[at..<(at + 16)]) == x509 {
                var entry = at + 28 + headerSize
                while entry < at + listSize {
                    certificates.append(Array(bytes[(entry + 16)..<(entry + size)]))
                    entry += size
                }
            }
            at += listSize
        }
        return certificates
    }

    static func guid(_ a: UInt32, _ b: UInt16, _ c: UInt16, _ d: [UInt8]) -> [UInt8] {
        littleEndian(a) + littleEndian(UInt32(b))[0..<2] + littleEndian(UInt32(c))[0..<2] + d
    }

    static func littleEndian(_ value: UInt32) -> [UInt8] {
        [UInt8(value & 0xFF), UInt8(value >> 8 & 0xFF), UInt8(value >> 16 & 0xFF), UInt8(value >> 24)]
    }

    static func uint32(_ bytes: [UInt8], _ at: Int) -> UInt32 {
        UInt32(bytes[at]) | UInt32(bytes[at + 1]) << 8 | UInt32(bytes[at + 2]) << 16 | UInt32(bytes[at + 3]) << 24
    }
}
