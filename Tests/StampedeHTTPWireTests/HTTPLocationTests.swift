import StampedeHTTPWire
import Testing

@Suite struct HTTPLocations {
    @Test func aReferenceIsResolvedAsIPXEAndPixiecoreResolveIt() {
        let base = "http://10.0.0.9:8080/pixiecore/v1"
        #expect(HTTPLocation.resolve("https://files.local/k", against: base) == "https://files.local/k")
        #expect(HTTPLocation.resolve("/kernel", against: base) == "http://10.0.0.9:8080/kernel")
        #expect(HTTPLocation.resolve("initrd.1", against: base) == "http://10.0.0.9:8080/pixiecore/initrd.1")
        #expect(HTTPLocation.resolve("k", against: "http://10.0.0.9:8080") == "http://10.0.0.9:8080/k")
        #expect(HTTPLocation.resolve("next.ipxe", against: "efi/boot.ipxe") == "efi/next.ipxe")
        #expect(HTTPLocation.resolve("next.ipxe", against: "boot.ipxe") == "next.ipxe")
        #expect(HTTPLocation.resolve("/linux/vmlinuz", against: "efi/boot.ipxe") == "/linux/vmlinuz")
        #expect(HTTPLocation.path(of: "http://10.0.0.1:8080/linux/vmlinuz") == "linux/vmlinuz")
        #expect(HTTPLocation.path(of: "/a/b") == "a/b" && HTTPLocation.path(of: "http://h") == "")
    }
}
