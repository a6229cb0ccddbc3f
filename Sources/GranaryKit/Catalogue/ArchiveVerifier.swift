import CLinux
import Foundation
import GranaryDigest

#if canImport(Glibc)
    import Glibc
#endif

/// What is wrong with an archive, naming the member and what was expected and found.
public struct VerificationFailure: GranaryError, Sendable, Equatable {
    /// The archive's path.
    public let archive: String
    /// The member at fault, when there is one.
    public let member: String?
    /// What is wrong, in a phrase (“has SHA-256 ab…, the manifest says cd…”).
    public let reason: String
    /// The limit a store's check ran into, when that is what failed (the archive may be sound).
    public let limit: ContentLimit?
    /// The manifest's format, when it is one this granary cannot read (the archive may be sound).
    public var unreadableFormat: Int?

    public init(archive: String, member: String? = nil, reason: String, limit: ContentLimit? = nil) {
        self.archive = archive
        self.member = member
        self.reason = reason
        self.limit = limit
    }

    public var description: String { "\(archive): \(member.map { $0 + " " } ?? "")\(reason)" }
}

/// Takes a member's bytes as they are read, in place of a file in the extraction folder (issue 35:
/// a delta's changed pages written into the staged store as they stream, a chain's full's page
/// hashes that a restore has no use for). The member is checked as any other: listed in the
/// manifest, its size and SHA-256 those listed.
public protocol MemberSink: AnyObject {
    /// The member's next bytes. What this throws is reported once the member has been read (a
    /// member that does not match its manifest entry is reported as such first); no more bytes
    /// come after it.
    func consume(_ bytes: UnsafeRawBufferPointer) throws
    /// The member ended and matched its manifest entry.
    func finish() throws
    /// Whether the sink proves the member's bytes itself, by a check as strong as its SHA-256 (a
    /// full's store hashed page by page into its state digest): the verifier then checks its size
    /// only and does not hash it a second time. `finish()` must throw when the bytes are not
    /// those recorded.
    var provesContent: Bool { get }
}

extension MemberSink {
    public var provesContent: Bool { false }
}

/// Reads an archive once, from start to end, and proves it: the manifest comes first; every
/// member is a regular file under `stores/` listed in the manifest with the size and SHA-256 it
/// has, or a folder the manifest implies (`stores/`, one holding a listed file, an external-data
/// folder); nothing listed is missing and nothing is there twice; every store passes SQLite's
/// `integrity_check` (or `quick_check`). Anything else is refused before it is made.
///
/// Members are written only inside the folder given, and only after their header has been
/// judged safe: absolute names, `..`, symlinks, hard links, devices and FIFOs are refused
/// before a byte is written, and a member is cut off one byte past the size the manifest
/// gives it, so a decompression bomb costs at most the manifest's sizes in disk space.
public enum ArchiveVerifier {
    /// The result of a verification that passed.
    public struct Outcome: Sendable {
        public var manifest: Manifest
        /// The bytes of member data read and hashed.
        public var bytes: Int64
        /// Each store's check result (`ok`).
        public var checks: [String: String]
    }

    /// What an archive's files take once extracted, as its manifest declares them.
    public struct Needs: Sendable, Equatable {
        /// The sum of the files' lengths.
        public var bytes: Int64
        /// Files and the folders they need.
        public var files: Int

        public init(bytes: Int64, files: Int) {
            self.bytes = bytes
            self.files = files
        }
    }

    /// Extracts `archive` into `folder` (existing, empty, private) and verifies it.
    ///
    /// `check` picks the SQLite check run on each extracted store (`.none` skips it: restore
    /// and verify never pass it). `expectedUser`, when given, must match the manifest's user.
    /// `durable` files are written back as they grow and fsynced, with their folders, once all are
    /// written (restore's staging, which is swapped in); otherwise the copy is scratch that is
    /// checked and removed (verify, inspect).
    ///
    /// With `allFiles`, the manifest returned lists every file of a format-2 archive, those of
    /// `MANIFEST.files` too, as format 1 does (restore needs their modes); otherwise only what
    /// `MANIFEST.json` lists, and memory stays flat.
    ///
    /// `room`, when given, is called once the manifest (and `MANIFEST.files`) has been read and
    /// before any member is written, with what the files will take; what it throws ends the
    /// extraction.
    public static func extract(
        archive: String, into folder: String, check: CheckMode = .full, expectedUser: String? = nil,
        durable: Bool = true,
        allFiles: Bool = false, limits: ContentLimits = .defaults, room: ((Needs) throws -> Void)? = nil
    ) throws -> Outcome {
        try extract(
            source: .file(archive), name: archive, into: folder, check: check, expectedUser: expectedUser,
            durable: durable,
            allFiles: allFiles, limits: limits, room: room)
    }

