import CPageHash
import Crypto

/// The SHA-256 of many pages at once: every page of a store is hashed for its `.pages` list
/// (issue 35), and pages are independent messages of one length. On a CPU with AVX-512 sixteen
/// pages are hashed at a time, one per lane (`granary_sha256_x16`, Sources/CPageHash), about
/// twice as fast as one page at a time with SHA-NI; any other pages (fewer than sixteen left, or
/// another CPU) go through swift-crypto. Both give the same bytes (`PageHashTests`).
enum PageHash {
    /// Whether this CPU and kernel run the sixteen-lane way.
    static let wide = granary_sha256_x16_supported() != 0

    /// The SHA-256 of each page of `pages` (whole pages of `pageSize` bytes) into `digests`,
    /// 32 bytes per page in page order. `wide`: sixteen at a time when the CPU can (tests turn it
    /// off to compare).
    static func digests(
        of pages: UnsafeRawBufferPointer, pageSize: Int, into digests: UnsafeMutableRawBufferPointer,
        wide: Bool = PageHash.wide
    ) {
        precondition(pageSize > 0 && pages.count % pageSize == 0, "whole pages")
        let count = pages.count / pageSize
        precondition(digests.count >= count * 32, "room for every digest")
        guard count > 0, let from = pages.baseAddress, let to = digests.baseAddress else { return }
        var page = 0
        if wide && pageSize % 64 == 0 && pageSize <= 65536 {
            while count - page >= 16 {
                granary_sha256_x16(
                    from.advanced(by: page * pageSize).assumingMemoryBound(to: UInt8.self), pageSize,
                    to.advanced(by: page * 32).assumingMemoryBound(to: UInt8.self))
                page += 16
            }
        }
        while page < count {
            let digest = SHA256.hash(data: UnsafeRawBufferPointer(start: from + page * pageSize, count: pageSize))
            digest.withUnsafeBytes { to.advanced(by: page * 32).copyMemory(from: $0.baseAddress!, byteCount: 32) }
            page += 1
        }
    }
}
