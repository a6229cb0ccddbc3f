import GranaryKit
import Testing

/// `FolderName.encode` (a name's string back to its bytes) has a fast path for names that escape
/// no byte: it must give what the character-by-character form gives, and `decode` then `encode`
/// must give back every name's bytes exactly.
@Suite("folder names: string and bytes")
struct FolderNameTests {
    /// The character-by-character form: each escaped byte, or each scalar's UTF-8.
    static func reference(_ name: String) -> [UInt8] {
        var bytes: [UInt8] = []
        for scalar in name.unicodeScalars {
            if (0x10_FF00...0x10_FFFF).contains(scalar.value) {
                bytes.append(UInt8(scalar.value - 0x10_FF00))
            } else {
                bytes += Array(String(scalar).utf8)
            }
        }
        return bytes
    }

    @Test("ASCII bytes decode to the string of those characters, NUL and controls included")
    func ascii() {
        for bytes in [Array("Local.sqlite-wal".utf8), [0x00, 0x41, 0x0A, 0x7F], [], Array("a b/c".utf8)] as [[UInt8]] {
            let name = FolderName.decode(bytes)
            #expect(name.unicodeScalars.map(\.value) == bytes.map(UInt32.init))
            #expect(FolderName.encode(name) == bytes)
        }
    }

    @Test(
        "strings made elsewhere (older manifests, literals) encode as the character-by-character form: escapes of any byte, NFD, the code points beside the escapes"
    )
    func foreignStrings() {
        let strings = [
            "\u{10FF41}", "a\u{10FF00}b", "\u{10FFFF}", "\u{10FEFF}", "e\u{301}", "Cafe\u{301}.sqlite", "😀\u{10FF80}",
            "plain", "",
        ]
        for string in strings {
            #expect(FolderName.encode(string) == Self.reference(string), "\(string.unicodeScalars.map(\.value))")
        }
        // A name whose bytes are UTF-8 but not in NFC is kept as its bytes: its accent is escaped,
        // not decoded into a string that would normalize to another name.
        let decomposed = FolderName.decode(Array("Cafe\u{301}".utf8))
        #expect(!decomposed.unicodeScalars.elementsEqual("Cafe\u{301}".unicodeScalars))
        #expect(FolderName.encode(decomposed) == Array("Cafe\u{301}".utf8))
    }

    @Test("bytes to string and back, 20,000 names: ASCII, UTF-8, not UTF-8, not in NFC, escapes")
    func roundTrip() {
        // A fixed sequence (xorshift), the same every run.
        var state: UInt64 = 20_261_130
        func next() -> UInt64 {
            state ^= state << 13
            state ^= state >> 7
            state ^= state << 17
            return state
        }
        // Pieces names are made of: ASCII, composed and decomposed accents, a 4-byte character,
        // bytes that are not UTF-8 alone, and the UTF-8 of the escapes' own code points.
        let pieces: [[UInt8]] = [
            Array("a".utf8), Array("Local.sqlite".utf8), Array("é".utf8), Array("e\u{301}".utf8),
            Array("😀".utf8), [0xFF], [0xC3], [0x80], [0xE9], [0xF4, 0x8F, 0xBC, 0x80], Array("-".utf8),
            Array(" ".utf8), [0x0A],
        ]
        var escaped = 0
        for _ in 0..<20_000 {
            var bytes: [UInt8] = []
            for _ in 0..<(1 + Int(next() % 8)) { bytes += pieces[Int(next() % UInt64(pieces.count))] }
            let name = FolderName.decode(bytes)
            let encoded = FolderName.encode(name)
            #expect(encoded == bytes, "\(bytes) → \(name.unicodeScalars.map(\.value)) → \(encoded)")
            #expect(encoded == Self.reference(name))
            if encoded != Array(name.utf8) { escaped += 1 }
        }
        // Both paths were taken.
        #expect(escaped > 1_000 && escaped < 19_000, "\(escaped) names escaped a byte")
    }
}
