import CSnapshotTee

/// How far a snapshot that SQLite is still writing is final: shared between the `granary-tee`
/// VFS, which publishes it as the backup API writes the copy, and `OverlappedPack`'s follower,
/// which compresses behind it.
///
/// The C struct lives in memory this object owns (allocated once, freed with it), so no pointer
/// to it appears in a signature outside this folder; the VFS gets it through one file control.
final class SnapshotTrack: @unchecked Sendable {
    let raw: UnsafeMutablePointer<granary_tee_track>

    init() {
        raw = .allocate(capacity: 1)
        raw.initialize(to: granary_tee_track(page_size: 0, high: 0, broken: 0, writes: 0, reading: 0, waiting: 0))
    }

    deinit { raw.deallocate() }

    /// The snapshot's page size; set before the copy starts.
    var pageSize: Int64 {
        get { raw.pointee.page_size }
        set { raw.pointee.page_size = newValue }
    }
    /// End of the highest write beyond page 1 that has reached the file.
    var high: Int64 { granary_tee_high(raw) }
    /// Whether the order the follower relies on no longer holds (it must give up).
    var isBroken: Bool { granary_tee_broken(raw) != 0 }
    /// Tells the follower to give up.
    func markBroken() { granary_tee_break(raw) }
    /// Writes the VFS has seen (tests).
    var writes: Int { Int(granary_tee_writes(raw)) }

    /// Runs `body` with the file mapped safely: false (and `body` not run) when the track is
    /// broken; a truncate below `high` waits until `body` has returned.
    func whileMapped(_ body: () throws -> Void) rethrows -> Bool {
        guard granary_tee_enter(raw) != 0 else { return false }
        defer { granary_tee_leave(raw) }
        try body()
        return true
    }
}
