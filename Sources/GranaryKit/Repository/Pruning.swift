import Foundation

/// Which archives a retention policy keeps: restic's `forget` algorithm.
///
/// Archives are taken newest first. Each `keep-*` rule has a counter and a bucket function
/// (`last`: every archive its own bucket; `hourly`: the UTC hour; `daily`: the UTC day;
/// `weekly`: the ISO 8601 week, Monday to Sunday; `monthly`; `yearly`). An archive is kept by a
/// rule when its bucket differs from the bucket of the last archive that rule kept and the
/// rule's counter is not used up; keeping it uses one count. So each rule keeps the newest
/// archive of each of its N most recent periods *that have an archive*; empty periods do not
/// count. `keep-within D` keeps every archive taken within D of the newest archive (not of
/// now, so a backup job that stopped does not let prune delete everything). Rules are OR'd:
/// an archive is kept when any rule keeps it, and the plan says which rules did.
public enum Pruning {
    /// A rule that can keep an archive.
    public enum Rule: String, Sendable, CaseIterable, Codable {
        case last, hourly, daily, weekly, monthly, yearly, within
    }

    /// One archive's fate.
    public struct Decision: Sendable, Equatable {
        public let created: Date
        public let index: Int
        /// The rules that keep it; empty means it is removed.
        public var keptBy: [Rule]
        public var keep: Bool { !keptBy.isEmpty }
    }

    /// Decides for archives taken at `times` (any order). Returns one decision per input, in
    /// input order.
    public static func plan(_ times: [Date], policy: RetentionPolicy) -> [Decision] {
        let order = times.indices.sorted { times[$0] > times[$1] || (times[$0] == times[$1] && $0 > $1) }
        var decisions = times.enumerated().map { Decision(created: $0.element, index: $0.offset, keptBy: []) }
        guard let newest = order.first.map({ times[$0] }) else { return decisions }
        var calendar = Calendar(identifier: .iso8601)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        let rules: [(Rule, Int)] = [
            (.last, policy.keepLast), (.hourly, policy.keepHourly), (.daily, policy.keepDaily),
            (.weekly, policy.keepWeekly), (.monthly, policy.keepMonthly), (.yearly, policy.keepYearly),
        ]
        var remaining = rules.map(\.1)
        var lastBucket: [String?] = Array(repeating: nil, count: rules.count)
        let withinStart = policy.keepWithin.start(before: newest)
        for (position, index) in order.enumerated() {
            let time = times[index]
            if !policy.keepWithin.isZero, time > withinStart {
                decisions[index].keptBy.append(.within)
            }
            // A negative count keeps every archive its rule picks (restic's -1, "unlimited").
            for (ruleIndex, (rule, _)) in rules.enumerated() where remaining[ruleIndex] != 0 {
                let bucket = self.bucket(rule, time, position: position, calendar: calendar)
                if bucket != lastBucket[ruleIndex] {
                    decisions[index].keptBy.append(rule)
                    lastBucket[ruleIndex] = bucket
                    if remaining[ruleIndex] > 0 { remaining[ruleIndex] -= 1 }
                }
            }
        }
        return decisions
    }

    static func bucket(_ rule: Rule, _ time: Date, position: Int, calendar: Calendar) -> String {
        let c = calendar.dateComponents([.year, .month, .day, .hour, .yearForWeekOfYear, .weekOfYear], from: time)
        switch rule {
        case .last, .within: return "\(position)"
        case .hourly: return "\(c.year!)-\(c.month!)-\(c.day!)T\(c.hour!)"
        case .daily: return "\(c.year!)-\(c.month!)-\(c.day!)"
        case .weekly: return "\(c.yearForWeekOfYear!)-W\(c.weekOfYear!)"
        case .monthly: return "\(c.year!)-\(c.month!)"
        case .yearly: return "\(c.year!)"
        }
    }
}
