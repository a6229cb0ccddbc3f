import CPageHash
import Foundation
import GranaryDigest

/// The SHA-256 of many pages at once: every page of a store is hashed for its `.pages` list
/// (issue 35), and pages are independent messages of one length, so sixteen are hashed at a time,
/// one per 32-bit lane of a vector. The lane logic is written once (Sources/CPageHash,
/// `sha256_lanes.h`) and built two ways: with AVX-512 intrinsics (``Way/wide``, on CPUs that have
/// them) and with the compiler's vector extensions (``Way/portable``, on every CPU, so that every
/// CI run compares the lanes with granary's one-message SHA-256: `PageHashTests`). Pages left
/// over (fewer than sixteen) and ``Way/crypto`` go through that one-message SHA-256
/// (GranaryDigest: the CPU's SHA instructions where it has them). Every way gives the same bytes.
///
/// `GRANARY_PAGE_HASH=crypto|portable|wide` picks the way for the process (an admin who suspects
/// the sixteen lanes turns them off with `crypto`); the default is the fastest this CPU runs:
/// ``Way/wide`` where it has AVX-512, else ``Way/crypto`` where it has SHA instructions (faster
/// than the portable lanes), else ``Way/portable`` (the lanes in AVX2 or SSE2 are faster than one
/// page at a time in portable C): docs/performance.md.
enum PageHash {
    /// A way of hashing pages.
    enum Way: String, CaseIterable, Sendable {
        /// granary's one-message SHA-256 (GranaryDigest), one page at a time.
        case crypto
        /// Sixteen lanes in the compiler's vector extensions, the fastest build this CPU runs
        /// (AVX2 on x86-64 that has it, else the baseline).
        case portable
        /// The portable lanes' baseline build (SSE2 on x86-64), whatever the CPU has (tests).
        case portableBaseline = "portable-baseline"
        /// Sixteen lanes in AVX-512 registers (AVX-512F and AVX-512BW).
        case wide

        /// Whether this CPU runs the way.
        var isAvailable: Bool {
            switch self {
            case .crypto, .portable, .portableBaseline: true
            case .wide: PageHash.wideAvailable
            }
        }

        /// The values `GRANARY_PAGE_HASH` takes.
        static let settable: [Way] = [.crypto, .portable, .wide]
    }

    /// Whether this CPU and kernel run the AVX-512 way.
    static let wideAvailable = granary_sha256_x16_supported() != 0

    /// The way picked for the process, and a note when it is not the one asked for.
    struct Selection: Equatable, Sendable {
        var way: Way
        /// Why `GRANARY_PAGE_HASH`'s value was not followed, or nil.
        var note: String?
    }

    /// The way `GRANARY_PAGE_HASH` asks for (`value`, nil when unset), on a CPU that has
    /// AVX-512 or not and SHA instructions or not: its value when this CPU runs it, else the
    /// default with a note.
    static func select(
        _ value: String?, wideAvailable: Bool = PageHash.wideAvailable,
        shaInstructions: Bool = SHA256.cpuHasSHAInstructions
    ) -> Selection {
        let fallback: Way = wideAvailable ? .wide : shaInstructions ? .crypto : .portable
        guard let value, !value.isEmpty else { return Selection(way: fallback) }
        guard let way = Way(rawValue: value.lowercased()), Way.settable.contains(way) else {
            let known = Way.settable.map(\.rawValue).joined(separator: ", ")
            return Selection(
                way: fallback,
                note: "GRANARY_PAGE_HASH=\(value) is not one of \(known): page hashes by \(fallback.rawValue)")
        }
        if way == .wide && !wideAvailable {
            return Selection(
                way: fallback,
                note:
                    "GRANARY_PAGE_HASH=wide: this CPU has no AVX-512F and AVX-512BW: page hashes by \(fallback.rawValue)"
            )
        }
        return Selection(way: way)
    }

    /// The process's way, from `GRANARY_PAGE_HASH` when the first page is hashed.
    static let selected = select(ProcessInfo.processInfo.environment["GRANARY_PAGE_HASH"])

    /// The SHA-256 of each page of `pages` (whole pages of `pageSize` bytes) into `digests`,
    /// 32 bytes per page in page order, the `way` given (tests run each; it must be available).
    static func digests(
        of pages: UnsafeRawBufferPointer, pageSize: Int, into digests: UnsafeMutableRawBufferPointer,
        way: Way = PageHash.selected.way
    ) {
        precondition(pageSize > 0 && pages.count % pageSize == 0, "whole pages")
        let count = pages.count / pageSize
        precondition(digests.count >= count * 32, "room for every digest")
        precondition(way.isAvailable, "\(way.rawValue) does not run on this CPU")
        guard count > 0, let from = pages.baseAddress, let to = digests.baseAddress else { return }
        var page = 0
        // The lanes take whole 64-byte blocks (every SQLite page size is 512 to 65536, a power of 2).
        if way != .crypto && pageSize % 64 == 0 && pageSize <= 65536 {
            while count - page >= 16 {
                let source = from.advanced(by: page * pageSize).assumingMemoryBound(to: UInt8.self)
                let target = to.advanced(by: page * 32).assumingMemoryBound(to: UInt8.self)
                switch way {
                case .wide: granary_sha256_x16(source, pageSize, target)
                case .portable: granary_sha256_x16_portable(source, pageSize, target, 0)
                case .portableBaseline: granary_sha256_x16_portable(source, pageSize, target, 1)
                case .crypto: preconditionFailure("not a lane way")
                }
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

/// What `GRANARY_PAGE_HASH` picked, for the command line to say when it was not followed (the
/// core never prints).
public enum PageHashSetting {
    /// Why `GRANARY_PAGE_HASH`'s value is not followed (`wide` on a CPU without AVX-512, or a
    /// value that is not a way), or nil.
    public static var note: String? { PageHash.selected.note }
}
