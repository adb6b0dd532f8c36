/// A file a transfer or a response reads from, lent by the file service (`FileService`): a
/// version's shared image, or the open file it streams. Its one owner (a transfer's slot, a
/// connection) holds it for as long as it sends; when the owner lets go of it, however the
/// transfer ended, the image goes back to the cache here and nowhere else (a streamed file closes
/// with the last reference to it). Noncopyable: no path can give it back twice or forget to.
public struct FileLease: ~Copyable, @unchecked Sendable {
    /// What the bytes are read from.
    public let source: TransferSource
    /// The version it is: what an answer says of the file (its size, its times, its ETag).
    public let version: FileKey
    private let cache: FileCache?

    /// `cache`: where the image goes back (nil: an image the cache does not count, or a stream).
    init(_ source: TransferSource, version: FileKey, cache: FileCache?) {
        self.source = source
        self.version = version
        self.cache = cache
    }

    deinit {
        if case .image(let image) = source { cache?.release(image) }
    }

    /// The image, if the file is one: what a queued send may still point into after the lease
    /// ends, so the sender keeps it mapped until its sends are out (`Worker.pinnedUntilFlush`).
    public var image: FileImage? {
        if case .image(let image) = source { return image }
        return nil
    }
}
