import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

/// Where archives live: `<repository>/<user id>/<archive name>`, each archive with its
/// verification record beside it as a small sidecar object (`.<archive name>.verify.json`).
///
/// A repository is a location: a local folder (``LocalRepository``), or a remote one reached
/// through rclone (``RcloneRepository``: `s3:BUCKET/PREFIX`, `rclone:REMOTE:PATH`). Every
/// command works through this interface only, so every command works on each:
///
/// - list: the user folders, and the objects of one folder (name, size, modification stamp);
/// - read: an object as a stream, or only its head (a manifest is the first member);
/// - write: an object, atomically and never over an existing one: it is visible under its
///   final name only when complete, on every backend;
/// - delete: an object and its sidecar;
/// - the sidecar: a small object beside an archive (the verification record).
///
/// Names are relative to the repository: `USER` for a folder, `USER/NAME` for an object.
/// ``Repositories/open(_:)`` turns what a person typed into the right implementation.
public protocol Repository: Sendable {
    /// The location as given, to show (it never holds a credential).
    var location: String { get }
    /// The folder, for a local repository; nil for a remote one.
    var localPath: String? { get }
    /// A local folder, granary's own, where backups write their snapshots (and, for a remote
    /// repository, the archive before it is uploaded) and verifications extract.
    var workFolder: String { get }
    /// The run it was opened for: the host its archives are written as and listed for, the
    /// bounds of its remote operations.
    var context: RunContext { get }

    /// Whether the repository exists (has its marker, or archives made by an older granary).
    func exists() throws(RepositoryError) -> Bool
    /// For commands that read: the repository must exist (a typo must not look like an empty
    /// repository), and a local one must be granary's alone.
    func requireExisting() throws(RepositoryError)
    /// For commands that write: the repository must exist already (``initialize()`` made it, or
    /// an older granary's backup did), and is checked; nothing is created, so that an unmounted
    /// disk or a typo never fills the wrong file system.
    func prepare() throws(RepositoryError)
    /// `granary init`: creates the repository and its marker; an existing repository is checked
    /// and left as it is. Returns whether it was created (false: it was one already).
    func initialize() throws(RepositoryError) -> Bool
    /// Refuses a repository that is the root, lies in it or holds it.
    func checkSeparate(from root: Root) throws(RepositoryError)
    /// Creates the work folder (private, granary's) and returns it.
    func prepareWorkFolder() throws(RepositoryError) -> String

    /// The folders at the top of the repository (not hidden ones), sorted.
    func folders() throws(RepositoryError) -> [String]
    /// The objects directly in `folder` (hidden ones included), in no particular order.
    func objects(in folder: String) throws(RepositoryError) -> [RepositoryObject]
    /// Every object beneath `folder` at any depth, each named by its path relative to `folder`
    /// (`HOST/BASE/SEGMENT`), in no particular order: one listing where a remote backend allows
    /// it. `follow`'s segments are found this way (``FollowedGenerations``). Empty when there is
    /// no such folder.
    func objects(under folder: String) throws(RepositoryError) -> [RepositoryObject]
    /// Reads `object` (of `size` bytes, as listed) front to back; only its first `head` bytes
    /// when given.
    func read(_ object: String, size: Int64, head: Int64?) throws(RepositoryError) -> ArchiveSource
    /// Makes `file` (a finished local file) the object `object`, atomically: nothing is visible
    /// under that name until all of it is. Returns false, writing nothing, when the name is taken.
    func write(_ object: String, from file: String) throws(RepositoryError) -> Bool
    /// Deletes `object` and its sidecar; a missing one is not an error.
    func delete(_ object: String) throws(RepositoryError)
    /// Gives `object` the name `target` in the same folder (a legacy archive converted to its
    /// host's name), never over an existing object: false, nothing changed, when `target` is taken.
    func rename(_ object: String, to target: String) throws(RepositoryError) -> Bool
    /// The sidecar of `object`, if there is one.
    func readSidecar(of object: String) -> [UInt8]?
    /// Every sidecar in `folder`, by the name of the object it belongs to. A sidecar is a
    /// verification record: one JSON object whose `archive` names its object (a remote backend
    /// reads every sidecar of a folder in one request and tells them apart by it).
    func readSidecars(in folder: String) -> [String: [UInt8]]
    /// Writes (or replaces) the sidecar of `object`, atomically.
    func writeSidecar(_ bytes: [UInt8], of object: String) throws(RepositoryError)
    /// A small object of granary's own (a host marker, a deletion record); nil when there is none.
    func readSmall(_ object: String) throws(RepositoryError) -> [UInt8]?
    /// Writes (or replaces) a small object of granary's own, atomically.
    func writeSmall(_ bytes: [UInt8], to object: String) throws(RepositoryError)
    /// Deletes a small object of granary's own; a missing one is not an error.
    func deleteSmall(_ object: String) throws(RepositoryError)

