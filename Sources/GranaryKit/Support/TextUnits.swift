import Foundation

/// A span of time as the retention rules and every duration setting take it: calendar months
/// (a year is 12) and milliseconds, counted back from a moment as restic's `--keep-within`
/// counts (`latest.AddDate(-y, -m, -d).Add(-h)`): months first, in UTC, then the rest.
public struct TimeSpan: Sendable, Equatable, Codable, ExpressibleByIntegerLiteral, CustomStringConvertible {
    public var months: Int64
    public var milliseconds: Int64

    public init(months: Int64 = 0, milliseconds: Int64 = 0) {
        self.months = months
        self.milliseconds = milliseconds
    }

    /// A whole number of seconds.
    public init(seconds: Int64) { self.init(months: 0, milliseconds: seconds * 1000) }

    public init(integerLiteral seconds: Int64) { self.init(seconds: seconds) }

    public var isZero: Bool { months == 0 && milliseconds == 0 }

    /// The moment this span before `date`: months taken from the month field with the day
    /// kept and then normalised as Go's `time.AddDate` does (restic's: 03-31 minus one month is
    /// 02-31, that is 03-03), in UTC; then the rest.
    public func start(before date: Date) -> Date {
        var shifted = date
        if months != 0 {
            var calendar = Calendar(identifier: .gregorian)
            calendar.timeZone = TimeZone(identifier: "UTC")!
            let c = calendar.dateComponents([.year, .month, .day], from: date)
            let dayStart = calendar.startOfDay(for: date)
            let timeOfDay = date.timeIntervalSince(dayStart)
            let total = Int64(c.year!) * 12 + Int64(c.month! - 1) - months
            let year = Int(total >= 0 ? total / 12 : (total - 11) / 12)
            let month = Int(total - Int64(year) * 12) + 1
            guard let first = calendar.date(from: DateComponents(year: year, month: month, day: 1)) else {
                return .distantPast
            }
            shifted = first.addingTimeInterval(Double(c.day! - 1) * 86_400 + timeOfDay)
        }
        return shifted.addingTimeInterval(-Double(milliseconds) / 1000)
    }

    /// Its length in seconds, counted back from `date` (a month is as long as the calendar says).
    public func seconds(before date: Date = Date()) -> TimeInterval { date.timeIntervalSince(start(before: date)) }

    /// The text `DurationText.span` reads back: `1y6mo`, `2d`, `1h30min`, `500ms`, `0s`.
    public var description: String {
        var text = ""
        if months >= 12 { text += "\(months / 12)y" }
        if months % 12 > 0 { text += "\(months % 12)mo" }
        if milliseconds > 0 { text += DurationText.format(.milliseconds(milliseconds)) }
        return text.isEmpty ? "0s" : text
    }
}

/// Durations written as text, one grammar for every duration granary takes, on the command line
/// and in the configuration file (`keep_within`, `--max-age`, `--lock-timeout`, `owner_timeout`,
/// `[limits] time`, …): numbers with units, summed (`1d12h`, `1h30min`, `1y6mo`), or a bare
/// number of seconds (`30`, `0.5`). Units: `ms`, `s`, `min`, `h`, `d`, `w`, `mo` (a calendar
/// month: restic's `m`) and `y` (a calendar year). A number may have a fraction except before
/// `mo` and `y` (`1.5min`, `0.5s`). `m` alone is refused: restic reads it as months, systemd and
/// many tools as minutes, and granary will not guess (the message names both spellings).
public enum DurationText {
    /// The longest duration a text may stand for: 100 years, in seconds.
    public static let longest: Int64 = 100 * 366 * 86_400

    /// Why `text` is not a duration, in a phrase for messages (nil when it is one).
    public static func problem(_ text: String) -> String? {
        if span(text) != nil { return nil }
        var rest = Substring(text)
        while let digit = rest.firstIndex(where: { !($0.isASCII && ($0.isNumber || $0 == ".")) }) {
            rest = rest[digit...]
            let unit = rest.prefix { $0.isASCII && $0.isLetter }
            if unit == "m" {
                return "m is not a unit here: write min for minutes, or mo for months (restic's m)"
            }
            if unit.isEmpty { break }
            rest = rest.dropFirst(unit.count)
        }
        if wellFormed(text) {
            return "too large: a duration is at most 100y (\(longest) seconds)"
        }
        return
            "not a duration: use a number with ms, s, min, h, d, w, mo or y (e.g. 30s, 2min, 1h30min, 7d, 6mo, 1y), or plain seconds"
    }

