/// The statuses the server answers with (and the storm reads).
public enum Status: Int, Sendable {
    case ok = 200
    case partialContent = 206
    case notModified = 304
    case badRequest = 400
    case forbidden = 403
    case notFound = 404
    case methodNotAllowed = 405
    case requestTimeout = 408
    case uriTooLong = 414
    case rangeNotSatisfiable = 416
    case headersTooLarge = 431
    case internalServerError = 500
    case serviceUnavailable = 503
    case versionNotSupported = 505

    public var reason: StaticString {
        switch self {
        case .ok: "OK"
        case .partialContent: "Partial Content"
        case .notModified: "Not Modified"
        case .badRequest: "Bad Request"
        case .forbidden: "Forbidden"
        case .notFound: "Not Found"
        case .methodNotAllowed: "Method Not Allowed"
        case .requestTimeout: "Request Timeout"
        case .uriTooLong: "URI Too Long"
        case .rangeNotSatisfiable: "Range Not Satisfiable"
        case .headersTooLarge: "Request Header Fields Too Large"
        case .internalServerError: "Internal Server Error"
        case .serviceUnavailable: "Service Unavailable"
        case .versionNotSupported: "HTTP Version Not Supported"
        }
    }
}