    /// The local folder where a new archive of `user` is written before ``write(_:from:)``
    /// publishes it (the user's folder, for a local repository, so that publishing is a rename).
    func stagingFolder(for user: UserID) throws -> String
    /// Whether the repository can take an archive of about `bytes` bytes for `user` now
    /// (writable, and room where that can be known). Nothing is left behind.
    func checkRoom(for user: UserID, bytes: Int64) throws(RepositoryError)
    /// Removes what runs that died left behind (temporary files, partial uploads) in the work
    /// folder and in the folders of `users` (every user when empty); what was removed.
    func removeDeadTemporaries(users: [UserID]) -> [String]
    /// How `object` is shown: a path, or the location followed by the object's name.
    func display(_ object: String) -> String
    /// Asks the backend to drop what interrupted uploads left that no listing shows (an object
    /// store's unfinished multipart uploads older than a day); nothing on backends that leave none.
    func removeUnfinishedUploads()
    /// For a command that runs once and reads the same folders several times (`backup`, `check`,
    /// `prune`, `list`, `verify`, `sync`): a remote repository gives a listing or a folder's
    /// records again for a moment instead of asking again (``ListingMemo``); nothing on a local one,
    /// whose listings cost no process. Not for `follow`, which watches the repository change.
    func rememberListings()
}

/// An object as a listing gives it.
public struct RepositoryObject: Sendable, Equatable {
    /// Its name within its folder.
    public let name: String
    public let size: Int64
    /// Its modification stamp in nanoseconds since 1970 (a local file's mtime, a remote object's
    /// upload time): a verification record holds it and no longer applies when it changes.
    public let modified: Int64
    /// What a copy of the file cannot keep (``VerificationRecord/identity(_:)``: a local file's
    /// device, inode and change time; an S3 object's MD5, `md5:HEX`, from its ETag); nil where the
    /// backend gives nothing of the kind.
    public var identity: String?

    public init(name: String, size: Int64, modified: Int64, identity: String? = nil) {
        self.name = name
        self.size = size
        self.modified = modified
        self.identity = identity
    }
}

/// One archive in a repository.
public struct RepositoryEntry: Sendable, Equatable {
    public let user: UserID
    public let name: ArchiveName
    /// Where it is, to show: a local path, or the remote location followed by `USER/NAME`. Never
    /// opened: read the archive through ``Repository/open(_:head:)``, or ``localFile``.
    public let path: String
    /// The archive's file on this machine, when it has one (a local repository's archive, a file
    /// named by its path); nil for a remote object.
    public var localFile: String?
    public let size: Int64
    /// Its modification stamp as listed (see ``RepositoryObject/modified``).
    public let modified: Int64
    /// Its name in the repository (`USER/NAME`); nil for a local file named by its path,
    /// which is read where it is.
    public let object: String?
    /// The host its marker names (``Hosts``); nil for an archive written before hosts existed
    /// (or a file outside the repository).
    public var host: String?
    /// What a copy cannot keep, as listed (``RepositoryObject/identity``): a verification record
    /// holds it and no longer applies when it changes.
    public var identity: String?

    public init(user: UserID, name: ArchiveName, path: String, size: Int64, modified: Int64 = 0, object: String? = nil)
    {
        self.user = user
        self.name = name
        self.path = path
        self.size = size
        self.modified = modified
        self.object = object
        // A file outside the repository is read where it is.
        if object == nil { localFile = path }
    }

