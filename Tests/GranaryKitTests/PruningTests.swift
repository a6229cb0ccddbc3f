import Foundation
import GranaryKit
import Testing

/// restic's `forget` rules over a generated year of hourly archives (2025-01-01T00:30Z to
/// 2025-12-31T23:30Z, 8,760 archives), each against expectations computed by hand.
@Suite("retention: restic forget semantics")
struct PruningTests {
    static func utc(_ text: String) -> Date { ISO8601DateFormatter().date(from: text)! }

    static let year: [Date] = {
        let start = utc("2025-01-01T00:30:00Z")
        return (0..<8760).map { start.addingTimeInterval(TimeInterval($0) * 3600) }
    }()

    static func kept(_ policy: RetentionPolicy, _ times: [Date] = year) -> [String: [Pruning.Rule]] {
        let formatter = ISO8601DateFormatter()
        var result: [String: [Pruning.Rule]] = [:]
        for decision in Pruning.plan(times, policy: policy) where decision.keep {
            result[formatter.string(from: decision.created)] = decision.keptBy
        }
        return result
    }

    static let cases: [(String, RetentionPolicy, [String])] = [
        (
            "keep-last 5: the five newest", RetentionPolicy(keepLast: 5),
            [
                "2025-12-31T19:30:00Z", "2025-12-31T20:30:00Z", "2025-12-31T21:30:00Z", "2025-12-31T22:30:00Z",
                "2025-12-31T23:30:00Z",
            ]
        ),
        (
            "keep-hourly 3: the newest of each of the last three hours", RetentionPolicy(keepHourly: 3),
            ["2025-12-31T21:30:00Z", "2025-12-31T22:30:00Z", "2025-12-31T23:30:00Z"]
        ),
        (
            "keep-daily 7: the last archive of each of the last seven days", RetentionPolicy(keepDaily: 7),
            (25...31).map { "2025-12-\($0)T23:30:00Z" }
        ),
        // 2025-12-31 is a Wednesday: its ISO week began on Monday 29 December; Sundays end weeks.
        (
            "keep-weekly 4: ISO weeks from Monday; the newest of each", RetentionPolicy(keepWeekly: 4),
            ["2025-12-14T23:30:00Z", "2025-12-21T23:30:00Z", "2025-12-28T23:30:00Z", "2025-12-31T23:30:00Z"]
        ),
        (
            "keep-monthly 3: the last archive of each of the last three months", RetentionPolicy(keepMonthly: 3),
            ["2025-10-31T23:30:00Z", "2025-11-30T23:30:00Z", "2025-12-31T23:30:00Z"]
        ),
        (
            "keep-yearly 2: only years that have archives count, so one is kept", RetentionPolicy(keepYearly: 2),
            ["2025-12-31T23:30:00Z"]
        ),
        (
            "keep-within 1d12h: every archive less than 36 h older than the newest",
            RetentionPolicy(keepWithin: TimeSpan(seconds: 36 * 3600)),
            (12...23).map { "2025-12-30T\($0):30:00Z" } + (0...23).map { String(format: "2025-12-31T%02d:30:00Z", $0) }
        ),
    ]

    @Test("each rule alone keeps exactly what restic keeps", arguments: cases)
    func singleRule(name: String, policy: RetentionPolicy, expected: [String]) {
        #expect(Set(Self.kept(policy).keys) == Set(expected), "\(name)")
    }

    @Test("rules are OR'd and each kept archive names the rules that kept it")
    func combination() {
        let kept = Self.kept(RetentionPolicy(keepLast: 2, keepDaily: 3, keepWeekly: 2, keepMonthly: 2))
        #expect(
            kept == [
                "2025-12-31T23:30:00Z": [.last, .daily, .weekly, .monthly],
                "2025-12-31T22:30:00Z": [.last],
                "2025-12-30T23:30:00Z": [.daily],
                "2025-12-29T23:30:00Z": [.daily],
                "2025-12-28T23:30:00Z": [.weekly],
                "2025-11-30T23:30:00Z": [.monthly],
            ])
    }

    @Test("periods without an archive do not count")
    func gaps() {
        let times = ["2025-01-01T10:00:00Z", "2025-01-05T10:00:00Z", "2025-01-09T10:00:00Z", "2025-01-09T08:00:00Z"]
            .map(Self.utc)
        #expect(
            Set(Self.kept(RetentionPolicy(keepDaily: 2), times).keys) == [
                "2025-01-09T10:00:00Z", "2025-01-05T10:00:00Z",
            ])
    }

    @Test("a week runs Monday to Sunday in UTC")
    func mondayWeeks() {
        // Sunday 9 March 2025 late and Monday 10 March early are two weeks; Monday and Tuesday one.
        let times = ["2025-03-09T23:00:00Z", "2025-03-10T00:30:00Z", "2025-03-11T12:00:00Z"].map(Self.utc)
        #expect(
            Set(Self.kept(RetentionPolicy(keepWeekly: 2), times).keys) == [
                "2025-03-11T12:00:00Z", "2025-03-09T23:00:00Z",
            ])
    }

    @Test("an empty policy keeps nothing and says it is empty; decisions come back in input order")
    func emptyAndOrder() {
        #expect(RetentionPolicy().isEmpty)
        let times = [
            Self.utc("2025-01-01T00:00:00Z"), Self.utc("2025-01-03T00:00:00Z"), Self.utc("2025-01-02T00:00:00Z"),
        ]
        let plan = Pruning.plan(times, policy: RetentionPolicy(keepLast: 1))
        #expect(plan.map(\.keep) == [false, true, false])
        #expect(plan.map(\.index) == [0, 1, 2])
    }
}
