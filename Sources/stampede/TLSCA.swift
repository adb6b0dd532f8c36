import ArgumentParser
import Glibc
import StampedeIO
import StampedeTLS

/// `stampede tls-ca CERT… --output FILE`: the CA certificates a machine's firmware is to trust
/// for HTTPS Boot, as UEFI's EFI_SIGNATURE_LIST (`EFISignatureList`): for OVMF,
/// `-fw_cfg name=etc/edk2/https/cacerts,file=FILE`; for a BMC, its TLS CA setting (Redfish's
/// `CertificateService`, or the vendor's upload).
struct TLSCA: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "tls-ca",
        abstract: "Write CA certificates (PEM) as the EFI signature list UEFI HTTPS Boot trusts.",
        discussion: """
            Each file may hold several certificates. The list is written whole or not at all.
              stampede tls-ca ca.pem --output cacerts.esl
              qemu-system-x86_64 ... -fw_cfg name=etc/edk2/https/cacerts,file=cacerts.esl
            """)

    @Argument(help: ArgumentHelp("CA certificates, PEM.", valueName: "CERT")) var certificates: [String]
    @Option(name: .shortAndLong, help: ArgumentHelp("Where the list goes (- for standard output).", valueName: "FILE"))
    var output: String

    func validate() throws {
        if certificates.isEmpty { throw ValidationError("name at least one CA certificate (PEM).") }
    }

    func run() throws {
        var found: [PEMCertificate] = []
        for path in certificates {
            do {
                found += try PEMCertificate.all(in: readWholeFile(path))
            } catch let error as PEMCertificate.Problem {
                throw failure("\(path): \(error)", status: 65)
            } catch {
                throw failure("\(path): \(error)", status: 66)
            }
        }
        let now = Int64(time(nil))
        for certificate in found {
            if !certificate.isAuthority {
                writeToStandardError("stampede tls-ca: warning: \(certificate.subject) is not a CA: firmware trusts it only for itself\n")
            }
            if certificate.notAfter >= 0 && certificate.notAfter < now {
                writeToStandardError("stampede tls-ca: warning: \(certificate.subject) expired on \(TLSContext.date(certificate.notAfter))\n")
            }
        }
        let list = EFISignatureList.encode(found.map(\.der))
        if let problem = write(list) { throw failure("\(output): \(problem)", status: 73) }
        let subjects = found.map(\.subject).joined(separator: ", ")
        writeToStandardError("stampede tls-ca: \(output): \(found.count) certificate\(found.count == 1 ? "" : "s") (\(subjects)), \(list.count) bytes\n")
    }

    /// The list to standard output, or to the file through a temporary one renamed over it; why not.
    func write(_ list: [UInt8]) -> Errno? {
        let bytes = UnsafeMutableRawBufferPointer.allocate(byteCount: list.count, alignment: 1)
        defer { bytes.deallocate() }
        bytes.copyBytes(from: list)
        do {
            if output == "-" {
                try writeFully(1, UnsafeRawBufferPointer(bytes))
            } else {
                let file = try Get.replacingFile(output)
                try file.write(UnsafeRawBufferPointer(bytes))
                try file.commit()
            }
            return nil
        } catch {
            return error
        }
    }

    func failure(_ message: String, status: Int32) -> ExitCode {
        writeToStandardError("stampede tls-ca: \(message)\n")
        return ExitCode(status)
    }
}
