import Glibc
import StampedeTestSupport
import Testing
@testable import StampedeTLS

@Suite struct TLSContextTests {
    let now = Int64(time(nil))
    /// The test's PEM files; removed when it ends.
    let scratch = ScratchDirectory()

    @Test func aCertificateAndItsKeyLoad() throws {
        let context = try TLSContext(certificate: Fixture.file(Fixture.certificate, in: scratch),
                                     key: Fixture.file(Fixture.key, in: scratch),
                                     profile: .firmware, kernelTLS: false, now: now)
        #expect(context.key == "RSA 2048")
        #expect(context.names == "127.0.0.1, localhost")
        #expect(context.warnings.isEmpty)
    }

    @Test func eachProblemNamesTheFileAndWhy() {
        let certificate = Fixture.file(Fixture.certificate, in: scratch), key = Fixture.file(Fixture.key, in: scratch)
        func problem(_ certificate: String, _ key: String, now: Int64? = nil) -> TLSContext.Problem? {
            do {
                _ = try TLSContext(certificate: certificate, key: key, profile: .firmware, kernelTLS: false, now: now ?? self.now)
                return nil
            } catch { return error }
        }
        #expect(problem("/nonexistent.pem", key) == .init(file: "/nonexistent.pem", reason: "cannot read it: No such file or directory"))
        #expect(problem(certificate, "/nonexistent.key")?.file == "/nonexistent.key")
        let garbage = Fixture.file("not a certificate\n", in: scratch)
        #expect(problem(garbage, key) == .init(file: garbage, reason: "not a PEM certificate"))
        #expect(problem(certificate, garbage) == .init(file: garbage, reason: "not a PEM private key"))
        // The key of another certificate.
        let other = Fixture.file(Fixture.otherCertificate, in: scratch)
        #expect(problem(other, key)?.file == key)
        #expect(problem(other, key)?.reason.hasPrefix("the key is not the certificate's") == true)
        // A key where the certificate goes: no certificate in it, and the certificate's file blamed.
        let keyAsCertificate = Fixture.file(Fixture.key, in: scratch)
        #expect(problem(keyAsCertificate, key) == .init(file: keyAsCertificate, reason: "not a PEM certificate"))
        // Expired (the clock past its notAfter, 2126) and not yet valid (before 2026).
        #expect(problem(certificate, key, now: 5_000_000_000)?.reason.hasPrefix("the certificate expired on 21") == true)
        #expect(problem(certificate, key, now: 1_000_000_000)?.reason.hasPrefix("the certificate is not valid before 20") == true)
    }

    @Test func aKeyReadableByAllIsSaid() throws {
        let open = try TLSIdentity(certificate: Fixture.file(Fixture.certificate, in: scratch),
                                   key: Fixture.file(Fixture.key, mode: 0o644, in: scratch),
                                   profile: .firmware, kernelTLS: false)
        #expect(open.keyExposure?.contains("readable by every user") == true)
        let closed = try TLSIdentity(certificate: Fixture.file(Fixture.certificate, in: scratch),
                                     key: Fixture.file(Fixture.key, mode: 0o640, in: scratch),
                                     profile: .firmware, kernelTLS: false)
        #expect(closed.keyExposure == nil)
    }

    @Test func aReloadThatFailsKeepsTheContext() throws {
        let certificate = Fixture.file(Fixture.certificate, in: scratch)
        let identity = try TLSIdentity(certificate: certificate, key: Fixture.file(Fixture.key, in: scratch), profile: .modern, kernelTLS: false)
        let before = identity.context
        _ = Fixture.certificate  // the same file, rewritten with another certificate: the key no longer matches
        let fd = open(certificate, O_WRONLY | O_TRUNC)
        _ = Fixture.otherCertificate.utf8CString.dropLast().withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard case .failure(let problem) = identity.reload() else { Issue.record("the reload took a mismatched pair"); return }
        #expect(problem.reason.hasPrefix("the key is not the certificate's"))
        #expect(identity.context === before)
    }

    @Test func theFirmwareProfileOffersNonECSuitesAfterECDHE() {
        let suites = TLSProfile.firmware.suites
        let firstNonEC = suites.firstIndex { !$0.hasPrefix("ECDHE") }!
        #expect(suites[..<firstNonEC].allSatisfy { $0.hasPrefix("ECDHE") })
        for suite in ["DHE-RSA-AES128-GCM-SHA256", "DHE-RSA-AES256-GCM-SHA384", "AES128-GCM-SHA256", "AES256-SHA256"] {
            #expect(suites.contains(suite))
        }
        #expect(TLSProfile.modern.suites.allSatisfy { $0.hasPrefix("ECDHE") })
    }
}

@Suite struct EFISignatureListTests {
    @Test func aListHoldsEachCertificateWithItsSizes() throws {
        let certificates = try PEMCertificate.all(in: Array((Fixture.certificate + Fixture.otherCertificate).utf8))
        #expect(certificates.map(\.subject) == ["/CN=stampede test CA", "/CN=other"])
        #expect(certificates[0].isAuthority)
        let list = EFISignatureList.encode(certificates.map(\.der))
        #expect(list.count == certificates.reduce(0) { $0 + 28 + 16 + $1.der.count })
        // EFI_CERT_X509_GUID as UEFI lays it out: a1 59 c0 a5 e4 94 a7 4a 87 b5 ...
        #expect(Array(list[0..<16]) == [0xa1, 0x59, 0xc0, 0xa5, 0xe4, 0x94, 0xa7, 0x4a, 0x87, 0xb5, 0xab, 0x15, 0x5c, 0x2b, 0xf0, 0x72])
        let first = 28 + 16 + certificates[0].der.count
        #expect(EFISignatureList.uint32(list, 16) == UInt32(first))
        #expect(EFISignatureList.uint32(list, 20) == 0)
        #expect(EFISignatureList.uint32(list, 24) == UInt32(16 + certificates[0].der.count))
        #expect(Array(list[44..<first]) == certificates[0].der)
        #expect(EFISignatureList.decode(list) == certificates.map(\.der))
        #expect(EFISignatureList.decode(Array(list.dropLast())) == nil)
    }

    @Test func textThatIsNoCertificateIsRefused() {
        #expect(throws: PEMCertificate.Problem.self) { try PEMCertificate.all(in: Array("hello".utf8)) }
        #expect(throws: PEMCertificate.Problem.self) {
            try PEMCertificate.all(in: Array("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".utf8))
        }
        #expect(throws: PEMCertificate.Problem.self) { try PEMCertificate.all(in: Array(Fixture.key.utf8)) }
    }
}
