import Foundation
import Testing

@testable import GranaryKit

/// The UTC calendar arithmetic behind archive stamps, segment names and `--at`: checked against
/// Foundation's Gregorian calendar (an independent implementation) over many random moments, and
/// a date the calendar does not have is refused wherever a stamp is read, never rolled over.
@Suite("civil time: stamps and RFC 3339 against Foundation's calendar, impossible dates refused")
struct CivilTimeTests {
    static let calendar: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()

    @Test("components and seconds agree with Foundation's calendar from 1601 to 2399, and invert each other")
    func agreesWithFoundation() {
        var generator = SystemRandomNumberGenerator()
        // 1601-01-01 .. 2399-12-31 (Foundation's calendar is Julian before 1582), plus the edges
        // of leap days and of the epoch.
        var moments: [Int64] = [0, -1, 86_399, 86_400, 951_782_400, 951_868_799, 4_107_542_399, -11_644_473_600]
        for _ in 0..<20_000 { moments.append(Int64.random(in: -11_644_473_600...13_569_465_599, using: &generator)) }
        for seconds in moments {
            let c = CivilTime.components(seconds: seconds)
            let f = Self.calendar.dateComponents(
                [.year, .month, .day, .hour, .minute, .second], from: Date(timeIntervalSince1970: Double(seconds)))
            let ours: [Int] = [c.year, c.month, c.day, c.hour, c.minute, c.second]
            let foundations: [Int] = [f.year!, f.month!, f.day!, f.hour!, f.minute!, f.second!]
            #expect(ours == foundations, "\(seconds)")
            #expect(
                CivilTime.seconds(
                    year: c.year, month: c.month, day: c.day, hour: c.hour, minute: c.minute, second: c.second)
                    == seconds)
        }
    }

    @Test(
        "a day the month does not have, an hour past 23, a minute or second past 59: no time, in stamps and RFC 3339",
        arguments: [
            ("20260230T100000Z", "2026-02-30T10:00:00Z"), ("20230229T000000Z", "2023-02-29T00:00:00Z"),
            ("21000229T000000Z", "2100-02-29T00:00:00Z"), ("20260431T000000.000001Z", "2026-04-31T00:00:00.000001Z"),
            ("20261301T000000Z", "2026-13-01T00:00:00Z"), ("20261100T000000Z", "2026-11-00T00:00:00Z"),
            ("20261130T240000Z", "2026-11-30T24:00:00Z"), ("20261130T236000Z", "2026-11-30T23:60:00Z"),
            ("20261130T235960Z", "2026-11-30T23:59:60Z"),
        ])
    func impossible(_ stamp: String, _ rfc3339: String) {
        #expect(ArchiveName.parseMicros(stamp) == nil, "\(stamp)")
        #expect(CivilTime.parseRFC3339(rfc3339) == nil, "\(rfc3339)")
        // An archive or segment name with such a stamp is no archive of granary's.
        let precise = stamp.count == 23 ? stamp : String(stamp.dropLast()) + ".000000Z"
        #expect(ArchiveName(fileName: stamp + ".vm.tar.zst") == nil)
        #expect(ArchiveName(fileName: precise + "-delta.vm.tar.zst") == nil)
        #expect(Segment.parse(fileName: "0000000001-" + precise + "-" + precise + ".seg") == nil)
    }

    @Test("leap days that exist are read, and a stamp written is read back to the microsecond")
    func leapDaysAndRoundTrip() {
        // The names granary writes are read back.
        #expect(ArchiveName(fileName: "20240229T000000.000000Z-delta.vm.tar.zst") != nil)
        let name = Segment.fileName(sequence: 7, first: 1_709_164_800_000_000, last: 1_709_164_800_000_001)
        #expect(Segment.parse(fileName: name)?.last == 1_709_164_800_000_001)
        #expect(ArchiveName.parseMicros("20240229T000000Z") == 1_709_164_800_000_000)
        #expect(ArchiveName.parseMicros("20000229T235959.999999Z") == 951_868_799_999_999)
        #expect(CivilTime.parseRFC3339("2024-02-29T00:00:00+01:00") == 1_709_161_200_000_000)
        // The edges: before 1970, the first and last stamps, a leap day of a century divisible by 400.
        #expect(ArchiveName.stamp(micros: -1, precise: true) == "19691231T235959.999999Z")
        #expect(ArchiveName.parseMicros("19691231T235959.999999Z") == -1)
        #expect(ArchiveName.parseMicros("00000101T000000Z") == -62_167_219_200_000_000)
        #expect(ArchiveName.stamp(micros: -62_167_219_200_000_000, precise: false) == "00000101T000000Z")
        #expect(ArchiveName.parseMicros("99991231T235959.999999Z") == 253_402_300_799_999_999)
        #expect(ArchiveName.stamp(micros: 253_402_300_799_999_999, precise: true) == "99991231T235959.999999Z")
        #expect(ArchiveName.parseMicros("24000229T000000Z") == 13_574_563_200_000_000)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<5_000 {
            let micros = Int64.random(in: 0...4_102_444_799_999_999, using: &generator)
            #expect(ArchiveName.parseMicros(ArchiveName.stamp(micros: micros, precise: true)) == micros)
            #expect(
                ArchiveName.parseMicros(ArchiveName.stamp(micros: micros, precise: false))
                    == micros / 1_000_000 * 1_000_000)
        }
    }
}