    /// Extracts the archive `source` gives (a local file, or a download read front to back)
    /// into `folder` and verifies it, as ``extract(archive:into:check:expectedUser:durable:allFiles:limits:room:)``.
    /// `limits`: the time budget and memory ceiling of each store's check (the run's, ``RunContext/limits``).
    /// A download that fails (a cut connection, a server error) is reported as the transfer's
    /// failure, never as a fault of the archive. `name` names the archive in messages.
    /// `sink`, when given, is asked for each regular member listed in `MANIFEST.json` (with the
    /// manifest and the member's name) whether a ``MemberSink`` takes its bytes instead of a file;
    /// `DeltaCheck` leaves a member so taken to its sink.
    public static func extract(
        source: ArchiveSource, name: String, into folder: String, check: CheckMode = .full, expectedUser: String? = nil,
        durable: Bool = true, allFiles: Bool = false, limits: ContentLimits = .defaults,
        room: ((Needs) throws -> Void)? = nil, sink: ((Manifest, String) throws -> (any MemberSink)?)? = nil
    ) throws -> Outcome {
        let outcome: Outcome
        do {
            outcome = try extractVerified(
                Extraction(
                    source: source, archive: name, folder: folder, check: check, expectedUser: expectedUser,
                    durable: durable, allFiles: allFiles, limits: limits, room: room, sink: sink))
        } catch {
            if let failure = source.transferFailure() { throw failure }
            throw error
        }
        if let failure = source.transferFailure() { throw failure }
        return outcome
    }

    /// Why `member` is in `archive` twice: when two of its stores share the name (``MemberNames``:
    /// an archive made before granary refused such stores), which they are and how to get each back.
    static func twice(_ member: String, in manifest: Manifest, archive: String) -> String {
        guard let clash = MemberNames.explain(member, in: manifest) else { return "is in the archive twice" }
        let first = Manifest.storesFolder + clash.first
        let second = Manifest.storesFolder + clash.second
        return
            "is in the archive twice: \(clash) (an archive granary no longer writes), so it cannot be restored whole; to restore the stores one by one, extract each with tar (tar -xf \(ShellQuoting.word(archive)) --occurrence=1 \(ShellQuoting.word(first)), then \(ShellQuoting.word(second))) and put it in place with its app closed, or restore from an archive made before the second store appeared"
    }

    /// One extraction's parameters (those of
    /// ``extract(source:name:into:check:expectedUser:durable:allFiles:limits:room:sink:)``), kept
    /// together for its steps.
    private struct Extraction {
        let source: ArchiveSource
        /// The archive's name in messages.
        let archive: String
        let folder: String
        let check: CheckMode
        let expectedUser: String?
        let durable: Bool
        let allFiles: Bool
        let limits: ContentLimits
        let room: ((Needs) throws -> Void)?
        let sink: ((Manifest, String) throws -> (any MemberSink)?)?

        func fail(_ member: String?, _ reason: String) -> VerificationFailure {
            VerificationFailure(archive: archive, member: member, reason: reason)
        }

        /// The one check of what a member holds against what the manifest says of it: its size,
        /// then its SHA-256 (`sha256` nil: its sink proved the bytes itself). For stores and
        /// external-data files written out, members taken by a sink, and `MANIFEST.files`.
        func checkContent(_ member: String, size: Int64, sha256: String?, expected: (size: Int64, sha256: String))
            throws
        {
            guard size == expected.size else {
                throw fail(member, "has \(size) bytes, the manifest says \(expected.size)")
            }
            if let sha256, sha256 != expected.sha256 {
                throw fail(member, "has SHA-256 \(sha256), the manifest says \(expected.sha256)")
            }
        }