    /// What is shown for it: a local path, or the remote location followed by `USER/NAME`.
    public var display: String { path }
}

extension Array where Element == RepositoryEntry {
    /// The names these archives answer to (``ArchiveName/isNamed(_:)``): each one's name, and a
    /// converted legacy archive's old name too (a delta's base recorded before the conversion).
    public var answeringNames: Set<String> {
        var names: Set<String> = []
        for entry in self {
            names.insert(entry.name.fileName)
            if !entry.name.precise && entry.name.host != nil { names.insert(entry.name.legacyFileName) }
            // A legacy archive its marker gives a host: the name its conversion gives it.
            if entry.name.host == nil, let host = entry.host { names.insert(entry.name.withHost(host).fileName) }
        }
        return names
    }
}

/// Where an archive's bytes come from.
public enum ArchiveSource {
    /// A local file, read in place.
    case file(String)
    /// A download, read front to back.
    case stream(RepositoryStream)

    /// Opens an archive reader on it. `name` names it in messages.
    public func reader(name: String, blockSize: Int = 1 << 20) throws(ArchiveError) -> ArchiveReader {
        switch self {
        case .file(let path): return try ArchiveReader(path: path, blockSize: blockSize)
        case .stream(let stream): return try ArchiveReader(stream: stream, name: name, blockSize: blockSize)
        }
    }

    /// After reading (whatever the outcome): the transfer's own failure, if it failed. A download
    /// cut short must be reported as what it is (74/75), never as a damaged archive.
    public func transferFailure() -> RepositoryError? {
        switch self {
        case .file: return nil
        case .stream(let stream): return stream.finish()
        }
    }
}

extension Repository {
    /// Nothing: most backends leave nothing that a listing does not show.
    public func removeUnfinishedUploads() {}

    /// Nothing: a local listing is a system call.
    public func rememberListings() {}

    /// Whether this is a local folder.
    public var isLocal: Bool { localPath != nil }

    /// The users that have a folder in the repository, sorted.
    public func users() throws(RepositoryError) -> [UserID] {
        try folders().compactMap { try? UserID($0) }
    }

    /// A user's archives of the host ``RunContext/hostScope`` names (every host's when the scope is
    /// nil), oldest first. Temporary files, sidecars and other names are skipped.
    public func archives(of user: UserID) throws(RepositoryError) -> [RepositoryEntry] {
        try archives(of: user, host: context.hostScope)
    }

    /// A user's archives of `host` (every host's for nil), in the order they were taken.
    ///
    /// An archive's host is in its name (``ArchiveName``). A legacy name (written before hosts
    /// were part of names) takes the host its marker `.NAME.host=HOST` names; a legacy archive
    /// with no marker belongs to no host: it is listed only when every host's archives are
    /// (`list --all-hosts`), until `granary adopt` gives it a host. A legacy archive whose
    /// converted name is also there (a conversion stopped half-way) is listed once, by its new name.
    public func archives(of user: UserID, host scope: String?) throws(RepositoryError) -> [RepositoryEntry] {
        let listed = try objects(in: user.rawValue)
        var markers: [String: [String]] = [:]
        var names: Set<String> = []
        for object in listed {
            if object.name.hasPrefix(".") {
                if let (archive, host) = Hosts.parseMarker(object.name) { markers[archive, default: []].append(host) }
            } else {
                names.insert(object.name)
            }
        }
        var entries: [RepositoryEntry] = []
        for object in listed {
            guard !object.name.hasPrefix("."), let parsed = ArchiveName(fileName: object.name) else { continue }
            var host = parsed.host
            if host == nil, let marked = markers[object.name]?.sorted() {
                // A legacy archive, marked: its marker's host (the scope's, when several claim it).
                host = scope.flatMap { marked.contains($0) ? $0 : nil } ?? marked.first
                if let host, names.contains(parsed.withHost(host).fileName) { continue }
            }
            if let scope, host != scope { continue }
            let key = user.rawValue + "/" + object.name
            var entry = RepositoryEntry(
                user: user, name: parsed, path: display(key), size: object.size, modified: object.modified, object: key)
            entry.host = host
            entry.identity = object.identity
            entry.localFile = localPath.map { $0 + "/" + key }
            entries.append(entry)
        }
        return entries.sorted { $0.name < $1.name }
    }

