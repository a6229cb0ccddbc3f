import Foundation

/// Durations written as text: `30s`, `15m`, `12h`, `30d`, `2w`, or sums such as `1d12h`;
/// timeouts also take milliseconds (`500ms`) and plain, possibly fractional, seconds (`0.5`).
public enum DurationText {
    /// The longest duration a text may stand for: 100 years, in seconds.
    public static let longest: Int64 = 100 * 366 * 86_400

    /// The number of seconds `text` stands for, or `nil` when it is not a duration.
    public static func seconds(_ text: String) -> Int64? {
        var total: Int64 = 0
        var digits = ""
        var sawUnit = false
        for character in text {
            if character.isASCII, character.isNumber {
                digits.append(character)
                continue
            }
            let unit: Int64
            switch character {
            case "s": unit = 1
            case "m": unit = 60
            case "h": unit = 3600
            case "d": unit = 86_400
            case "w": unit = 604_800
            default: return nil
            }
            guard let number = Int64(digits) else { return nil }
            let (product, overflow) = number.multipliedReportingOverflow(by: unit)
            guard !overflow else { return nil }
            let (sum, overflowed) = total.addingReportingOverflow(product)
            guard !overflowed else { return nil }
            total = sum
            digits = ""
            sawUnit = true
        }
        guard digits.isEmpty, sawUnit else { return nil }
        return total
    }

    /// The duration `text` stands for, to the millisecond: a duration text (`2m`, `1m30s`,
    /// `500ms`) or a plain number of seconds (`30`, `0.5`). `nil` for anything else, including
    /// `nan`, `inf`, exponents, negative numbers and values past 100 years.
    public static func duration(_ text: String) -> Duration? {
        let limit = longest * 1000
        if let dot = text.firstIndex(of: "."), !text.contains(where: { !$0.isASCII || !($0.isNumber || $0 == ".") }) {
            // Plain seconds with a fraction: digits, one dot, digits.
            let whole = text[..<dot], fraction = text[text.index(after: dot)...]
            guard !(whole.isEmpty && fraction.isEmpty), !fraction.contains("."), whole.count <= 12 else { return nil }
            let milliseconds = (Int64(whole) ?? 0) * 1000 + Int64((fraction + "000").prefix(3))!
            return milliseconds <= limit ? .milliseconds(milliseconds) : nil
        }
        if !text.isEmpty, text.allSatisfy({ $0.isASCII && $0.isNumber }) {
            guard text.count <= 12, let seconds = Int64(text), seconds * 1000 <= limit else { return nil }
            return .seconds(seconds)
        }
        var milliseconds: Int64 = 0
        var rest = Substring(text)
        guard !rest.isEmpty else { return nil }
        while !rest.isEmpty {
            let digits = rest.prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty, digits.count <= 12, let number = Int64(digits) else { return nil }
            rest = rest.dropFirst(digits.count)
            let unit: Int64
            if rest.hasPrefix("ms") {
                unit = 1; rest = rest.dropFirst(2)
            } else {
                switch rest.first {
                case "s": unit = 1000
                case "m": unit = 60_000
                case "h": unit = 3_600_000
                case "d": unit = 86_400_000
                case "w": unit = 604_800_000
                default: return nil
                }
                rest = rest.dropFirst()
            }
            let (product, overflow) = number.multipliedReportingOverflow(by: unit)
            guard !overflow, product <= limit else { return nil }
            milliseconds += product
            guard milliseconds <= limit else { return nil }
        }
        return .milliseconds(milliseconds)
    }

    /// Whole seconds as the shortest duration text: `0s`, `45s`, `1m30s`, `2d`, `30d1h`.
    public static func format(seconds: Int64) -> String {
        guard seconds > 0 else { return "0s" }
        var rest = seconds
        var text = ""
        for (unit, name) in [(Int64(86_400), "d"), (3600, "h"), (60, "m"), (1, "s")] where rest >= unit {
            text += "\(rest / unit)\(name)"
            rest %= unit
        }
        return text
    }

    /// A duration as text that `duration(_:)` reads back: `2m`, `1m30s`, `500ms`, `1s500ms`.
    public static func format(_ duration: Duration) -> String {
        let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        let seconds = milliseconds / 1000, rest = milliseconds % 1000
        if rest == 0 { return format(seconds: seconds) }
        return (seconds > 0 ? format(seconds: seconds) : "") + "\(rest)ms"
    }
}

/// Sizes written as text: `512MiB`, `2GiB`, `64KiB`, `1TiB` (binary multiples; `K`, `M`, `G`,
/// `T`, `KB`… mean the same), or a plain number of bytes.
public enum ByteCountText {
    /// The number of bytes `text` stands for, or `nil` when it is not a size.
    public static func bytes(_ text: String) -> Int64? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        let digits = trimmed.prefix { $0.isASCII && $0.isNumber }
        guard let number = Int64(digits) else { return nil }
        let unit = trimmed.dropFirst(digits.count).trimmingCharacters(in: .whitespaces).lowercased()
        let shift: Int64
        switch unit {
        case "", "b": shift = 0
        case "k", "kb", "kib": shift = 10
        case "m", "mb", "mib": shift = 20
        case "g", "gb", "gib": shift = 30
        case "t", "tb", "tib": shift = 40
        default: return nil
        }
        let (product, overflow) = number.multipliedReportingOverflow(by: Int64(1) << shift)
        return overflow ? nil : product
    }

    /// `bytes` for a person, to three digits: `8.0 GiB`, `56 KiB`, `812 bytes`.
    public static func approximate(_ bytes: Int64) -> String {
        var value = Double(bytes)
        for unit in ["bytes", "KiB", "MiB", "GiB", "TiB"] {
            if value < 1024 || unit == "TiB" {
                return unit == "bytes"
                    ? "\(bytes) bytes" : String(format: value < 10 ? "%.1f %@" : "%.0f %@", value, unit)
            }
            value /= 1024
        }
        return "\(bytes) bytes"
    }

    /// `bytes` in the largest binary unit that divides it exactly (`512 MiB`), else in bytes.
    public static func render(_ bytes: Int64) -> String {
        for (shift, unit) in [(40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")]
        where bytes > 0 && bytes % (Int64(1) << shift) == 0 {
            return "\(bytes >> shift) \(unit)"
        }
        return "\(bytes) bytes"
    }
}
