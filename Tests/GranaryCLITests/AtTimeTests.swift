import Foundation
import GranaryKit
import Testing

@testable import GranaryCLI

/// `restore --at`'s times: RFC 3339 and archive stamps are read to the microsecond, and a date
/// the calendar does not have is no time (never read as another day).
@Suite("restore --at: RFC 3339 and stamps, to the microsecond, no impossible date")
struct AtTimeTests {
    static func micros(_ text: String) -> Int64? {
        RestoreCommand.parseTime(text, timeZone: TimeZone(identifier: "UTC")!).map(ArchiveName.micros)
    }

    /// 2026-11-30T02:29:20Z in microseconds since 1970.
    static let moment: Int64 = 1_796_005_760_000_000

    @Test(
        "RFC 3339 forms: Z or z, T, t or a space, offsets, fractions of any length kept to the microsecond",
        arguments: [
            ("2026-11-30T02:29:20Z", moment),
            ("2026-11-30t02:29:20z", moment),
            ("2026-11-30 02:29:20Z", moment),
            ("2026-11-30T02:29:20+00:00", moment),
            ("2026-11-30T04:29:20+02:00", moment),
            ("2026-11-29T20:59:20-05:30", moment),
            ("2026-11-30T02:29:20.5Z", moment + 500_000),
            ("2026-11-30T02:29:20.123456Z", moment + 123_456),
            ("2026-11-30T02:29:20.1234567891Z", moment + 123_456),
            ("2026-11-30T02:29:20.000001Z", moment + 1),
            ("20261130T022920Z", moment),
            ("20261130T022920.123456Z", moment + 123_456),
            ("2024-02-29T00:00:00Z", 1_709_164_800_000_000),
            ("2000-02-29T00:00:00Z", 951_782_400_000_000),
            ("1970-01-01T00:00:00Z", 0),
        ])
    func reads(_ text: String, _ expected: Int64) {
        #expect(Self.micros(text) == expected, "\(text)")
    }

    @Test(
        "a day the month does not have, an hour, minute or second out of range, a bad offset or fraction: no time",
        arguments: [
            "2026-02-30T10:00:00Z", "2026-02-29T10:00:00Z", "1900-02-29T10:00:00Z", "2026-04-31T10:00:00Z",
            "2026-11-30T25:00:00Z", "2026-11-30T10:60:00Z", "2026-11-30T10:00:60Z", "2026-13-01T10:00:00Z",
            "2026-00-01T10:00:00Z", "2026-11-00T10:00:00Z", "2026-11-30T10:00:00+0200",
            "2026-11-30T10:00:00+24:00", "2026-11-30T10:00:00.Z", "2026-11-30T10:00:00ZZ", "20260230T100000Z",
            "20260230T100000.000000Z", "2026-02-30 10:00", "2026-02-30 10:00:00", "2026-02-30T10:00",
            // Before the year 0 or after 9999: no stamp can say it.
            "1000000d", "0000-01-01T00:00:00+00:01", "9999-12-31T23:59:59-00:01",
        ])
    func refuses(_ text: String) {
        #expect(Self.micros(text) == nil, "\(text)")
    }
}