        /// A member's header may not declare more bytes than the manifest gives it.
        func checkDeclared(_ member: String, _ declared: Int64, expected: Int64) throws {
            guard declared <= expected else {
                throw fail(member, "declares \(declared) bytes, the manifest says \(expected)")
            }
        }
    }

    /// What the members read so far came to.
    private struct Members {
        /// The regular members the manifest lists that were found.
        var seen: Set<String> = []
        /// Those of them a sink took.
        var streamed: Set<String> = []
        var directories: Set<String> = []
        /// Members found in `MANIFEST.files`, and (with `allFiles`) their entries.
        var listed = 0
        var listedFiles: [Manifest.File] = []
        /// The member data read.
        var bytes: Int64 = 0
        /// The folder the last file went into (made already).
        var lastFolder = ""
    }

    private static func extractVerified(_ run: Extraction) throws -> Outcome {
        ReadTrace.note("read", run.archive)
        let reader: ArchiveReader
        do { reader = try run.source.reader(name: run.archive) } catch {
            if error.isDataError { throw run.fail(nil, "is not a readable archive: \(error.message)") }
            throw error
        }
        var manifest = try readManifest(reader, run)
        let expected = try expectedFiles(of: manifest, run)
        // The only folders an archive may hold as members: those the manifest implies. Anything
        // else is refused before it is made (an archive of 200,000 folder members must not make
        // them, nor one of folders nested past what the filesystem takes).
        let folders = try impliedFolders(of: manifest, under: run.folder, fail: run.fail)
        let listPath = run.folder + "/" + Manifest.fileListName
        let list = try extractFileList(reader, of: manifest, to: listPath, run)
        defer { if list != nil { try? FileSystem.removeFile(listPath) } }
        if let room = run.room {
            try room(try needs(of: manifest, folders: folders, list: list == nil ? nil : listPath))
        }
        var members = Members()
        do {
            while let entry = try reader.next() {
                try Interruption.check()
                try extractMember(
                    entry, reader, manifest: manifest, expected: expected, folders: folders, list: list,
                    into: &members, run)
            }
        } catch let error as ArchiveError {
            switch error {
            case .tooLarge(_, let member, let limit):
                throw run.fail(member, "is larger than the \(limit) bytes the manifest says")
            default:
                throw run.fail(nil, "is damaged or truncated: \(error.message)")
            }
        }
        try checkNothingMissing(manifest, members, list: list, run)
        // Issue 35: page hashes and changed pages checked (DeltaCheck); a delta's stores are not
        // in it (a restore rebuilds them from its chain, DeltaRestore).
        if manifest.delta != nil {
            try DeltaCheck.check(manifest, in: run.folder, archive: run.archive, streamed: members.streamed)
        }
        let checks = try checkStores(of: manifest, seen: members.seen, run)
        if run.durable { try syncTree(run.folder) }
        manifest.files += members.listedFiles
        return Outcome(manifest: manifest, bytes: members.bytes, checks: checks)
    }

    /// The first member, `MANIFEST.json`: the user's (when one is expected), and the archive its
    /// name says.
    private static func readManifest(_ reader: ArchiveReader, _ run: Extraction) throws -> Manifest {
        let manifest: Manifest
        do {
            guard let first = try reader.next() else { throw run.fail(nil, "is empty") }
            guard first.name == Manifest.memberName, first.kind == .regular else {
                throw run.fail(first.name, "comes first, where \(Manifest.memberName) must be")
            }
            manifest = try Manifest.decode(try reader.readAll(limit: Manifest.sizeLimit), source: run.archive)
        } catch let error as VerificationFailure {
            throw error
        } catch let error as ManifestError {
            var failure = run.fail(Manifest.memberName, error.reason)
            if case .unsupportedFormat(_, let format) = error { failure.unreadableFormat = format }
            throw failure
        } catch let error as ArchiveError {
            throw run.fail(Manifest.memberName, "cannot be read: \(error.message)")
        }
        if let expectedUser = run.expectedUser, manifest.user != expectedUser {
            throw run.fail(
                Manifest.memberName,
                "belongs to user \(manifest.user.debugDescription), not \(expectedUser.debugDescription)")
        }
        // An archive named as ours must be what its name says (ArchiveName.disagreement).
        if let named = ArchiveName(fileName: PathText.lastComponent(run.archive)),
            let problem = named.disagreement(with: manifest)
        {
            throw run.fail(Manifest.memberName, DeltaRestore.impostor(problem))
        }
        return manifest
    }