    /// Legacy archives of `user` that belong to no host (no host in the name, no marker): what
    /// `granary adopt` converts.
    public func unownedArchives(of user: UserID) throws(RepositoryError) -> [RepositoryEntry] {
        try archives(of: user, host: nil).filter { $0.host == nil && $0.object != nil }
    }

    /// The stamp for a new archive of `user` by this host taken at `now`: `now` to the
    /// microsecond, or just after the newest archive this host has of the user when the clock
    /// says otherwise (a clock stepped back; two archives in one microsecond). The caller holds
    /// the user's lock, so that the names of one user and host follow the order archives were
    /// taken in.
    public func nextStamp(for user: UserID, at now: Date = TestClock.now()) throws(RepositoryError) -> Date {
        let wanted = ArchiveName.micros(now)
        let newest = (try? archives(of: user, host: context.host).last?.name.micros) ?? nil
        guard let newest, newest >= wanted else { return ArchiveName(micros: wanted, compression: .none).created }
        return Date(timeIntervalSince1970: Double(newest + 1) / 1_000_000)
    }

    /// Opens `entry` for reading (the whole archive, or its first `head` bytes).
    public func open(_ entry: RepositoryEntry, head: Int64? = nil) throws(RepositoryError) -> ArchiveSource {
        guard let object = entry.object else { return .file(entry.localFile ?? entry.path) }
        return try read(object, size: entry.size, head: head)
    }

    /// The verification record of `entry`, when there is one and it still matches the archive.
    /// A file outside the repository has none: granary keeps records only in its own folders.
    public func record(for entry: RepositoryEntry) -> VerificationRecord? {
        guard let object = entry.object else { return nil }
        return readSidecar(of: object).flatMap { VerificationRecord.decode($0, matching: entry) }
    }

    /// The records of `entries` (which are in one folder or several), read with as few requests
    /// as the repository allows.
    public func records(for entries: [RepositoryEntry]) -> [String: VerificationRecord] {
        var result: [String: VerificationRecord] = [:]
        var byFolder: [String: [RepositoryEntry]] = [:]
        for entry in entries where entry.object != nil {
            byFolder[entry.user.rawValue, default: []].append(entry)
        }
        for (folder, entries) in byFolder {
            let sidecars = readSidecars(in: folder)
            for entry in entries {
                if let bytes = sidecars[entry.name.fileName],
                    let record = VerificationRecord.decode(bytes, matching: entry)
                {
                    result[entry.path] = record
                }
            }
        }
        return result
    }

    /// Records the result of a verification of `entry`; nothing for a file outside the
    /// repository (granary writes nothing beside it).
    public func writeRecord(_ record: VerificationRecord, for entry: RepositoryEntry) throws(RepositoryError) {
        guard let object = entry.object else { return }
        // The record is of the file as listed: a copy put in its place later is another file.
        var record = record
        record.archiveIdentity = entry.identity
        try writeSidecar(record.encoded(), of: object)
    }

    /// Removes each archive and its verification record (a file outside the repository, named
    /// by its path: that file alone).
    public func remove(_ entries: [RepositoryEntry]) throws(RepositoryError) {
        for entry in entries {
            guard let object = entry.object else {
                do { try FileSystem.removeFile(entry.localFile ?? entry.path) } catch { throw .local(error) }
                continue
            }
            try delete(object)
            if let host = entry.host { try? deleteSmall(Hosts.marker(of: object, host: host)) }
            removeFollowedGeneration(of: entry)
        }
    }

