import Foundation
import GranaryDigest
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// ``PageHash``: every way of hashing pages this CPU runs (one page at a time, the portable sixteen
/// lanes in both their builds, the AVX-512 lanes) against the one-message SHA-256 and against stock
/// `sha256sum`, for every page size, counts around sixteen, and pages that start anywhere. A way
/// this CPU cannot run is a test reported as skipped, with the reason, never a silent pass.
@Suite("page hashes")
struct PageHashTests {
    /// Deterministic bytes (SplitMix64), with an all-zero page and an all-ones page among them.
    static func pages(count: Int, size: Int, seed: UInt64, skew: Int = 0) -> [UInt8] {
        var state = seed
        var bytes = [UInt8](repeating: 0, count: skew + count * size)
        for index in stride(from: skew, to: bytes.count, by: 8) {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            z ^= z >> 31
            for byte in 0..<min(8, bytes.count - index) {
                bytes[index + byte] = UInt8(truncatingIfNeeded: z >> (8 * byte))
            }
        }
        if count > 2 {
            for at in skew..<skew + size { bytes[at] = 0 }
            for at in skew + size..<skew + 2 * size { bytes[at] = 0xFF }
        }
        return bytes
    }

    static func digests(_ bytes: [UInt8], skew: Int, size: Int, way: PageHash.Way) -> [UInt8] {
        let count = (bytes.count - skew) / size
        var out = [UInt8](repeating: 0xAA, count: count * 32)
        bytes.withUnsafeBytes { all in
            out.withUnsafeMutableBytes {
                PageHash.digests(
                    of: UnsafeRawBufferPointer(rebasing: all[skew...]), pageSize: size, into: $0, way: way)
            }
        }
        return out
    }