    /// The files `MANIFEST.json` lists, by path, each with a name that stays inside the folder.
    private static func expectedFiles(of manifest: Manifest, _ run: Extraction) throws -> [String: Manifest.File] {
        var expected: [String: Manifest.File] = [:]
        for file in manifest.files {
            guard isSafe(file.path) else { throw run.fail(file.path, "is listed in the manifest with an unsafe name") }
            if let problem = lengthProblem(file.path, under: run.folder) {
                throw run.fail(file.path, "is listed in the manifest with \(problem)")
            }
            expected[file.path] = file
        }
        return expected
    }

    /// Format 2: the external-data files are listed in the second member, in archive order. It is
    /// extracted beside the stores (outside stores/), checked against the manifest, and then read
    /// one line per member, so that memory stays flat whatever the number of files. Nil for an
    /// archive without it.
    private static func extractFileList(
        _ reader: ArchiveReader, of manifest: Manifest, to listPath: String, _ run: Extraction
    ) throws -> FileListCursor? {
        guard let fileList = manifest.fileList else { return nil }
        do {
            guard let entry = try reader.next(), entry.name == Manifest.fileListName, entry.kind == .regular else {
                throw run.fail(Manifest.fileListName, "is not the second member, where the manifest says it is")
            }
            try run.checkDeclared(Manifest.fileListName, entry.size, expected: fileList.size)
            let (size, digest) = try write(reader, to: listPath, limit: fileList.size, durable: false)
            let list = try FileListCursor(path: listPath)
            do {
                try run.checkContent(
                    Manifest.fileListName, size: size, sha256: digest, expected: (fileList.size, fileList.sha256))
            } catch {
                try? FileSystem.removeFile(listPath)
                throw error
            }
            return list
        } catch let error as ArchiveError {
            throw run.fail(Manifest.fileListName, "cannot be read: \(error.message)")
        }
    }

    /// What the files will take, for `room`: those of `MANIFEST.json`, then those of
    /// `MANIFEST.files` in a pass of its own, line by line (memory stays flat).
    private static func needs(of manifest: Manifest, folders: Set<String>, list listPath: String?) throws -> Needs {
        var needs = Needs(bytes: 0, files: folders.count)
        func count(_ file: Manifest.File) {
            let (sum, overflow) = needs.bytes.addingReportingOverflow(max(0, file.size))
            needs.bytes = overflow ? .max : sum
            needs.files += 1
        }
        manifest.files.forEach(count)
        if let listPath {
            let lines = try FileListCursor(path: listPath)
            while let line = try lines.next() { if let line { count(line) } }
        }
        return needs
    }

    /// One member after the manifest (and `MANIFEST.files`): a folder the manifest implies, or a
    /// file it lists, written under the folder (or taken by the sink) and checked; anything else
    /// is refused before it is made.
    private static func extractMember(
        _ entry: ArchiveEntry, _ reader: ArchiveReader, manifest: Manifest, expected: [String: Manifest.File],
        folders: Set<String>, list: FileListCursor?, into members: inout Members, _ run: Extraction
    ) throws {
        let name = entry.name.hasSuffix("/") ? String(entry.name.dropLast()) : entry.name
        guard Self.isMemberName(name), isSafe(name) else {
            throw run.fail(entry.name, "is an unexpected member (only stores/… and files/… belong in an archive)")
        }
        guard !members.seen.contains(name), !members.directories.contains(name) else {
            throw run.fail(name, twice(name, in: manifest, archive: run.archive))
        }
        if let problem = lengthProblem(name, under: run.folder) { throw run.fail(entry.name, "has \(problem)") }
        let target = run.folder + "/" + name
        switch entry.kind {
        case .directory:
            guard folders.contains(name) else {
                throw run.fail(entry.name, "is a folder the manifest does not list")
            }
            try makeFolders(run.folder, name)
            members.directories.insert(name)
        case .regular:
            let file: Manifest.File
            var taker: (any MemberSink)?
            if let known = expected[name] {
                file = known
                members.seen.insert(name)
                taker = try run.sink?(manifest, name)
            } else if let list {
                file = try nextListed(name, target: target, in: list, manifest: manifest, into: &members, run)
            } else {
                throw run.fail(name, "is not in the manifest")
            }
            try run.checkDeclared(name, entry.size, expected: file.size)
            let parent = PathText.parent(name)
            if parent != members.lastFolder {
                try makeFolders(run.folder, parent)
                members.lastFolder = parent
            }
            if let taker {
                let (size, digest, problem) = try stream(
                    reader, to: taker, limit: file.size, hashing: !taker.provesContent)
                members.bytes += size
                try run.checkContent(
                    name, size: size, sha256: taker.provesContent ? nil : digest, expected: (file.size, file.sha256))
                if let problem { throw problem }
                try taker.finish()
                members.streamed.insert(name)
            } else {
                let (size, digest) = try write(reader, to: target, limit: file.size, durable: run.durable)
                members.bytes += size
                try run.checkContent(name, size: size, sha256: digest, expected: (file.size, file.sha256))
            }
        case .symlink, .hardlink:
            throw run.fail(
                entry.name,
                "is a \(entry.kind.rawValue) to \(entry.linkTarget ?? "?"), never found in granary's archives")
        case .other:
            throw run.fail(
                entry.name, "is a special file (device, FIFO or socket), never found in granary's archives")
        }
    }