    /// `follow`'s segments built on `entry` (`USER/follow/HOST/NAME/`, docs/follow.md) go with
    /// their base: a generation never outlives the archive it replays onto. After the archive
    /// itself, so that an interrupted removal leaves segments without a base (which restore
    /// refuses, and the next prune removes) rather than a base without its segments' claim.
    /// A remote repository is asked for them only when a listing of the user's `follow` folder
    /// shows some.
    func removeFollowedGeneration(of entry: RepositoryEntry) {
        guard let host = entry.host else { return }
        if let localPath {
            let folder = localPath + "/" + entry.user.rawValue + "/follow/" + host + "/" + entry.name.fileName
            if FileSystem.isDirectory(folder) { FileSystem.removeTree(folder) }
            return
        }
        guard let generations = try? FollowedGenerations.list(in: self, user: entry.user, host: host) else { return }
        for generation in generations where generation.base == entry.name.fileName {
            try? FollowedGenerations.remove(generation, from: self)
        }
    }

    /// Publishes the finished archive `file` as the archive `name` of `user` (a name this host
    /// alone makes: ``nextStamp(for:at:)`` and the host in it). Every backend does the whole of
    /// it (``write(_:from:)``): the bytes written and synced, the name made atomically and never
    /// over another object, the folder synced; the caller never syncs or renames anything itself.
    /// An outcome left in doubt (an answer lost, a retry that finds the object there) is settled
    /// by comparing what is there with `file` (``settle(_:from:)``), never by taking another name.
    /// `moved` is called when `file` itself became the archive (a local repository renames it);
    /// otherwise (an upload) `file` stays the caller's to remove.
    public func publish(_ file: String, user: UserID, name archive: ArchiveName, moved: () -> Void = {}) throws
        -> RepositoryEntry
    {
        try Interruption.check()
        let key = user.rawValue + "/" + archive.fileName
        try publishObject(key, from: file)
        if let localPath, let info = FileSystem.status(localPath + "/" + key) {
            if PathText.parent(file) == PathText.parent(localPath + "/" + key) { moved() }
            var entry = RepositoryEntry(
                user: user, name: archive, path: display(key), size: Int64(info.st_size),
                modified: VerificationRecord.modified(info), object: key)
            entry.host = archive.host
            entry.identity = VerificationRecord.identity(info)
            entry.localFile = localPath + "/" + key
            return entry
        }
        let listed = try objects(in: user.rawValue).first { $0.name == archive.fileName }
        var entry = RepositoryEntry(
            user: user, name: archive, path: display(key), size: listed?.size ?? FileSystem.size(file),
            modified: listed?.modified ?? 0, object: key)
        entry.host = archive.host
        entry.identity = listed?.identity
        return entry
    }

    /// Makes `file` the object `object`, once: a write that finds the name taken, or whose
    /// outcome is in doubt (a transfer that failed after the server may have stored it), is
    /// settled by comparing the object there with `file` — the same bytes: published;
    /// other bytes: ``RepositoryError/nameTaken(_:)``, nothing overwritten. A temporary failure is
    /// tried again ``publishAttempts`` times in all, then thrown (exit 75).
    public func publishObject(_ object: String, from file: String) throws {
        var attempt = 0
        while true {
            attempt += 1
            try Interruption.check()
            do {
                if try write(object, from: file) { return }
                // Taken: by an earlier attempt of this very publish (whose answer was lost), or by
                // another writer.
                if try settle(object, from: file) { return }
                throw RepositoryError.nameTaken(display(object))
            } catch let error as RepositoryError {
                guard case .transport(_, _, true) = error else { throw error }
                // The failed transfer may have stored the object all the same.
                if (try? settle(object, from: file)) == true { return }
                if attempt >= Self.publishAttempts { throw error }
                usleep(UInt32(min(RemoteLimits.backoff(try: attempt).timeInterval, 10) * 1_000_000))
            }
        }
    }

    /// Attempts of one publish (the first and its retries) before a temporary failure is thrown.
    public static var publishAttempts: Int { 3 }

    /// Whether the objects `object` and `other` hold the same bytes (SHA-256 of both, read through).
    public func settle(_ object: String, sameAs other: String) throws -> Bool {
        try digest(of: object) == digest(of: other)
    }

