/// Progress of a backup, as values: the core never prints, the CLI renders.
public protocol BackupProgress: Sendable {
    /// `phase` (`snapshot`, `check`, `pack`) of `user` has done `done` of `total` bytes.
    func update(user: String, phase: String, done: Int64, total: Int64)
}
