import Crypto
import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// ``PageHash``: the sixteen-lane SHA-256 (AVX-512) against swift-crypto's and against stock
/// `sha256sum`, for every page size, counts around sixteen, and pages that start anywhere.
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

    static func digests(_ bytes: [UInt8], skew: Int, size: Int, wide: Bool) -> [UInt8] {
        let count = (bytes.count - skew) / size
        var out = [UInt8](repeating: 0xAA, count: count * 32)
        bytes.withUnsafeBytes { all in
            out.withUnsafeMutableBytes {
                PageHash.digests(
                    of: UnsafeRawBufferPointer(rebasing: all[skew...]), pageSize: size, into: $0, wide: wide)
            }
        }
        return out
    }

    @Test(
        "sixteen pages at a time give swift-crypto's SHA-256 of each page, for every page size and count",
        arguments: [512, 1024, 2048, 4096, 8192, 16384, 32768, 65536])
    func sameAsOneAtATime(pageSize: Int) throws {
        for count in [0, 1, 15, 16, 17, 31, 32, 33, 50] {
            for skew in [0, 1, 4] {
                let bytes = Self.pages(count: count, size: pageSize, seed: UInt64(count * 131 + skew), skew: skew)
                var expected: [UInt8] = []
                for page in 0..<count {
                    let start = skew + page * pageSize
                    expected += Array(SHA256.hash(data: bytes[start..<start + pageSize]))
                }
                // (Compared as one Bool: a failing comparison of long arrays prints both whole.)
                let narrow = Self.digests(bytes, skew: skew, size: pageSize, wide: false) == expected
                #expect(narrow, "one at a time: \(count) pages of \(pageSize) bytes from offset \(skew)")
                if PageHash.wide {
                    let wide = Self.digests(bytes, skew: skew, size: pageSize, wide: true) == expected
                    #expect(wide, "sixteen at a time: \(count) pages of \(pageSize) bytes from offset \(skew)")
                }
            }
        }
    }

    @Test("the digests are stock sha256sum's, page by page (the sixteen-lane way when the CPU has it)")
    func sameAsSha256sum() throws {
        let folder = TemporaryFolder()
        let size = 4096, count = 20
        let bytes = Self.pages(count: count, size: size, seed: 7)
        var paths: [String] = []
        for page in 0..<count {
            let path = folder.child("page-\(page)")
            try Data(bytes[page * size..<(page + 1) * size]).write(to: URL(fileURLWithPath: path))
            paths.append(path)
        }
        let listing = try OverlappedPackTests.run("/usr/bin/sha256sum", paths)
        let expected = listing.split(separator: "\n").map { String($0.prefix(64)) }
        let ours = Self.digests(bytes, skew: 0, size: size, wide: PageHash.wide)
        let hex = stride(from: 0, to: ours.count, by: 32).map {
            ours[$0..<$0 + 32].map { String(format: "%02x", $0) }.joined()
        }
        #expect(hex == expected)
    }
}
