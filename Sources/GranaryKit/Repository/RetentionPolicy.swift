/// Which archives `prune` keeps: restic's `forget` rules (see Pruning.swift for the algorithm).
/// A zero or `nil` rule does not keep anything by itself; the rules are OR'd.
public struct RetentionPolicy: Sendable, Equatable, Codable {
    public var keepLast: Int = 0
    public var keepHourly: Int = 0
    public var keepDaily: Int = 0
    public var keepWeekly: Int = 0
    public var keepMonthly: Int = 0
    public var keepYearly: Int = 0
    /// Keep every archive younger than this many seconds.
    public var keepWithin: Int64 = 0

    public init(
        keepLast: Int = 0, keepHourly: Int = 0, keepDaily: Int = 0, keepWeekly: Int = 0, keepMonthly: Int = 0,
        keepYearly: Int = 0, keepWithin: Int64 = 0
    ) {
        self.keepLast = keepLast
        self.keepHourly = keepHourly
        self.keepDaily = keepDaily
        self.keepWeekly = keepWeekly
        self.keepMonthly = keepMonthly
        self.keepYearly = keepYearly
        self.keepWithin = keepWithin
    }

    /// True when no rule keeps anything: prune refuses such a policy.
    public var isEmpty: Bool {
        keepLast == 0 && keepHourly == 0 && keepDaily == 0 && keepWeekly == 0 && keepMonthly == 0 && keepYearly == 0
            && keepWithin == 0
    }
}
