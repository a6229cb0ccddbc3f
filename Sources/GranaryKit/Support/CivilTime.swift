/// UTC calendar arithmetic for the times granary reads: archive and segment stamps, `--at`'s
/// RFC 3339. A date the calendar does not have (30 February, a 29 February outside a leap
/// year, an hour past 23) is no time (nil), never read as another day — Foundation's calendar
/// would roll 2026-02-30 over to 2 March.
public enum CivilTime {
    /// Whether `day` is a day of `month` (1–12) of `year` in the proleptic Gregorian calendar.
    public static func isDate(year: Int, month: Int, day: Int) -> Bool {
        guard (1...12).contains(month), day >= 1 else { return false }
        let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
        let lengths = [31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        return day <= lengths[month - 1]
    }

    /// Seconds since 1970-01-01T00:00:00Z of a UTC date and time, or nil when the calendar does
    /// not have it (see ``isDate(year:month:day:)``; hours 0–23, minutes and seconds 0–59).
    public static func seconds(year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int) -> Int64? {
        guard isDate(year: year, month: month, day: day), (0..<24).contains(hour), (0..<60).contains(minute),
            (0..<60).contains(second)
        else { return nil }
        // Days since 1970-01-01 (the civil-from-days algorithm, inverted): years counted from
        // March, so that a leap day is the last day of its year.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Int64(days) * 86_400 + Int64(hour * 3600 + minute * 60 + second)
    }

    /// The UTC date and time of `seconds` since 1970 (the inverse of
    /// ``seconds(year:month:day:hour:minute:second:)``).
    public static func components(seconds: Int64) -> (
        year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int
    ) {
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let inDay = Int(seconds - days * 86_400)
        let z = Int(days) + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        let month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        return (year, month, day, inDay / 3600, inDay / 60 % 60, inDay % 60)
    }

    /// RFC 3339 (`2026-11-28T13:00:00Z`, `t` or `z` in lower case, a space for the `T`, a zone
    /// offset `±HH:MM`, a fraction of any length) in microseconds since 1970: a fraction's digits
    /// past the sixth are dropped (a stamp holds microseconds); a day the month does not have, an
    /// hour past 23, a minute or second past 59 is no time (nil), never read as another one.
    public static func parseRFC3339(_ text: String) -> Int64? {
        let c = Array(text.utf8)
        func digits(_ at: Int, _ count: Int) -> Int? {
            guard at + count <= c.count else { return nil }
            var value = 0
            for i in at..<(at + count) {
                guard (48...57).contains(c[i]) else { return nil }
                value = value * 10 + Int(c[i] - 48)
            }
            return value
        }
        guard c.count >= 20, let year = digits(0, 4), c[4] == UInt8(ascii: "-"), let month = digits(5, 2),
            c[7] == UInt8(ascii: "-"), let day = digits(8, 2),
            [UInt8(ascii: "T"), UInt8(ascii: "t"), 32].contains(c[10]),
            let hour = digits(11, 2), c[13] == UInt8(ascii: ":"), let minute = digits(14, 2),
            c[16] == UInt8(ascii: ":"), let second = digits(17, 2),
            let local = seconds(year: year, month: month, day: day, hour: hour, minute: minute, second: second)
        else { return nil }
        var i = 19
        var micros: Int64 = 0
        if i < c.count, c[i] == UInt8(ascii: ".") {
            i += 1
            var count = 0
            while i < c.count, (48...57).contains(c[i]) {
                if count < 6 { micros = micros * 10 + Int64(c[i] - 48) }
                count += 1
                i += 1
            }
            guard count > 0 else { return nil }
            for _ in count..<max(count, 6) { micros *= 10 }
        }
        var offset = 0
        if i + 1 == c.count, c[i] == UInt8(ascii: "Z") || c[i] == UInt8(ascii: "z") {
            offset = 0
        } else if i + 6 == c.count, c[i] == UInt8(ascii: "+") || c[i] == UInt8(ascii: "-"),
            let h = digits(i + 1, 2), c[i + 3] == UInt8(ascii: ":"), let m = digits(i + 4, 2), h < 24, m < 60
        {
            offset = (h * 60 + m) * 60 * (c[i] == UInt8(ascii: "-") ? -1 : 1)
        } else {
            return nil
        }
        return (local - Int64(offset)) * 1_000_000 + micros
    }
}