    static let pageSizes = [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
    /// The ways every CPU runs; the wide way has tests of its own, enabled where the CPU has it.
    static let everywhere: [PageHash.Way] = [.crypto, .portable, .portableBaseline]
    static let noWide = "this CPU has no AVX-512F and AVX-512BW: the wide (AVX-512) way is not compared here"

    /// `way`'s digests of every count around sixteen (a partial last batch, fewer than sixteen
    /// pages, none) from every offset are the one-message SHA-256's, page by page.
    static func expectSameAsOneAtATime(way: PageHash.Way, pageSize: Int) {
        for count in [0, 1, 7, 15, 16, 17, 31, 32, 33, 50] {
            for skew in [0, 1, 4] {
                let bytes = Self.pages(count: count, size: pageSize, seed: UInt64(count * 131 + skew), skew: skew)
                var expected: [UInt8] = []
                for page in 0..<count {
                    let start = skew + page * pageSize
                    expected += Array(SHA256.hash(data: bytes[start..<start + pageSize]))
                }
                // (Compared as one Bool: a failing comparison of long arrays prints both whole.)
                let same = Self.digests(bytes, skew: skew, size: pageSize, way: way) == expected
                #expect(same, "\(way.rawValue): \(count) pages of \(pageSize) bytes from offset \(skew)")
            }
        }
    }

    /// `way`'s digests of 20 pages of `pageSize` (a batch of sixteen and four more) are stock
    /// sha256sum's of each page written to a file.
    static func expectSameAsSha256sum(way: PageHash.Way, pageSize: Int) throws {
        let folder = TemporaryFolder()
        let count = 20
        let bytes = Self.pages(count: count, size: pageSize, seed: UInt64(pageSize))
        var paths: [String] = []
        for page in 0..<count {
            let path = folder.child("page-\(page)")
            try Data(bytes[page * pageSize..<(page + 1) * pageSize]).write(to: URL(fileURLWithPath: path))
            paths.append(path)
        }
        let listing = try OverlappedPackTests.run("/usr/bin/sha256sum", paths)
        let expected = listing.split(separator: "\n").map { String($0.prefix(64)) }
        let ours = Self.digests(bytes, skew: 0, size: pageSize, way: way)
        let hex = stride(from: 0, to: ours.count, by: 32).map {
            ours[$0..<$0 + 32].map { String(format: "%02x", $0) }.joined()
        }
        #expect(expected.count == count)
        #expect(hex == expected, "\(way.rawValue), pages of \(pageSize) bytes")
    }

    @Test(
        "one at a time and the portable sixteen lanes (both builds) give the one-message SHA-256 of each page, for every page size and count",
        arguments: everywhere, pageSizes)
    func sameAsOneAtATime(way: PageHash.Way, pageSize: Int) {
        Self.expectSameAsOneAtATime(way: way, pageSize: pageSize)
    }

    @Test(
        "the AVX-512 sixteen lanes give the one-message SHA-256 of each page, for every page size and count",
        .enabled(if: PageHash.wideAvailable, Comment(rawValue: noWide)), arguments: pageSizes)
    func wideSameAsOneAtATime(pageSize: Int) {
        Self.expectSameAsOneAtATime(way: .wide, pageSize: pageSize)
    }

    @Test(
        "one at a time's and the portable lanes' digests are stock sha256sum's, page by page, for every page size",
        arguments: everywhere, pageSizes)
    func sameAsSha256sum(way: PageHash.Way, pageSize: Int) throws {
        try Self.expectSameAsSha256sum(way: way, pageSize: pageSize)
    }

    @Test(
        "the AVX-512 lanes' digests are stock sha256sum's, page by page, for every page size",
        .enabled(if: PageHash.wideAvailable, Comment(rawValue: noWide)), arguments: pageSizes)
    func wideSameAsSha256sum(pageSize: Int) throws {
        try Self.expectSameAsSha256sum(way: .wide, pageSize: pageSize)
    }

    @Test("the process hashes pages the way this CPU runs fastest unless GRANARY_PAGE_HASH says otherwise")
    func defaultWay() {
        for sha in [true, false] {
            #expect(PageHash.select(nil, wideAvailable: true, shaInstructions: sha) == .init(way: .wide))
            #expect(PageHash.select("", wideAvailable: true, shaInstructions: sha) == .init(way: .wide))
        }
        // Without AVX-512: one page at a time with SHA instructions, else the portable lanes.
        #expect(PageHash.select(nil, wideAvailable: false, shaInstructions: true) == .init(way: .crypto))
        #expect(PageHash.select(nil, wideAvailable: false, shaInstructions: false) == .init(way: .portable))
        // Whatever this process was started with, it runs a way this CPU has.
        #expect(PageHash.selected.way.isAvailable)
        if ProcessInfo.processInfo.environment["GRANARY_PAGE_HASH"] == nil {
            let fastest: PageHash.Way =
                PageHash.wideAvailable ? .wide : SHA256.cpuHasSHAInstructions ? .crypto : .portable
            #expect(PageHash.selected == .init(way: fastest))
        }
    }

    @Test("GRANARY_PAGE_HASH turns the sixteen lanes off, or picks the portable or the wide ones")
    func switchedByAdmin() {
        for wide in [true, false] {
            #expect(PageHash.select("crypto", wideAvailable: wide) == .init(way: .crypto))
            #expect(PageHash.select("portable", wideAvailable: wide) == .init(way: .portable))
            #expect(PageHash.select("PORTABLE", wideAvailable: wide) == .init(way: .portable))
        }
        #expect(PageHash.select("wide", wideAvailable: true) == .init(way: .wide))
    }

    @Test("GRANARY_PAGE_HASH=wide on a CPU without AVX-512, or a value it does not know, falls back with a note")
    func fallsBackWithNote() {
        let wide = PageHash.select("wide", wideAvailable: false, shaInstructions: true)
        #expect(wide.way == .crypto)
        #expect(PageHash.select("wide", wideAvailable: false, shaInstructions: false).way == .portable)
        #expect(wide.note?.contains("no AVX-512") == true, "\(wide.note ?? "no note")")
        let unknown = PageHash.select("fast", wideAvailable: true)
        #expect(unknown.way == .wide)
        #expect(unknown.note?.contains("GRANARY_PAGE_HASH=fast is not one of crypto, portable, wide") == true)
        // The tests' way is not an admin's switch.
        #expect(PageHash.select("portable-baseline", wideAvailable: false).note != nil)
    }
}