    /// The SHA-256 of an object, read through (nil when there is no such object).
    func digest(of object: String, size known: Int64? = nil) throws -> String? {
        let (folder, name) = (PathText.parent(object), PathText.lastComponent(object))
        guard let size = try known ?? objects(in: folder).first(where: { $0.name == name })?.size else { return nil }
        switch try read(object, size: size, head: nil) {
        case .file(let path): return try FileDigest.of(path, mapped: false).sha256
        case .stream(let stream):
            var hasher = SHA256()
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 16)
            defer { buffer.deallocate() }
            while true {
                try Interruption.check()
                let n = stream.read(into: buffer)
                if n <= 0 { break }
                hasher.update(bufferPointer: UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            }
            if let failure = stream.finish() { throw failure }
            return hasher.finalize().hex
        }
    }

    /// Whether the object `object` holds exactly the bytes of `file` (size, then SHA-256 of both
    /// read through): how a publish whose outcome is in doubt is settled. False when there is no
    /// such object.
    public func settle(_ object: String, from file: String) throws -> Bool {
        let (folder, name) = (PathText.parent(object), PathText.lastComponent(object))
        guard let listed = try objects(in: folder).first(where: { $0.name == name }),
            listed.size == FileSystem.size(file)
        else { return false }
        return try digest(of: object, size: listed.size) == FileDigest.of(file, mapped: false).sha256
    }
}

/// The kinds of remote repository granary opens, by the scheme a location starts with: the one
/// place a location's scheme decides its backend. A location with none of these schemes is a
/// local folder (``LocalRepository``).
public enum RepositoryBackends {
    /// One remote backend: the scheme its locations start with (`s3:`), and how it opens one.
    public struct Backend: Sendable {
        /// The scheme, colon included, in lower case.
        public let scheme: String
        /// The location's shape, for messages (`s3:BUCKET[/PREFIX]`).
        public let form: String
        /// Opens a location starting with ``scheme``.
        let open:
            @Sendable (_ location: String, _ context: RunContext, _ environment: [String: String])
                throws(RepositoryError) -> any Repository
    }

    /// Every remote backend, by scheme.
    public static let all: [Backend] = [
        Backend(scheme: "s3:", form: "s3:BUCKET[/PREFIX]") { (location, context, environment) throws(RepositoryError) in
            try RcloneRepository(location: location, context: context, environment: environment)
        },
        Backend(scheme: "rclone:", form: "rclone:REMOTE:PATH") {
            (location, context, environment) throws(RepositoryError) in
            try RcloneRepository(location: location, context: context, environment: environment)
        },
    ]

    /// The backend of `location`, nil for a local folder.
    public static func backend(of location: String) -> Backend? {
        all.first { location.hasPrefix($0.scheme) }
    }

    /// The backend whose scheme `location` starts with in another case (`S3:bkt`), a likely typo.
    static func miscased(_ location: String) -> Backend? {
        all.first { location.lowercased().hasPrefix($0.scheme) && !location.hasPrefix($0.scheme) }
    }
}

