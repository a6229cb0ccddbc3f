import CSHA256
import Foundation

/// SHA-256 (FIPS 180-4): the digest of every archive member, manifest, segment and page granary
/// checks. The C underneath (Sources/CSHA256) hashes with the CPU's SHA instructions where it has
/// them (SHA-NI on x86-64) and portable C elsewhere; the tests run both ways and compare them
/// with NIST's examples, coreutils' `sha256sum` and Python's `hashlib`.
///
/// Fed in pieces (`update`), read once (`finalize`), as a streaming hash is used for files of any
/// size; `hash(data:)` for a message in memory.
public struct SHA256: Sendable {
    @usableFromInline var context = granary_sha256()

    public init() { granary_sha256_init(&context) }

    /// Feeds `bytes`.
    @inlinable
    public mutating func update(bufferPointer bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        granary_sha256_update(&context, base, bytes.count)
    }

    /// Feeds the bytes of `data` (an array, a slice, `Data`, a buffer).
    @inlinable
    public mutating func update<D: DataProtocol>(data: D) {
        for region in data.regions {
            region.withUnsafeBytes { update(bufferPointer: $0) }
        }
    }

    /// The digest of everything fed so far (this value can go on being fed).
    public func finalize() -> Digest {
        var copy = context
        var digest = Digest()
        withUnsafeMutableBytes(of: &digest.bytes) { granary_sha256_final(&copy, $0.baseAddress) }
        return digest
    }

    /// The digest of `data`.
    @inlinable
    public static func hash<D: DataProtocol>(data: D) -> Digest {
        var hasher = SHA256()
        hasher.update(data: data)
        return hasher.finalize()
    }

    /// Whether this process hashes with the CPU's SHA instructions (else portable C).
    public static var isAccelerated: Bool { granary_sha256_accelerated() != 0 }

    /// Whether this CPU has the SHA instructions (with SSE4.1 and SSSE3), whatever
    /// ``forcePortable(_:)`` says: what a choice of the fastest way should look at.
    public static var cpuHasSHAInstructions: Bool { granary_sha256_cpu_has_sha_instructions() != 0 }

    /// Tests: `true` hashes with the portable C from now on in this process, whatever the CPU
    /// has; `false` goes back to the fastest way.
    public static func forcePortable(_ on: Bool) { granary_sha256_force_portable(on ? 1 : 0) }

    /// A SHA-256 digest: 32 bytes, in the order `sha256sum` prints them.
    public struct Digest: Hashable, Sendable, Sequence, CustomStringConvertible {
        /// The 32 bytes, in order (a tuple: no allocation per digest).
        @usableFromInline var bytes: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

        @usableFromInline init() {}

        public static func == (left: Digest, right: Digest) -> Bool {
            left.bytes.0 == right.bytes.0 && left.bytes.1 == right.bytes.1 && left.bytes.2 == right.bytes.2
                && left.bytes.3 == right.bytes.3
        }

        public func hash(into hasher: inout Hasher) {
            hasher.combine(bytes.0)
            hasher.combine(bytes.1)
            hasher.combine(bytes.2)
            hasher.combine(bytes.3)
        }

        /// Calls `body` with the 32 bytes.
        public func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
            try Swift.withUnsafeBytes(of: bytes) { try body($0) }
        }

        public func makeIterator() -> Iterator { Iterator(digest: self) }

        /// The bytes in order, read from the digest itself (no array made).
        public struct Iterator: IteratorProtocol {
            let digest: Digest
            var index = 0

            public mutating func next() -> UInt8? {
                guard index < 32 else { return nil }
                defer { index += 1 }
                return digest.withUnsafeBytes { $0[index] }
            }
        }

        public var underestimatedCount: Int { 32 }

        public var description: String {
            "SHA256 digest: " + withUnsafeBytes { $0.map { String(format: "%02x", $0) }.joined() }
        }
    }
}