    /// The entry of `MANIFEST.files` for the member `name`, which must be the next line.
    private static func nextListed(
        _ name: String, target: String, in list: FileListCursor, manifest: Manifest, into members: inout Members,
        _ run: Extraction
    ) throws -> Manifest.File {
        guard let next = try list.next() else { throw run.fail(name, "is not in the manifest") }
        guard let next else {
            throw run.fail(Manifest.fileListName, "line \(members.listed + 1) is not SHA256 SIZE MODE PATH")
        }
        guard next.path == name else {
            throw run.fail(
                name, "comes where \(Manifest.fileListName) lists \(next.path) (line \(members.listed + 1))")
        }
        members.listed += 1
        // Listed names are not remembered (flat memory): a second copy finds the first.
        guard FileSystem.status(target) == nil else {
            throw run.fail(name, twice(name, in: manifest, archive: run.archive))
        }
        if run.allFiles { members.listedFiles.append(next) }
        return next
    }

    /// Everything `MANIFEST.json` and `MANIFEST.files` list was there.
    private static func checkNothingMissing(
        _ manifest: Manifest, _ members: Members, list: FileListCursor?, _ run: Extraction
    ) throws {
        if let missing = manifest.files.first(where: { !members.seen.contains($0.path) }) {
            throw run.fail(missing.path, "is listed in the manifest but missing")
        }
        if let list, let fileList = manifest.fileList {
            if let next = try list.next() {
                throw run.fail(
                    next?.path ?? Manifest.fileListName,
                    next == nil
                        ? "line \(members.listed + 1) is not SHA256 SIZE MODE PATH"
                        : "is listed in \(Manifest.fileListName) but missing")
            }
            guard members.listed == fileList.count else {
                throw run.fail(
                    Manifest.fileListName, "lists \(members.listed) files, the manifest says \(fileList.count)")
            }
        }
    }