/// Turns a location as typed (a repository or a mirror, on the command line or in the configuration) into a repository.
public enum Repositories {
    /// A local path, or a location of a remote backend (``RepositoryBackends``: `s3:BUCKET[/PREFIX]`,
    /// `rclone:REMOTE:PATH`). A remote location needs rclone, found when it is first used.
    public static func open(
        _ location: String, context: RunContext = .defaults,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(RepositoryError) -> any Repository {
        // A name with bytes that are not UTF-8 would reach the filesystem (or rclone) as other
        // bytes than typed: refused, never followed to a different place.
        guard FolderName.isUTF8(location) else {
            throw .badLocation(
                location, "it is not UTF-8 text; name the repository by a UTF-8 path (a link with such a name works)")
        }
        if let found = PathText.tildeProblem(location), !isRemote(location) {
            throw .badLocation(location, found.problem + "; " + found.hint)
        }
        if let backend = RepositoryBackends.backend(of: location) {
            return try backend.open(location, context, environment)
        }
        // `S3:bkt` would otherwise be a local folder named `S3:bkt` in the working directory.
        if let backend = RepositoryBackends.miscased(location) {
            let scheme = backend.scheme
            throw .badLocation(
                location,
                "remote schemes are lower-case: did you mean \(scheme + location.dropFirst(scheme.count))? (a local folder with this name: ./\(location))"
            )
        }
        return LocalRepository(path: location, context: context)
    }

    /// Whether `location` names a remote repository.
    public static func isRemote(_ location: String) -> Bool {
        RepositoryBackends.backend(of: location) != nil
    }
}

/// A repository granary cannot use.
public enum RepositoryError: GranaryError, Sendable {
    case notARepository(String)
    case parentMissing(String)
    /// `granary init` of a folder that holds other things: (path, how many entries, the first).
    case notEmpty(String, Int, String)
    case unsafe(String, String)
    /// An entry of the repository that is not granary's alone.
    case planted(String, String)
    case overlapsRoot(String, root: String, String)
    case cannotCreate(String, FileSystemError)
    /// A location that is not one granary understands.
    case badLocation(String, String)
    /// A remote repository, and no rclone on this machine.
    case rcloneMissing
    /// A remote operation failed: `temporary` when retrying later may help (exit 75), else 74.
    case transport(location: String, detail: String, temporary: Bool)
    /// A remote object or folder that is not there.
    case missing(location: String, detail: String)
    /// The remote refused access (credentials, permissions).
    case denied(location: String, detail: String)
    /// A local file operation on the repository's behalf failed.
    case local(FileSystemError)
    /// Not enough free space for what is about to be written.
    case noRoom(String, free: Int64, needed: Int64)
    /// A file root's rclone would read (its configuration, the AWS client's files, the remote
    /// environment file) that root cannot trust: (path, what it is, why).
    case untrustedFile(String, String, String)
    /// A folder granary needs was made first by another user (or is not a folder): (path, what is wrong).
    case squatted(String, String)
    /// An archive's name holds another archive's bytes: another writer published under a name
    /// only this host makes (two machines given one host name).
    case nameTaken(String)
    /// A mirror that is the repository itself, or another mirror, under another spelling:
    /// (the location as given, the one it is).
    case sameLocation(String, String)

    public var description: String {
        switch self {
        case .notARepository(let path):
            return "not a granary repository: \(path) (no .granary-repository there: a typo, or a disk not mounted?)"
        case .notEmpty(let path, let count, let first):
            return
                "refusing to make \(path) a repository: it holds \(first)\(count > 1 ? " and \(count - 1) more" : ""), and it is not a granary repository"
        case .parentMissing(let path): return "cannot create the repository \(path): its parent folder does not exist"
        case .unsafe(let path, let why): return "refusing the repository \(path): it \(why)"
        case .planted(let path, let why):
            return "refusing the repository: \(path) \(why); someone else may have made it"
        case .overlapsRoot(let path, let root, let why): return "the repository \(path) \(why) \(root); keep them apart"
        case .cannotCreate(let path, let error): return "cannot create the repository \(path): \(error.description)"
        case .badLocation(let location, let why): return "cannot use the repository location \(location): \(why)"
        case .rcloneMissing: return "remote repositories need rclone, which is not installed"
        case .transport(let location, let detail, _): return "\(location): \(detail)"
        case .missing(let location, let detail): return "\(location): \(detail)"
        case .denied(let location, let detail): return "\(location): access denied: \(detail)"
        case .local(let error): return error.description
        case .noRoom(_, let free, let needed):
            return
                "it has \(ByteCountText.approximate(free)) free and the archive may need up to \(ByteCountText.approximate(needed))"
        case .untrustedFile(let path, let what, let why): return "refusing \(what) \(path) as root: \(why)"
        case .squatted(let path, let why):
            return "refusing the work folder \(path): it \(why); someone else made it first"
        case .nameTaken(let object):
            return
                "\(object) already exists and holds other bytes than this archive; nothing was overwritten. Another machine writes as this host: give each machine its own host name (--host, host =)"
        case .sameLocation(let location, let other):
            let spelled = other.hasSuffix(" " + location) ? "" : " under another name"
            return "\(location) is \(other)\(spelled): a mirror must be another location"
        }
    }

}
