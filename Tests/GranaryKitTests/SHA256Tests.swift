import Foundation
import GranaryDigest
import GranaryTestSupport
import Testing

/// granary's SHA-256 (Sources/CSHA256): both ways, the CPU's SHA instructions and portable C,
/// against NIST's examples (FIPS 180-4's appendix, as NIST publishes them), against coreutils'
/// `sha256sum` and Python's `hashlib` (other implementations), for every length across the block
/// and padding boundaries, fed whole and in pieces split anywhere. The SHA-NI way runs where the
/// CPU has it; where it has not, `shaInstructionsTested` is reported as skipped, with the reason.
@Suite("SHA-256, both ways", .serialized)
struct SHA256Tests {
    enum Way: String, CaseIterable { case fastest, portable }

    /// Runs `body` with `way` forced for the process, then the fastest way again.
    static func with<T>(_ way: Way, _ body: () throws -> T) rethrows -> T {
        SHA256.forcePortable(way == .portable)
        defer { SHA256.forcePortable(false) }
        return try body()
    }

    static func hex(_ digest: SHA256.Digest) -> String { digest.map { String(format: "%02x", $0) }.joined() }

    /// Deterministic bytes (SplitMix64).
    static func bytes(_ count: Int, seed: UInt64) -> [UInt8] {
        var state = seed
        return (0..<count).map { _ in
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return UInt8(truncatingIfNeeded: z ^ (z >> 31))
        }
    }

    /// Whether /proc/cpuinfo lists what the SHA-NI way needs: sha_ni, sse4_1 and ssse3.
    static let cpuHasSHA: Bool = {
        guard let info = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8),
            let line = info.split(separator: "\n").first(where: { $0.hasPrefix("flags") })
        else { return false }
        let flags = Set(line.split(separator: " ").map(String.init))
        return flags.isSuperset(of: ["sha_ni", "sse4_1", "ssse3"])
    }()
    static let noSHA =
        "this CPU has no SHA instructions (sha_ni with sse4_1 and ssse3): the SHA-NI way is not tested here, the portable way is"

    @Test("the CPU's SHA instructions are used where it has them, and the portable way when forced")
    func acceleration() {
        #expect(SHA256.cpuHasSHAInstructions == Self.cpuHasSHA, "/proc/cpuinfo says \(Self.cpuHasSHA)")
        #expect(SHA256.isAccelerated == Self.cpuHasSHA)
        Self.with(.portable) {
            #expect(!SHA256.isAccelerated)
            #expect(SHA256.cpuHasSHAInstructions == Self.cpuHasSHA, "the CPU's answer ignores the switch")
        }
        #expect(SHA256.isAccelerated == Self.cpuHasSHA)
    }

    @Test(
        "the SHA-NI way runs on this CPU (so the tests below compare it with the portable way)",
        .enabled(if: cpuHasSHA, Comment(rawValue: noSHA)))
    func shaInstructionsTested() {
        Self.with(.fastest) { #expect(SHA256.isAccelerated) }
    }

    @Test(
        "NIST's examples, both ways: empty, abc, the two-block message, a million a's in odd pieces",
        arguments: Way.allCases)
    func nistExamples(way: Way) {
        Self.with(way) {
            #expect(
                Self.hex(SHA256.hash(data: [UInt8]()))
                    == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
            #expect(
                Self.hex(SHA256.hash(data: Array("abc".utf8)))
                    == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
            #expect(
                Self.hex(SHA256.hash(data: Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)))
                    == "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1")
            var million = SHA256()
            let piece = [UInt8](repeating: UInt8(ascii: "a"), count: 997)
            var fed = 0
            while fed < 1_000_000 {
                let n = min(piece.count, 1_000_000 - fed)
                million.update(data: piece[0..<n])
                fed += n
            }
            #expect(Self.hex(million.finalize()) == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
        }
    }

    @Test(
        "every length 0...300 and a few large ones: both ways equal sha256sum's and hashlib's, whole or fed in pieces")
    func againstOtherImplementations() throws {
        let folder = TemporaryFolder("granary-sha256")
        var lengths = Array(0...300)
        lengths += [511, 512, 513, 4095, 4096, 4097, 65_536 + 55, 1 << 20, (1 << 20) + 63]
        var files: [String] = []
        for length in lengths {
            let path = folder.child(String(format: "m%08d", length))
            try Data(Self.bytes(length, seed: UInt64(length) &* 7919)).write(to: URL(fileURLWithPath: path))
            files.append(path)
        }
        // coreutils' sha256sum over every file at once.
        let sums = try OverlappedPackTests.run("/usr/bin/sha256sum", files)
        var expected: [String: String] = [:]
        for line in sums.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1)
            expected[String(parts[1].drop { $0 == " " || $0 == "*" })] = String(parts[0])
        }
        // Python's hashlib (OpenSSL) over the same files.
        let script =
            "import hashlib,sys\nfor p in sys.argv[1:]: print(hashlib.sha256(open(p,'rb').read()).hexdigest(), p)"
        let python = try OverlappedPackTests.run("/usr/bin/python3", ["-c", script] + files)
        for line in python.split(separator: "\n") {
            let parts = line.split(separator: " ", maxSplits: 1)
            #expect(expected[String(parts[1])] == String(parts[0]), "sha256sum and hashlib differ on \(parts[1])")
        }
        #expect(expected.count == files.count)
        for way in Way.allCases {
            Self.with(way) {
                for (index, length) in lengths.enumerated() {
                    let message = Self.bytes(length, seed: UInt64(length) &* 7919)
                    let want = expected[files[index]]
                    #expect(Self.hex(SHA256.hash(data: message)) == want, "\(way) whole, \(length) bytes")
                    // Fed in pieces: every split point for the short ones, a few for the long.
                    let splits = length <= 300 ? Array(0...length) : [1, 63, 64, 65, length / 2, length - 1]
                    for split in splits {
                        var hasher = SHA256()
                        message.withUnsafeBytes {
                            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[0..<split]))
                            hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: $0[split...]))
                        }
                        if Self.hex(hasher.finalize()) != want {
                            Issue.record("\(way), \(length) bytes split at \(split): not sha256sum's")
                            break
                        }
                    }
                }
            }
        }
    }

    @Test("a hasher read with finalize can go on being fed; equal digests are equal values and hash alike")
    func finalizeKeepsState() {
        var hasher = SHA256()
        hasher.update(data: Array("ab".utf8))
        let early = hasher.finalize()
        hasher.update(data: Data("c".utf8))
        #expect(early == SHA256.hash(data: Array("ab".utf8)))
        #expect(hasher.finalize() == SHA256.hash(data: Array("abc".utf8)))
        #expect(Set([hasher.finalize(), SHA256.hash(data: Array("abc".utf8))]).count == 1)
        #expect(Array(early).count == 32 && early != hasher.finalize())
    }
}
