import Glibc
import StampedeTestSupport
import Testing
@testable import StampedeTLS

/// A self-signed RSA certificate for 127.0.0.1 and localhost (a CA, valid until 2126) and its
/// key, and another certificate whose key is not this one: made once with `openssl req -x509`.
enum Fixture {
    static let certificate = """
-----BEGIN CERTIFICATE-----
MIIDNTCCAh2gAwIBAgIUHlO0AWHcUmVFkYGUJFEXdBY8d/MwDQYJKoZIhvcNAQEL
BQAwGzEZMBcGA1UEAwwQc3RhbXBlZGUgdGVzdCBDQTAgFw0yNjExMjUyMzIxMjBa
GA8yMTI2MTEwMTIzMjEyMFowGzEZMBcGA1UEAwwQc3RhbXBlZGUgdGVzdCBDQTCC
ASIwDQYJKoZIhvcNAQEBBQADggEPADCCAQoCggEBALkd5U0UzOj/1zRAQWQHrl0N
3Xlc2ey/2S+0fT/KE2Gc3y30BDdTD/7lKyctsplCrnDfi5w6PT4UM623wxxs8/Ce
ReSuX9wdMQbvgVnUpACyT8vacQmkfQB6XCBSDEK+vM/RBBzZoclnq7zAkoBMnU7j
UUXy292PivpitB/IouXpSwWA44mTY7qS121+Lk3dVinjQRs/qMyb/Q7M1z8fxXYb
WfI2iSlt9YOfxhU0ydCBDZFtRWI8WJvq4go1UXcINMp//3CrnDljA7Wn8sEhaIGt
irX+ywfWTJNU3moBklerVo15/Qmbbf5m9avy+Igd9/uHdmfBzQtxQkLlfZ5OdW8C
AwEAAaNvMG0wHQYDVR0OBBYEFLoXazO1ApY3dTRfQBkYimIVNEytMB8GA1UdIwQY
MBaAFLoXazO1ApY3dTRfQBkYimIVNEytMA8GA1UdEwEB/wQFMAMBAf8wGgYDVR0R
BBMwEYcEfwAAAYIJbG9jYWxob3N0MA0GCSqGSIb3DQEBCwUAA4IBAQATwltARL0V
fF6mtfFuZ3qWnHIjPuIRDt1popo0QQTIPuf0c+iLGg27ZX9FA84rrVhEjaRsoops
wm954jfKrdPXJrcGOYQpYaAV1bfm51iwNzb96dN1sc7ToBUoX534SR1dln9qNHLz
/uSXtZvGkQsx4hKhUyhWjCIGSEZJFgfhQKcdMu4bKUWJh+WBlFQtgZVNnHfegIvw
6QDFkCye5kSpMHuVCuINDZJlqh/wbVn9JAHw4TD1z0ZKKdEKQjBEoz1lwVCO72+B
Qc7Kal/wrPD5ftOuV3HrOqtaVMrsDzoohp3jYi4+T/upvqvVtYG/ptT2OOdCV2Ll
zF1/PB4sob3p
-----END CERTIFICATE-----

"""
    static let key = """
-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC5HeVNFMzo/9c0
QEFkB65dDd15XNnsv9kvtH0/yhNhnN8t9AQ3Uw/+5SsnLbKZQq5w34ucOj0+FDOt
t8McbPPwnkXkrl/cHTEG74FZ1KQAsk/L2nEJpH0AelwgUgxCvrzP0QQc2aHJZ6u8
wJKATJ1O41FF8tvdj4r6YrQfyKLl6UsFgOOJk2O6ktdtfi5N3VYp40EbP6jMm/0O
zNc/H8V2G1nyNokpbfWDn8YVNMnQgQ2RbUViPFib6uIKNVF3CDTKf/9wq5w5YwO1
p/LBIWiBrYq1/ssH1kyTVN5qAZJXq1aNef0Jm23+ZvWr8viIHff7h3Znwc0LcUJC
5X2eTnVvAgMBAAECggEANhmPluxaSkniyelxcttv0NAphrtlEPSsc22rIQZcja17
6AElbkm/Jf4xk1yekn3TXzdlpL28gjUDOWS4B8mrrQmEYaW4bCq31lAOnIMxfuad
vXTUjj3dLlOUMvnnjWYS5iUur4PG7YZ3wU0CQ66gVprGeMvWB7VYp35LJ/LJ8Kiy
Jhxs4ph5zxBxNmzjfYD2HZYxoLNoz4grWbPDE/RWiUsbRSos1XWmlhcWY/LLF31i
0FuLICrUCjZAuzQPe2itzGJaVfbEGaX1U5iIjy9uZ4/VehYPWwMs3dsm740ElJ2L
fBRgFTdijsvfPY4x6QPE9CMeAmnXlW9LIF5KghlmYQKBgQD4O9AM6Es3nanAhzgA
HdgxsZtK6X0ZGJcVknh5YOGzYTZJKom0gHRXz6BGiQz/tQwscbFSguubUo0amo9E
6BQt+IkgclXUEsaSo6R6ksrrg6oZ734ImGVNJ+UXNpo0UCEHSG8rjAg/DXC+qRFs
VMIyt7E8+dhq83Tv7S0gBD8l0QKBgQC+6I8Ft+R4MtqtWXz4EC0V1w4+hP1rKUQ1
GqK1QllAKMnKkIHpjltVqd71dlpaS+OE/sTKY/KE8rlBz0I/uxKJ35vrOB17sQQK
03ZZPgsHbK5g4l0vwVrWo7GwXLgHmJmxUJDPkj73he8d9SKKYUncSFcZDLc4bZHy
c4jFUTB3PwKBgHXVvs9BveLqvtgb2COGB0ifrL4E1FODbsTYwMOtj7ZdIS3eOXwr
tg6xCr4w9LC1us+mMKygZUNYDo9gaz4khN/FqSJz4/ZF62lUsRFWeWkPGUIyg7uE
zCGyHHfGfbDzkJoqcktTr95ufOSk0RaBraXxuPrfBzLN2ubBybf3DBrhAoGAXGif
ymnQKqqbFWwKxNy3pim6GGMxc+y+umHRPqIGJ7tWqjm22MHyzg1zAigu5iRz1k2o
HjuxCc+gAw37CHRaLejSRVKdWuE9jqv7Tolst0RRSE5qQxJ6EQmdmjvXTL3+L0lL
P16QIipvq3WcKZWcNgfCOTrheWv4SH7KRpDdP+sCgYEAyg2A1IBy1K9UsXiMCvuX
OEC3quh5oT9yVmiD9d7ZZs4ZpRVI2mcSSOxlJxbczdM/gyS7/ITUd3ZYxH2wPR9b
SPsEZgnlMjEf/g2sMb/VxHKuT8LeLEs0xn3TcILA3aohGxoN76QooPcmkGzGlB9l
vIgtMBsWhZ4faQ7wXxpFEkc=
-----END PRIVATE KEY-----

"""
    static let otherCertificate = """
-----BEGIN CERTIFICATE-----
MIIDAzCCAeugAwIBAgIUbiWW/Hjt2h/AcB+v4AA9h2/odF0wDQYJKoZIhvcNAQEL
BQAwEDEOMAwGA1UEAwwFb3RoZXIwIBcNMjYxMTI1MjMyMTIwWhgPMjEyNjExMDEy
MzIxMjBaMBAxDjAMBgNVBAMMBW90aGVyMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8A
MIIBCgKCAQEA4oCPOEjRWOTwBQLO/aw6P8tTDA1Gh+gV4mtNJ75GgDvTLbAKDmJ9
ivfM93qpzNCdg/0vxzk39Wx5NvrQShFufuh4n5i+XYAhQFjxV/d9fuxkkydztYZ3
k79lGJWkAO9HctavPqBDMRRrxpWmCOP7P/514Vtkv4Odd7MIr8ZMtJwXcRfAJVM7
nehqfciO/uVpjcWipV21g5KZ8m1g7cK6xxp0fSzWq2huzQgm+v0EdWjgYfbL58sY
Kr+l04p7mYGhJiM5tl/4ocE9FVKrI9KUuf3qgVoNW89v7JuewubEAY/YN2had+NI
Q/rLuyQ7Bey03/ZMlZPCJzPpdpK8iST9EwIDAQABo1MwUTAdBgNVHQ4EFgQUbLwv
YKd0J3LDHzs9jzfjTFOe33UwHwYDVR0jBBgwFoAUbLwvYKd0J3LDHzs9jzfjTFOe
33UwDwYDVR0TAQH/BAUwAwEB/zANBgkqhkiG9w0BAQsFAAOCAQEAW9IoMXQ8yBdD
SnzGjn88JeJe5kSxiYzgN1+tIYGwx3+odVsjji7DcNuOF9gMBC4rHBzwDpfzRzqI
5TRx9JaLA4T+LwOXMm7JCxPI3a9sozhMEN3t/wbOGLX4hDmab/awDsUfsHuDbuPE
c5PhhuHmzjpDcvWtYvhYukgzKFGWLTHJRbvOu6cYEDhS8EYqgb8Fe39hsssMm7+w
flOhpt9hVavbeX9NeYr7BQKf+8GrWwscXXeWR+B9g5AqZEOpt8ZsBc2Yt9XK7/eu
v0zgLJt6aodBiC/Soq8Z027saCFJmF6Yq5BZ3cxHdTI0vaIYUL7VaWYcXYgKrly4
tsBCElx0Kw==
-----END CERTIFICATE-----

"""

    /// Writes `text` to a file of its own in `directory` (a test's scratch directory, removed
    /// with it); its path.
    static func file(_ text: String, mode: mode_t = 0o600, in directory: ScratchDirectory) -> String {
        var template = Array("\(directory.path)/pem-XXXXXX".utf8CString)
        let fd = mkstemp(&template)
        precondition(fd >= 0)
        _ = text.utf8CString.dropLast().withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        fchmod(fd, mode)
        close(fd)
        return String(cText: template)
    }
}
