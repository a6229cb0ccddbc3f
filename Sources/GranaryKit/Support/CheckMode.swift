/// Which SQLite check runs on a snapshot or an extracted store.
public enum CheckMode: String, Sendable, CaseIterable, Codable {
    /// `PRAGMA quick_check`: cheap enough for hourly cron.
    case quick
    /// `PRAGMA integrity_check`: what `verify` runs.
    case full
    /// No check.
    case none

    /// The manifest's `check` of a store a phase-2 delta checked by the pages it read alone, each
    /// parsed as what it is (issue 51; docs/follow.md): less than `quick`, and not a mode one sets.
    public static let pagesCheck = "pages"
}
