import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The result of the last `granary verify` of an archive, kept beside it as
/// `.<archive name>.verify.json` (mode 0600, written atomically; in a remote repository, a
/// sidecar object of the same name).
///
/// The record holds the archive's name, size and modification stamp (a file's mtime, a remote
/// object's upload time): a record that no longer matches its archive (the file was replaced or
/// touched) is ignored, so `list` and `check` never vouch for bytes that were not the ones verified.
public struct VerificationRecord: Codable, Sendable, Equatable {
    /// What a verification found (on disk: `"ok"` or `"bad"`).
    public enum Outcome: String, Codable, Sendable {
        case ok, bad
    }

    public var result: Outcome
    /// What was wrong, for a bad archive.
    public var reason: String?
    /// When the verification ran.
    public var verified: Date
    /// `full` (integrity_check) or `quick` (quick_check).
    public var check: String
    public var toolVersion: String
    public var archiveSize: Int64
    /// The archive's modification time, in nanoseconds since 1970.
    public var archiveModified: Int64
    /// The archive's file name (records written before it was kept have none).
    public var archive: String?
    /// What a copy of the archive cannot keep (``identity(_:)`` in a local repository; an S3
    /// object's MD5, ``RepositoryObject/identity``): a file put in the archive's place, even with
    /// its size and modification time (`cp -p`, `rsync -a`; on S3 another object of the same size
    /// uploaded in the same second), is another file, and the record no longer applies to it —
    /// neither a bad verdict to a good copy nor a good one to a damaged copy. Records written
    /// before it was kept, and archives on backends that give nothing of the kind, have none
    /// (their size and stamp decide, as before).
    public var archiveIdentity: String?
    /// Who checked: `backup` when the backup that wrote the archive checked each snapshot
    /// (`check = quick` or `full`) before packing it; `nil` for `granary verify`, which reads
    /// the archive back. Counts for `check`'s freshness, not as a verification for `list` or
    /// the archive prune and delete keep.
    public var by: String?
    /// Written by `granary verify` (issue 46): `true` when what it proved is that the archive
    /// restores — a full's members and stores, or a delta rebuilt from its whole chain and
    /// checked. `nil` in records written before: a delta's such record vouches only for the
    /// delta's own members, not for its chain.
    public var restorable: Bool?
    /// For a delta `granary verify` rebuilt: the identity of the chain it was rebuilt from, one
    /// line per link, the delta first and its full last (``ChainLinks/identity``: name, manifest
    /// SHA-256, size, modification stamp). While every link is listed as it was, the next verify
    /// does not read the chain again.
    public var chain: [String]?
    /// The number of stores the verified archive restores (written by verify of a delta).
    public var stores: Int?

    /// What a record says of its archive, in the words `list`, `verify` and `check` share.
    public enum Standing: String, Codable, Sendable {
        /// `granary verify` proved it restores (for a delta: with its whole chain).
        case restorableVerified = "restorable-verified"
        /// Its backup checked every snapshot it packed; `granary verify` has not read it back.
        case checkedByBackup = "checked-by-backup"
        /// Nothing vouches for it (never checked, checked before it changed, or a delta whose
        /// chain verify did not rebuild).
        case unverified
        /// `granary verify` found it bad.
        case bad
    }

    /// Whether the archive passed (a verify, or the backup's own check).
    public var isGood: Bool { result == .ok }
    /// Whether `granary verify` read the archive back and it restores (a delta only with its
    /// whole chain: a record of a delta without ``restorable`` does not count).
    public var isVerified: Bool {
        guard result == .ok && by == nil else { return false }
        if let restorable { return restorable }
        return !(archive.flatMap(ArchiveName.init(fileName:))?.saysDelta ?? false)
    }

    /// The record's word for its archive (``Standing``).
    public var standing: Standing {
        if result == .bad { return .bad }
        if isVerified { return .restorableVerified }
        return by != nil ? .checkedByBackup : .unverified
    }

