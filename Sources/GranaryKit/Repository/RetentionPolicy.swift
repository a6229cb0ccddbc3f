/// Which archives `prune` keeps: restic's `forget` rules (see Pruning.swift for the algorithm).
/// A zero or `nil` rule does not keep anything by itself; -1 keeps every archive its rule picks
/// (restic's "unlimited": `keepMonthly = -1` keeps the newest of every month); the rules are OR'd.
public struct RetentionPolicy: Sendable, Equatable, Codable {
    public var keepLast: Int = 0
    public var keepHourly: Int = 0
    public var keepDaily: Int = 0
    public var keepWeekly: Int = 0
    public var keepMonthly: Int = 0
    public var keepYearly: Int = 0
    /// Keep every archive taken within this span of the user's newest archive (not of now: a
    /// backup job that stopped never lets the rule empty a user); months as restic counts them.
    public var keepWithin: TimeSpan = 0
    /// Safety archives (what a restore or reset replaced) follow this rule alone: each is kept
    /// while younger than this span (measured from now); 7 days by default.
    public var safetyKeepWithin: TimeSpan = RetentionPolicy.defaultSafetyKeepWithin
    /// Final archives (what a retired user left) follow this rule alone: each is kept while
    /// younger than this span; nil keeps them for ever (the default).
    public var finalKeepWithin: TimeSpan?
    /// `follow`'s windows (docs/follow.md): each generation whose window ended within this span
    /// of now keeps its segments and its base archive (with the base's chain); an older one's
    /// segments are removed. Nil (the default): segments live exactly as long as their base, and
    /// keep no archive.
    public var followedKeepWithin: TimeSpan?

    /// Seven days.
    public static let defaultSafetyKeepWithin = TimeSpan(seconds: 7 * 86_400)

    public init(
        keepLast: Int = 0, keepHourly: Int = 0, keepDaily: Int = 0, keepWeekly: Int = 0, keepMonthly: Int = 0,
        keepYearly: Int = 0, keepWithin: TimeSpan = 0,
        safetyKeepWithin: TimeSpan = RetentionPolicy.defaultSafetyKeepWithin,
        finalKeepWithin: TimeSpan? = nil
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
            && keepWithin.isZero
    }
}