    /// Each store of a full: named inside the user's folder, there, a SQLite database, and sound
    /// by SQLite's check (unless `check` is `.none`). The check results, by store name.
    private static func checkStores(
        of manifest: Manifest, seen: Set<String>, _ run: Extraction
    ) throws -> [String: String] {
        var checks: [String: String] = [:]
        for store in manifest.stores where !manifest.isDelta {
            // The name decides where the store goes in the user's folder: it must stay inside it.
            guard isSafe(store.name), store.path == Manifest.storesFolder + store.name else {
                throw run.fail(
                    store.path, "names store \(store.name.debugDescription), which would leave the user's folder")
            }
            guard seen.contains(store.path) else {
                throw run.fail(store.path, "is the store \(store.name) but is not in the archive")
            }
            let path = run.folder + "/" + store.path
            guard FileSystem.head(path, count: 16) == StoreHeader.magic else {
                throw run.fail(store.path, "is not a SQLite database")
            }
            if run.check != .none {
                let problems: [String]
                do {
                    // The extracted copy is private to this run and finished: the check takes its
                    // pages in place (the tee's mapped windows) rather than copying each one out.
                    // Its time budget is that of the store's size (ContentLimits).
                    let db = try Database.openFinished(path: path, limits: run.limits)
                    problems = db.integrityCheck(full: run.check == .full)
                    if let limit = db.exceededLimit {
                        throw VerificationFailure(
                            archive: run.archive, member: store.path, reason: problems.first ?? "stopped at \(limit)",
                            limit: limit)
                    }
                } catch let failure as VerificationFailure {
                    throw failure
                } catch {
                    throw run.fail(
                        store.path, "cannot be opened by SQLite: \((error as? SQLiteError)?.message ?? "\(error)")")
                }
                guard problems == [Database.sound] else {
                    throw run.fail(
                        store.path,
                        "fails \(run.check == .full ? "integrity_check" : "quick_check"): \(problems.prefix(3).joined(separator: "; "))"
                    )
                }
                checks[store.name] = Database.sound
            }
            // Opening for the check may leave an empty -wal/-shm beside the extracted copy.
            try FileSystem.removeFile(path + "-wal")
            try FileSystem.removeFile(path + "-shm")
        }
        return checks
    }

    /// Whether `name` (without a trailing `/`) may be a member after the manifest: `stores`, `files`
    /// or beneath them.
    static func isMemberName(_ name: String) -> Bool {
        name == "stores" || name.hasPrefix(Manifest.storesFolder) || name == "files"
            || name.hasPrefix(Manifest.plainFilesFolder)
    }

    /// The folders the manifest implies: `stores`, every folder above a file it lists (stores
    /// and format 1's external-data files), and each store's external-data folder with the
    /// folders above it (format 2's files are all in it). Throws for an external-data folder
    /// whose name is unsafe or too long.
    private static func impliedFolders(
        of manifest: Manifest, under folder: String, fail: (String?, String) -> VerificationFailure
    ) throws -> Set<String> {
        var folders: Set<String> = ["stores"]
        if manifest.files.contains(where: { $0.kind == .plain }) { folders.insert("files") }
        func addParents(of path: String) {
            var path = Substring(path)
            while let slash = path.lastIndex(of: "/") {
                path = path[..<slash]
                guard path.hasPrefix(Manifest.storesFolder) || path.hasPrefix(Manifest.plainFilesFolder),
                    folders.insert(String(path)).inserted
                else { return }
            }
        }
        for file in manifest.files { addParents(of: file.path) }
        for store in manifest.stores {
            addParents(of: store.path)
            guard let external = store.externalDataPath else { continue }
            let path = external.hasSuffix("/") ? String(external.dropLast()) : external
            guard isSafe(path), path.hasPrefix(Manifest.storesFolder) else {
                throw fail(external, "is the external-data folder of \(store.name) with an unsafe name")
            }
            if let problem = lengthProblem(path, under: folder) {
                throw fail(external, "is an external-data folder with \(problem)")
            }
            folders.insert(path)
            addParents(of: path)
        }
        return folders
    }

    /// Why `name` cannot be made under `folder`, in a phrase (`a name too long to extract: …`):
    /// a component over 255 bytes, or the whole path past the 4,096 bytes of a Linux path. `nil`
    /// when it can. No filesystem granary backs up from holds such a name, so it is a fault of
    /// the archive (65), found before anything is made for it, not a failure to write (74).
    static func lengthProblem(_ name: String, under folder: String) -> String? {
        let bytes = FolderName.encode(name)
        var longest = 0, current = 0
        for byte in bytes {
            if byte == UInt8(ascii: "/") { current = 0 } else { current += 1; longest = max(longest, current) }
        }
        if longest > Int(NAME_MAX) {
            return "a name too long to extract: a component of \(longest) bytes (at most \(NAME_MAX))"
        }
        let total = FolderName.encode(folder).count + 1 + bytes.count
        if total >= Int(PATH_MAX) {
            return
                "a name too long to extract: \(total) bytes with the folder it goes in (at most \(Int(PATH_MAX) - 1))"
        }
        return nil
    }

