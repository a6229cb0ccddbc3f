import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

/// Where the owner of a store listens: a Linux abstract-namespace Unix socket whose name is
/// derived from the store's canonical path alone (see `man 7 granary-reopen`, DISCOVERY).
///
/// The name is `granary-reopen/v1/` followed by the lower-case hex SHA-256 of the bytes of
/// `realpath(3)` of the store (no terminating NUL). It is 82 bytes whatever the path's
/// length, so it never meets the 108-byte `sun_path` limit, and the kernel frees it when
/// the owner's socket closes (however the owner dies), so no stale registration can remain.
public struct ReopenAddress: Sendable, Equatable, CustomStringConvertible {
    /// The prefix of every socket name; the `v1` is the naming scheme's version.
    public static let prefix = "granary-reopen/v1/"

    /// The canonical path the name was derived from (for messages and file operations; its
    /// bytes that are not UTF-8 are repaired, which the name never is).
    public let canonicalPath: String
    /// The abstract socket name, without the leading NUL byte.
    public let name: String

    /// The address of the store at `path`. The store must exist (its path is resolved with `realpath(3)`).
    public init(store path: String) throws(ReopenError) {
        guard let resolved = realpath(path, nil) else {
            throw .storeNotFound(path: path, code: errno)
        }
        defer { free(resolved) }
        self.init(
            canonicalPathBytes: Array(UnsafeBufferPointer(start: resolved, count: strlen(resolved))).map {
                UInt8(bitPattern: $0)
            })
    }

    /// The address for an already canonical path.
    public init(canonicalPath: String) {
        self.init(canonicalPathBytes: Array(canonicalPath.utf8))
    }

    /// The address for the bytes of an already canonical path, exactly as the filesystem names
    /// it: a name that is not UTF-8, or not in Unicode's normal form, hashes as its bytes.
    public init(canonicalPathBytes bytes: [UInt8]) {
        self.canonicalPath = String(decoding: bytes, as: UTF8.self)
        let digest = SHA256.hash(data: bytes)
        self.name = ReopenAddress.prefix + digest.map { String(format: "%02x", $0) }.joined()
    }

    public var description: String { "@" + name }

    /// Calls `body` with a `sockaddr_un` for the abstract name and its length.
    func withSocketAddress<T>(_ body: (UnsafePointer<sockaddr>, socklen_t) -> T) -> T {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(name.utf8)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw[0] = 0  // the leading NUL selects the abstract namespace
            for (i, byte) in bytes.enumerated() { raw[i + 1] = byte }
        }
        // The length counts the family, the NUL and the name; no trailing NUL (it would be part of the name).
        let length = socklen_t(MemoryLayout<sa_family_t>.size + 1 + bytes.count)
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, length) }
        }
    }
}
