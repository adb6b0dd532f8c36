extension String {
    /// The text the C target wrote into `buffer`, up to its first NUL (the whole buffer if none).
    init(cText buffer: [CChar]) {
        let end = buffer.firstIndex(of: 0) ?? buffer.count
        self = buffer.withUnsafeBufferPointer { chars in
            chars.withMemoryRebound(to: UInt8.self) { String(decoding: UnsafeBufferPointer(rebasing: $0[..<end]), as: UTF8.self) }
        }
    }
}