    /// Makes every file and folder under `folder` (ours, private) durable, once all are written.
    /// A few files (a restore's stores) are fsynced one by one. Many (a Core Data store's external
    /// data) are synced with one `syncfs(2)` of their filesystem: an fsync per file waits for a
    /// journal commit each time (ext4 also syncs the new file's folder), which makes many files
    /// take minutes (docs/performance.md, "Many files"). `syncfs` also writes out other
    /// programs' dirty pages on that filesystem, which the kernel would write within 30 s anyway.
    /// Every restore path's staging folder is synced by it (a delta's rebuild too).
    static func syncTree(_ folder: String) throws {
        var files: [String] = []
        var folders = [folder]
        var index = 0
        while index < folders.count {
            for name in FileSystem.contents(of: folders[index]) {
                let path = folders[index] + "/" + name
                guard let info = FileSystem.status(path) else { continue }
                if (info.st_mode & S_IFMT) == S_IFDIR {
                    folders.append(path)
                } else if (info.st_mode & S_IFMT) == S_IFREG {
                    files.append(path)
                }
                if files.count > syncOneByOne { break }
            }
            if files.count > syncOneByOne { break }
            index += 1
        }
        if files.count > syncOneByOne {
            let fd = RawPath.open(folder, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            if fd < 0 { throw FileSystemError("open", path: folder) }
            defer { close(fd) }
            if syncfs(fd) != 0 { throw FileSystemError("syncfs", path: folder) }
            return
        }
        for path in files + folders.reversed() { try sync(path) }
    }

    /// Up to this many files, `syncTree` fsyncs each.
    static let syncOneByOne = 64

    private static func sync(_ path: String) throws {
        let fd = RawPath.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        if fd < 0 { throw FileSystemError("open", path: path) }
        defer { close(fd) }
        if fsync(fd) != 0 { throw FileSystemError("fsync", path: path) }
    }

    /// Verifies `archive` in a private temporary folder under `workFolder`, removed afterwards
    /// whatever happens.
    public static func verify(
        archive: String, workFolder: String, check: CheckMode = .full, expectedUser: String? = nil,
        limits: ContentLimits = .defaults
    ) throws -> Outcome {
        try FileSystem.makeDirectory(workFolder)
        let folder = try FileSystem.createTemporaryDirectory(in: workFolder, for: "verify")
        defer { FileSystem.removeTree(folder) }
        return try extract(
            archive: archive, into: folder, check: check, expectedUser: expectedUser, durable: false, limits: limits)
    }

    /// Verifies the archive `source` gives, as ``verify(archive:workFolder:check:expectedUser:limits:)``.
    public static func verify(
        source: ArchiveSource, name: String, workFolder: String, check: CheckMode = .full, expectedUser: String? = nil,
        limits: ContentLimits = .defaults
    ) throws -> Outcome {
        try FileSystem.makeDirectory(workFolder)
        let folder = try FileSystem.createTemporaryDirectory(in: workFolder, for: "verify")
        defer { FileSystem.removeTree(folder) }
        return try extract(
            source: source, name: name, into: folder, check: check, expectedUser: expectedUser, durable: false,
            limits: limits)
    }

    /// A relative name made of ordinary components: no `/` at the start, no empty, `.` or `..`
    /// component, no NUL. Any other byte is a valid name on Linux (a store may be called
    /// `Café.sqlite`, or have a newline in its name); it is escaped wherever it is shown.
    static func isSafe(_ name: String) -> Bool {
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        return !name.isEmpty && !name.hasPrefix("/") && !parts.contains("..") && !parts.contains(".")
            && !parts.contains("")
            && !name.utf8.contains(0)
    }

    /// Creates `relative` (and its parents) inside `base`, refusing to follow anything that is
    /// not a real folder made by us. Every restore path's staging folder is made by it (a
    /// delta's rebuild too).
    static func makeFolders(_ base: String, _ relative: String) throws {
        var path = base
        for part in relative.split(separator: "/") {
            path += "/" + part
            if let info = FileSystem.status(path) {
                guard (info.st_mode & S_IFMT) == S_IFDIR else {
                    throw FileSystemError("mkdir", path: path, code: ENOTDIR)
                }
            } else {
                try FileSystem.makeDirectory(path)
            }
        }
    }

    /// Streams the current member into `sink`, hashing it on the way; reads at most `limit + 1`
    /// bytes. What the sink throws stops its bytes and is returned, for the caller to report once
    /// the member's size and SHA-256 have been checked.
    private static func stream(
        _ reader: ArchiveReader, to sink: any MemberSink, limit: Int64, hashing: Bool
    ) throws -> (Int64, String, (any Error)?) {
        var hasher = SHA256()
        var problem: (any Error)?
        let size = try reader.stream(limit: limit) { chunk in
            if hashing { hasher.update(bufferPointer: chunk) }
            guard problem == nil else { return }
            do { try sink.consume(chunk) } catch { problem = error }
        }
        return (size, hasher.finalize().hex, problem)
    }

    /// Streams the current member into a new file at `target` (never an existing one), hashing
    /// it on the way; reads at most `limit + 1` bytes. A `durable` file is written back as it
    /// grows, so that the fsync at the end of the extraction has little left.
    private static func write(
        _ reader: ArchiveReader, to target: String, limit: Int64, durable: Bool
    ) throws -> (Int64, String) {
        let fd = RawPath.open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd < 0 { throw FileSystemError("create", path: target) }
        // Blocks of zeros stay holes: a sparse file (gigabytes long, a few KiB on disk where it was
        // backed up) costs no more here, in verify's folder or in a restore's staging.
        var writer = SparseWriter(fd: fd, path: target)
        var hasher = SHA256()
        var failure: FileSystemError?
        var writebackFrom: Int64 = 0
        let size: Int64
        do {
            size = try reader.stream(limit: limit) { chunk in
                hasher.update(bufferPointer: chunk)
                if failure == nil {
                    do throws(FileSystemError) { try writer.write(chunk) } catch { failure = error }
                    if durable && writer.length - writebackFrom >= ArchiveOutput.writebackStep {
                        _ = granary_start_writeback(fd, writebackFrom, writer.length - writebackFrom)
                        writebackFrom = writer.length
                    }
                }
            }
            if failure == nil {
                do throws(FileSystemError) { try writer.finish() } catch { failure = error }
            }
        } catch {
            close(fd)
            throw error
        }
        close(fd)
        if let failure { throw failure }
        return (size, hasher.finalize().hex)
    }
}

/// Reads `MANIFEST.files` line by line, 64 KiB at a time.
final class FileListCursor {
    private let fd: Int32
    private let path: String
    private var buffer: [UInt8] = []
    private var start = 0
    private var ended = false

