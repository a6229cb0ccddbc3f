import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The journal of one swap: `<root>/.granary/restore/<user>/journal`, JSON lines.
///
/// The first line is the plan (`SwapJournal.Plan`), written and fsynced before any live file
/// is touched; every later line records a step that has been done (see ``record(_:durable:)``). Whether a store was committed is never taken from the journal but from the
/// filesystem: the store's path names the staged file's inode (recorded in the plan) exactly
/// when `rename(staged, live)` happened, so there is no window between the commit and its record.
public final class SwapJournal {
    /// What the swap will do to one store.
    public struct Entry: Codable, Sendable, Equatable {
        /// The store's path relative to the user's folder.
        public var name: String
        /// `swap` (rename under a paused owner or with no one attached) or `online` (backup API).
        public var method: String
        public var live: String
        public var staged: String
        /// Where the replaced database file is kept (a hard link to the old inode for a swap).
        public var aside: String
        public var stagedDevice: UInt64
        public var stagedInode: UInt64
        /// The live external-data folder, when the old or the new store has one.
        public var liveExternal: String?
        public var stagedExternal: String?
        public var asideExternal: String?
        /// External-data files that only the new store has: linked into the live folder before the commit.
        public var externalAdded: [String]
        /// External-data files that only the old store has: moved aside after the commit.
        public var externalRemoved: [String]
    }

    /// The first line.
    public struct Plan: Codable, Sendable {
        public var format = 1
        public var user: String
        /// `restore` or `reset`.
        public var operation: String
        /// The label of the safety archive (`pre-restore`, `pre-reset`).
        public var label: String
        public var archive: String?
        /// Where the safety archive goes; nil with `--no-safety-archive`.
        public var repository: String?
        public var stores: [Entry]
    }

    /// The journal file.
    public let path: String

    public init(path: String) { self.path = path }

    /// Writes the plan as the journal's first line, durably (temporary file, fsync, rename, fsync folder).
    public func begin(_ plan: Plan) throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        let line = Array(try encoder.encode(plan)) + [0x0A]
        try FileSystem.writeAtomically(line, to: path)
    }

    /// Appends one step record; `durable` fsyncs it.
    ///
    /// Recovery decides from the filesystem (the live path's inode), not from step records, so
    /// those are written for people reading the journal and need no fsync inside the owner's pause;
    /// only the records recovery does read (`online-commit`, `safety-archive`) are made durable.
    public func record(_ step: String, durable: Bool = false) throws {
        let fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: path) }
        defer { close(fd) }
        let bytes = Array((step + "\n").utf8)
        let failure: FileSystemError? = bytes.withUnsafeBytes { buffer in
            do throws(FileSystemError) { try FileSystem.writeAll(fd, buffer, path: path) } catch { return error }
            return nil
        }
        if let failure { throw failure }
        if durable && fsync(fd) != 0 { throw FileSystemError("fsync", path: path) }
    }

    /// The plan and the step records, or nil when there is no journal or its plan never became complete
    /// (then nothing live was touched: steps start only after the plan is durable).
    public func read() -> (plan: Plan, steps: [String])? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let lines = data.split(separator: 0x0A, omittingEmptySubsequences: true)
        guard let first = lines.first, let plan = try? JSONDecoder().decode(Plan.self, from: Data(first)) else { return nil }
        return (plan, lines.dropFirst().map { String(decoding: $0, as: UTF8.self) })
    }

    /// Removes the journal durably.
    public func remove() throws {
        try FileSystem.removeFile(path)
        try? FileSystem.syncParent(of: path)
    }
}

/// Test hook: `GRANARY_TEST_CRASH_AT_STEP=N` makes granary kill itself with SIGKILL just
/// before its Nth swap step (counted from 1 across the whole run), to prove that a crash at
/// any step leaves every store fully old or fully new after `granary recover`.
enum CrashPoint {
    nonisolated(unsafe) private static var count = 0
    private static let target: Int? = ProcessInfo.processInfo.environment["GRANARY_TEST_CRASH_AT_STEP"].flatMap(Int.init)

    static func reach() {
        count += 1
        if let target, count == target { kill(getpid(), SIGKILL) }
    }
}
