import Foundation

/// File names are bytes on Linux; granary's names are Swift strings. Every byte string has
/// exactly one string, and back (``decode(_:)``, ``encode(_:)``), and two different byte strings
/// never give strings that Swift holds equal.
///
/// - A name that is valid UTF-8 in Unicode normal form C (NFC: what Linux programs write, and
///   every ASCII name) is its plain string.
/// - A byte that is not part of a valid UTF-8 sequence becomes U+10FF00 + byte (a private-use
///   code point); a name that really contains one of those code points has the bytes of each
///   escaped the same way.
/// - A name that is valid UTF-8 but not in NFC (`Cafe` + U+0301 `.sqlite`, as macOS writes
///   names) has each byte of its non-ASCII characters escaped the same way: Swift compares
///   strings by canonical equivalence, so `Café.sqlite` in NFC and in NFD would be equal
///   strings for two different files, one taking the other's place in every set, dictionary
///   and manifest lookup (the archive of such a user never verified). With this rule every
///   string granary makes of a name is in NFC, where equivalent means identical.
///
/// Terminals show an escaped byte as `\xHH` (the command line's escaping), JSON documents give
/// such a name's bytes in base64.
public enum FolderName {
    static let escapeBase: UInt32 = 0x10_FF00
    static let escapes = escapeBase...(escapeBase + 0xFF)

    /// The string for the bytes of a name.
    public static func decode(_ bytes: [UInt8]) -> String {
        // ASCII (most names, every event `follow` takes in): each byte is its character.
        if bytes.allSatisfy({ $0 < 0x80 }) { return String(decoding: bytes, as: UTF8.self) }
        var scalars = String.UnicodeScalarView()
        var index = 0
        var ascii = true
        while index < bytes.count {
            if let (scalar, length) = decodeOne(bytes, at: index), !escapes.contains(scalar.value) {
                scalars.append(scalar)
                if !scalar.isASCII { ascii = false }
                index += length
            } else {
                scalars.append(escaped(bytes[index]))
                index += 1
            }
        }
        guard !ascii else { return String(scalars) }
        let text = String(scalars)
        // Escaped bytes and ASCII never combine: only the characters decoded can make a name
        // that is not in NFC.
        if text.unicodeScalars.elementsEqual(text.precomposedStringWithCanonicalMapping.unicodeScalars) { return text }
        return String(String.UnicodeScalarView(bytes.map { $0 < 0x80 ? Unicode.Scalar($0) : escaped($0) }))
    }

    /// The bytes of a name's string (the inverse of ``decode(_:)``).
    public static func encode(_ name: String) -> [UInt8] {
        // Most names escape no byte: their bytes are their UTF-8 (every path of every read of
        // `follow` comes here; a string made per character cost 7 % of its CPU).
        guard name.unicodeScalars.contains(where: { escapes.contains($0.value) }) else { return Array(name.utf8) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(name.utf8.count)
        for scalar in name.unicodeScalars {
            if escapes.contains(scalar.value) {
                bytes.append(UInt8(scalar.value - escapeBase))
            } else {
                UTF8.encode(scalar) { bytes.append($0) }
            }
        }
        return bytes
    }

    /// Whether the name is its bytes as text (it has no escaped byte): UTF-8, in NFC, and
    /// without the code points granary keeps for escapes.
    public static func isUTF8(_ name: String) -> Bool {
        !name.unicodeScalars.contains { escapes.contains($0.value) }
    }

    /// The string granary makes of the bytes of `name`: `name` itself when it came from
    /// ``decode(_:)``; for a string from elsewhere (an older manifest), the one string of its bytes.
    public static func canonical(_ name: String) -> String {
        decode(encode(name))
    }

    /// Calls `body` with the name's bytes as a C string.
    static func withRaw<T>(_ name: String, _ body: (UnsafePointer<CChar>) -> T) -> T {
        let bytes = encode(name) + [0]
        return bytes.withUnsafeBufferPointer { $0.withMemoryRebound(to: CChar.self) { body($0.baseAddress!) } }
    }

    private static func escaped(_ byte: UInt8) -> Unicode.Scalar {
        Unicode.Scalar(escapeBase + UInt32(byte))!
    }

    private static func decodeOne(_ bytes: [UInt8], at index: Int) -> (Unicode.Scalar, Int)? {
        var iterator = bytes[index...].makeIterator()
        var decoder = UTF8()
        switch decoder.decode(&iterator) {
        case .scalarValue(let scalar): return (scalar, String(scalar).utf8.count)
        default: return nil
        }
    }
}
