/// Which SQLite check runs on a snapshot or an extracted store.
public enum CheckMode: String, Sendable, CaseIterable, Codable {
    /// `PRAGMA quick_check`: cheap enough for hourly cron.
    case quick
    /// `PRAGMA integrity_check`: what `verify` runs.
    case full
    /// No check.
    case none
}