    /// The span `text` stands for, or nil: nothing past 100 years, no negative, `nan`, `inf` or
    /// exponent.
    public static func span(_ text: String) -> TimeSpan? {
        var months: Int64 = 0
        var milliseconds: Int64 = 0
        var rest = Substring(text)
        guard !rest.isEmpty, rest.utf8.count <= 64 else { return nil }
        // A bare number: seconds.
        if rest.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }) {
            guard let ms = scaled(rest, by: 1000) else { return nil }
            return ms <= longest * 1000 ? TimeSpan(milliseconds: ms) : nil
        }
        while !rest.isEmpty {
            let number = rest.prefix { $0.isASCII && ($0.isNumber || $0 == ".") }
            guard !number.isEmpty else { return nil }
            rest = rest.dropFirst(number.count)
            let unit = rest.prefix { $0.isASCII && $0.isLetter }
            rest = rest.dropFirst(unit.count)
            let factor: Int64
            switch unit {
            case "ms": factor = 1
            case "s": factor = 1000
            case "min": factor = 60_000
            case "h": factor = 3_600_000
            case "d": factor = 86_400_000
            case "w": factor = 604_800_000
            case "mo", "y":
                guard !number.contains("."), number.count <= 6, let count = Int64(number) else { return nil }
                months += unit == "y" ? count * 12 : count
                guard months <= 1200 else { return nil }
                continue
            default: return nil
            }
            guard let value = scaled(number, by: factor) else { return nil }
            let (sum, overflow) = milliseconds.addingReportingOverflow(value)
            guard !overflow, sum <= longest * 1000 else { return nil }
            milliseconds = sum
        }
        return TimeSpan(months: months, milliseconds: milliseconds)
    }

    /// Whether `text` is written in the grammar, whatever its size (so that a duration past the
    /// limits is called too large, not "not a duration").
    private static func wellFormed(_ text: String) -> Bool {
        func isNumber(_ part: Substring) -> Bool {
            !part.isEmpty && part != "." && part.filter { $0 == "." }.count <= 1
        }
        var rest = Substring(text)
        if rest.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }) { return isNumber(rest) }
        while !rest.isEmpty {
            let number = rest.prefix { $0.isASCII && ($0.isNumber || $0 == ".") }
            guard isNumber(number) else { return false }
            rest = rest.dropFirst(number.count)
            let unit = rest.prefix { $0.isASCII && $0.isLetter }
            rest = rest.dropFirst(unit.count)
            guard ["ms", "s", "min", "h", "d", "w", "mo", "y"].contains(String(unit)) else { return false }
            if (unit == "mo" || unit == "y") && number.contains(".") { return false }
        }
        return true
    }

    /// `number` (digits, at most one dot) times `factor`, rounded down to a whole; nil when it
    /// is not such a number or too large.
    private static func scaled(_ number: Substring, by factor: Int64) -> Int64? {
        let parts = number.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count <= 2, !(parts.allSatisfy(\.isEmpty)), parts[0].count <= 12 else { return nil }
        let whole = parts[0].isEmpty ? 0 : Int64(parts[0])
        guard let whole else { return nil }
        var result = whole.multipliedReportingOverflow(by: factor)
        guard !result.overflow else { return nil }
        if parts.count == 2 {
            let fraction = parts[1].prefix(9)
            guard fraction.allSatisfy({ $0.isASCII && $0.isNumber }), parts[1].count <= 18 else { return nil }
            guard !fraction.isEmpty || !parts[0].isEmpty else { return nil }
            var scale: Int64 = 1
            for _ in fraction { scale *= 10 }
            let part = (Int64(fraction) ?? 0).multipliedReportingOverflow(by: factor)
            guard !part.overflow else { return nil }
            let sum = result.partialValue.addingReportingOverflow(part.partialValue / scale)
            guard !sum.overflow else { return nil }
            result = sum
        }
        return result.partialValue
    }

    /// The number of whole seconds `text` stands for (months counted back from now), or nil.
    public static func seconds(_ text: String, now: Date = Date()) -> Int64? {
        guard let span = span(text) else { return nil }
        let seconds = span.seconds(before: now)
        guard seconds <= Double(longest) else { return nil }
        return Int64(seconds)
    }

    /// The duration `text` stands for, to the millisecond (months counted back from now), or nil.
    public static func duration(_ text: String, now: Date = Date()) -> Duration? {
        guard let span = span(text) else { return nil }
        if span.months == 0 { return .milliseconds(span.milliseconds) }
        let seconds = span.seconds(before: now)
        guard seconds <= Double(longest) else { return nil }
        return .milliseconds(Int64(seconds * 1000))
    }

    /// Whole seconds as the shortest duration text: `0s`, `45s`, `1min30s`, `2d`, `30d1h`.
    public static func format(seconds: Int64) -> String {
        guard seconds > 0 else { return "0s" }
        var rest = seconds
        var text = ""
        for (unit, name) in [(Int64(86_400), "d"), (3600, "h"), (60, "min"), (1, "s")] where rest >= unit {
            text += "\(rest / unit)\(name)"
            rest %= unit
        }
        return text
    }

    /// A duration as text that `duration(_:)` reads back: `2min`, `1min30s`, `500ms`, `1s500ms`.
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
