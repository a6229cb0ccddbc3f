import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The journal of one restore or reset: `<root>/.granary/restore/<user>/journal`, JSON lines.
///
/// The first line is the plan (``Plan``), written and fsynced before any live file is touched.
/// Every later line is a ``Step`` that has been done. One of them is the commit point of the whole
/// user: ``Step/commit``, written durably after every store has been prepared and before the
/// first live file is replaced. Recovery reads it, and only it, to choose a direction: without it
/// every store is rolled back (nothing live was replaced yet), with it every store is rolled
/// forward. So a user's stores end all old or all new, whatever instant a crash hits.
///
/// Every name in the journal is relative (to the user's folder, or to the work folder): the
/// journal never holds a path that recovery would follow into a user's folder.
public final class SwapJournal {
    /// How one store's new content goes in.
    public enum Method: String, Codable, Sendable {
        /// Renamed into place while its owner is paused (or nobody has it open).
        case swap
        /// Not live before: renamed into place.
        case new
        /// Copied into the live database through the SQLite backup API (the owner does not speak
        /// the reopen protocol).
        case online
    }

    /// What the restore does to one store.
    public struct Entry: Codable, Sendable, Equatable {
        /// The store's path relative to the user's folder (and to `stores/` in the work folders).
        public var name: String
        public var method: Method
        /// The staged file's identity: the live name holds it exactly when the store was switched.
        public var stagedDevice: UInt64
        public var stagedInode: UInt64
        /// External-data files (names in the store's `_EXTERNAL_DATA`) only the new store has,
        /// linked in before the commit (unreferenced by the old store, so harmless to it).
        public var externalAdded: [String]
        /// External-data files only the old store has: kept aside before the commit (linked),
        /// removed from the live folder after it.
        public var externalRemoved: [String]
        /// External-data files both have (the same bytes): kept aside too, so that the safety
        /// archive holds the old store's attachments complete.
        public var externalKept: [String]
        /// The modes of folders the restore may make for this store, by path relative to the
        /// user's folder (as the archive recorded them); others get the user folder's mode.
        public var folderModes: [String: UInt32]?

        /// The mode for a folder at `path` (relative to the user's folder) that the restore makes.
        func mode(forFolder path: String, default fallback: mode_t) -> mode_t {
            folderModes?[path].map { mode_t($0 & 0o7777) } ?? fallback
        }
    }

    /// The first line.
    public struct Plan: Codable, Sendable {
        public var format = 2
        public var user: String
        /// `restore` or `reset`.
        public var operation: String
        /// The label of the safety archive (`pre-restore`, `pre-reset`).
        public var label: String
        /// The archive restored (nil for a reset).
        public var archive: String?
        /// Where the safety archive goes; nil when the request asked for none. (Journals written
        /// before held the location as typed, a string: read as that location.)
        public var repository: RepositoryLocation?
        public var stores: [Entry]
        /// The check run on each replaced store as the safety archive is written (the configured
        /// `check`); nil in journals written before: `quick`.
        public var check: CheckMode?
    }

    /// A step that has been done.
    public enum Step: Equatable, Sendable {
        /// A store's old content is kept aside and its new content is in place beside it.
        case prepared(String)
        /// The commit point of the whole user (durable).
        case commit
        /// A store's new content is live (renamed, or copied online).
        case switched(String)
        /// The old external-data files of a store are gone from the live folder.
        case cleaned(String)
        /// The owners were told to resume.
        case resumed
        /// The safety archive was written (durable).
        case safetyArchive(String)
        /// The commit was taken back before anything live changed (an online copy, the first
        /// change of a restore with no store to rename, could not take its lock): recovery rolls
        /// back as if there were no commit (durable).
        case withdrawn
        /// A step recovery could not finish yet (the safety archive, say), with why.
        case pending(String)

        var line: String {
            switch self {
            case .prepared(let name): return "prepared " + name
            case .commit: return "commit"
            case .switched(let name): return "switched " + name
            case .cleaned(let name): return "cleaned " + name
            case .resumed: return "resumed"
            case .safetyArchive(let path): return "safety-archive " + path
            case .pending(let why): return "pending " + why
            case .withdrawn: return "withdrawn"
            }
        }

        init?(line: String) {
            let (word, rest) =
                line.firstIndex(of: " ").map { (String(line[..<$0]), String(line[line.index(after: $0)...])) } ?? (
                    line, ""
                )
            switch word {
            case "prepared": self = .prepared(rest)
            case "commit": self = .commit
            case "switched": self = .switched(rest)
            case "cleaned": self = .cleaned(rest)
            case "resumed": self = .resumed
            case "safety-archive": self = .safetyArchive(rest)
            case "pending": self = .pending(rest)
            case "withdrawn": self = .withdrawn
            default: return nil
            }
        }
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

    /// Appends one step; `durable` fsyncs it (the commit point and the safety archive's record,
    /// which recovery acts on; the others are also re-derived from the filesystem).
    public func record(_ step: Step, durable: Bool = false) throws {
        let fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 { throw FileSystemError("open", path: path) }
        let file = Descriptor(fd, display: path)
        let bytes = Array((step.line + "\n").utf8)
        let failure: FileSystemError? = bytes.withUnsafeBytes { buffer in
            do throws(FileSystemError) { try file.write(buffer) } catch { return error }
            return nil
        }
        if let failure { throw failure }
        if durable { try file.sync() }
    }

    /// The plan and the steps, or nil when there is no journal or its plan never became complete
    /// (then nothing live was touched: steps start only after the plan is durable).
    public func read() -> (plan: Plan, steps: [Step])? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        let lines = data.split(separator: 0x0A, omittingEmptySubsequences: true)
        guard let first = lines.first, let plan = try? JSONDecoder().decode(Plan.self, from: Data(first)),
            plan.format == 2
        else {
            return nil
        }
        return (plan, lines.dropFirst().compactMap { Step(line: String(decoding: $0, as: UTF8.self)) })
    }

    /// Removes the journal durably.
    public func remove() throws {
        try FileSystem.removeFile(path)
        try? FileSystem.syncParent(of: path)
    }
}
