/// Which archives `prune` keeps: restic's `forget` rules (see Pruning.swift for the algorithm).
/// A zero or `nil` rule does not keep anything by itself; the rules are OR'd.
public struct RetentionPolicy: Sendable, Equatable, Codable {
    public var keepLast: Int = 0
    public var keepHourly: Int = 0
    public var keepDaily: Int = 0
    public var keepWeekly: Int = 0
    public var keepMonthly: Int = 0
    public var keepYearly: Int = 0
    /// Keep every archive taken within this many seconds of the user's newest archive (not of
    /// now: a backup job that stopped never lets the rule empty a user).
    public var keepWithin: Int64 = 0
    /// Safety archives (what a restore or reset replaced) follow this rule alone: each is kept
    /// while younger than this many seconds (measured from now); 7 days by default.
    public var safetyKeepWithin: Int64 = RetentionPolicy.defaultSafetyKeepWithin
    /// Final archives (what a retired user left) follow this rule alone: each is kept while
    /// younger than this many seconds; nil keeps them for ever (the default).
    public var finalKeepWithin: Int64?

    /// Seven days.
    public static let defaultSafetyKeepWithin: Int64 = 7 * 86_400

    public init(
        keepLast: Int = 0, keepHourly: Int = 0, keepDaily: Int = 0, keepWeekly: Int = 0, keepMonthly: Int = 0,
        keepYearly: Int = 0, keepWithin: Int64 = 0, safetyKeepWithin: Int64 = RetentionPolicy.defaultSafetyKeepWithin,
        finalKeepWithin: Int64? = nil
    ) {
        self.safetyKeepWithin = safetyKeepWithin
        self.finalKeepWithin = finalKeepWithin
        self.keepLast = keepLast
        self.keepHourly = keepHourly
        self.keepDaily = keepDaily
        self.keepWeekly = keepWeekly
        self.keepMonthly = keepMonthly
        self.keepYearly = keepYearly
        self.keepWithin = keepWithin
    }

    /// True when no rule keeps any regular backup: prune refuses such a policy.
    public var isEmpty: Bool {
        keepLast == 0 && keepHourly == 0 && keepDaily == 0 && keepWeekly == 0 && keepMonthly == 0 && keepYearly == 0
            && keepWithin == 0
    }
}