    /// The record a backup writes for the archive it just published, when it checked every
    /// snapshot with `check` (nil for `.none`: nothing was checked).
    public static func backup(entry: RepositoryEntry, check: CheckMode, at date: Date = Date()) -> VerificationRecord? {
        guard check != .none else { return nil }
        var record = VerificationRecord(entry: entry, good: true, reason: nil, check: check, at: date)
        record.by = "backup"
        return record
    }

    /// The record's path for `archive`.
    public static func path(for archive: String) -> String {
        let folder = PathText.parent(archive)
        return folder + "/." + PathText.lastComponent(archive) + ".verify.json"
    }

    /// A record for `archive` as it is now.
    public init?(archive: String, good: Bool, reason: String?, check: CheckMode, at date: Date = Date()) {
        guard let info = FileSystem.status(archive) else { return nil }
        result = good ? .ok : .bad
        self.reason = reason
        verified = date
        self.check = check.rawValue
        toolVersion = GranaryVersion.current
        archiveSize = Int64(info.st_size)
        archiveModified = Self.modified(info)
        self.archive = PathText.lastComponent(archive)
        archiveIdentity = Self.identity(info)
    }

    /// A record for `entry` as it was listed.
    public init(entry: RepositoryEntry, good: Bool, reason: String?, check: CheckMode, at date: Date = Date()) {
        result = good ? .ok : .bad
        self.reason = reason
        verified = date
        self.check = check.rawValue
        toolVersion = GranaryVersion.current
        archiveSize = entry.size
        archiveModified = entry.modified
        archive = entry.name.fileName
        archiveIdentity = entry.identity
    }

    /// The record in `bytes`, when it belongs to `entry` as listed.
    public static func decode(_ bytes: [UInt8], matching entry: RepositoryEntry) -> VerificationRecord? {
        guard bytes.count < 1 << 16 else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        guard let record = try? decoder.decode(VerificationRecord.self, from: Data(bytes)),
            record.archiveSize == entry.size, record.archiveModified == entry.modified,
            record.archive.map(entry.name.isNamed) ?? true,
            record.archiveIdentity == nil || entry.identity == nil || record.archiveIdentity == entry.identity
        else { return nil }
        return record
    }

    /// The record in `bytes`, whichever archive it was written for (to tell that an archive
    /// changed since its record was written: ``ChainLinks``).
    static func decodeAny(_ bytes: [UInt8]) -> VerificationRecord? {
        guard bytes.count < 1 << 16 else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try? decoder.decode(VerificationRecord.self, from: Data(bytes))
    }

    /// The record as it is stored.
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        encoder.dateEncodingStrategy = .iso8601
        return Array((try? encoder.encode(self)) ?? Data()) + [0x0A]
    }

    /// The record of `archive`, when there is one and it still matches the archive.
    public static func read(for archive: String) -> VerificationRecord? {
        let path = path(for: archive)
        guard let info = FileSystem.status(archive), FileSystem.isRegularFile(path),
            let data = FileManager.default.contents(atPath: path), data.count < 1 << 16
        else { return nil }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        guard let record = try? decoder.decode(VerificationRecord.self, from: data),
            record.archiveSize == Int64(info.st_size), record.archiveModified == modified(info)
        else { return nil }
        return record
    }

    /// Writes the record beside `archive`.
    public func write(for archive: String) throws(FileSystemError) {
        try FileSystem.writeAtomically(encoded(), to: Self.path(for: archive))
    }

    /// Removes the record of `archive`, if any.
    public static func remove(for archive: String) {
        unlink(path(for: archive))
    }

    static func modified(_ info: stat) -> Int64 {
        Int64(info.st_mtim.tv_sec) * 1_000_000_000 + Int64(info.st_mtim.tv_nsec)
    }

    /// A local file's identity as no copy keeps it: its device, its inode and its change time
    /// (which only the kernel sets: a copy that keeps the modification time, or a file rewritten
    /// in place, gets a new one).
    static func identity(_ info: stat) -> String {
        "\(info.st_dev):\(info.st_ino):\(Int64(info.st_ctim.tv_sec) * 1_000_000_000 + Int64(info.st_ctim.tv_nsec))"
    }
}