    init(path: String) throws {
        fd = RawPath.open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        if fd < 0 { throw FileSystemError("open", path: path) }
        self.path = path
    }

    deinit { close(fd) }

    /// The next entry: `nil` at the end, `.some(nil)` for a line that is not an entry.
    func next() throws -> Manifest.File?? {
        while true {
            if let newline = buffer[start...].firstIndex(of: 0x0A) {
                let line = buffer[start..<newline]
                start = newline + 1
                return .some(Manifest.fileListEntry(line))
            }
            if ended {
                guard start < buffer.count else { return nil }
                start = buffer.count
                return .some(nil)  // a last line without its newline
            }
            buffer.removeSubrange(0..<start)
            start = 0
            var chunk = [UInt8](repeating: 0, count: 64 * 1024)
            let n = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 {
                if errno == EINTR { continue }
                throw FileSystemError("read", path: path)
            }
            if n == 0 { ended = true } else { buffer += chunk[0..<n] }
        }
    }
}

extension ArchiveError {
    /// The message without the archive's path (the caller names the archive already).
    var message: String {
        switch self {
        case .cannotOpen(_, let message), .malformed(_, let message), .writeFailed(_, let message, _): return message
        case .tooLarge(_, let member, let limit): return "member \(member) is larger than \(limit) bytes"
        case .unsafeMember(_, let member, let reason): return "member \(member) \(reason)"
        }
    }
}

extension ManifestError {
    /// What is wrong with the manifest, without the archive's path.
    var reason: String {
        switch self {
        case .invalid(_, let reason): return "is not a valid manifest: \(reason)"
        case .unsupportedFormat(_, let format): return ManifestFormat.problem(format)
        case .missing: return "is missing"
        case .tooLarge: return "is over \(Manifest.sizeLimit) bytes"
        }
    }
}
