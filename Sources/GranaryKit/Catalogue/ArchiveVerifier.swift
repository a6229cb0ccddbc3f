import CLinux
import Crypto
import Foundation

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

    public init(archive: String, member: String? = nil, reason: String) {
        self.archive = archive
        self.member = member
        self.reason = reason
    }

    public var description: String { "\(archive): \(member.map { $0 + " " } ?? "")\(reason)" }
    public var status: ExitStatus { .dataError }
    public var hint: String? { "the archive is damaged; restore from another one (granary list shows which verify)" }
}

/// Reads an archive once, from start to end, and proves it: the manifest comes first; every
/// member is a regular file or folder under `stores/` listed in the manifest with the size and
/// SHA-256 it has; nothing listed is missing and nothing is there twice; every store passes
/// SQLite's `integrity_check` (or `quick_check`).
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

    /// Extracts `archive` into `folder` (existing, empty, private) and verifies it.
    ///
    /// `check` picks the SQLite check run on each extracted store (`.none` skips it: restore
    /// and verify never pass it). `expectedUser`, when given, must match the manifest's user.
    /// `durable` files are written back as they grow and fsynced (restore's staging, which is
    /// swapped in); otherwise the copy is scratch that is checked and removed (verify, inspect).
    public static func extract(
        archive: String, into folder: String, check: CheckMode = .full, expectedUser: String? = nil, durable: Bool = true
    ) throws -> Outcome {
        try extract(source: .file(archive), name: archive, into: folder, check: check, expectedUser: expectedUser, durable: durable)
    }

    /// Extracts the archive `source` gives (a local file, or a download read front to back)
    /// into `folder` and verifies it, as ``extract(archive:into:check:expectedUser:durable:)``.
    /// A download that fails (a cut connection, a server error) is reported as the transfer's
    /// failure, never as a fault of the archive. `name` names the archive in messages.
    public static func extract(
        source: ArchiveSource, name: String, into folder: String, check: CheckMode = .full, expectedUser: String? = nil,
        durable: Bool = true
    ) throws -> Outcome {
        let outcome: Outcome
        do {
            outcome = try extractVerified(
                source: source, archive: name, into: folder, check: check, expectedUser: expectedUser, durable: durable)
        } catch {
            if let failure = source.transferFailure() { throw failure }
            throw error
        }
        if let failure = source.transferFailure() { throw failure }
        return outcome
    }

    private static func extractVerified(
        source: ArchiveSource, archive: String, into folder: String, check: CheckMode, expectedUser: String?, durable: Bool
    ) throws -> Outcome {
        func fail(_ member: String?, _ reason: String) -> VerificationFailure {
            VerificationFailure(archive: archive, member: member, reason: reason)
        }
        let reader: ArchiveReader
        do { reader = try source.reader(name: archive) } catch {
            if error.status == .dataError { throw fail(nil, "is not a readable archive: \(error.message)") }
            throw error
        }
        let manifest: Manifest
        do {
            guard let first = try reader.next() else { throw fail(nil, "is empty") }
            guard first.name == Manifest.memberName, first.kind == .regular else {
                throw fail(first.name, "comes first, where \(Manifest.memberName) must be")
            }
            manifest = try Manifest.decode(try reader.readAll(limit: Manifest.sizeLimit), source: archive)
        } catch let error as VerificationFailure {
            throw error
        } catch let error as ManifestError {
            throw fail(Manifest.memberName, error.reason)
        } catch let error as ArchiveError {
            throw fail(Manifest.memberName, "cannot be read: \(error.message)")
        }
        if let expectedUser, manifest.user != expectedUser {
            throw fail(Manifest.memberName, "belongs to user \(manifest.user.debugDescription), not \(expectedUser.debugDescription)")
        }
        var expected: [String: Manifest.File] = [:]
        for file in manifest.files {
            guard isSafe(file.path) else { throw fail(file.path, "is listed in the manifest with an unsafe name") }
            expected[file.path] = file
        }
        var seen: Set<String> = []
        var directories: Set<String> = []
        var bytes: Int64 = 0
        do {
            while let entry = try reader.next() {
                try Interruption.check()
                let name = entry.name.hasSuffix("/") ? String(entry.name.dropLast()) : entry.name
                guard name == "stores" || name.hasPrefix(Manifest.storesFolder), isSafe(name) else {
                    throw fail(entry.name, "is an unexpected member (only stores/… belongs in an archive)")
                }
                guard !seen.contains(name), !directories.contains(name) else { throw fail(name, "is in the archive twice") }
                let target = folder + "/" + name
                switch entry.kind {
                case .directory:
                    try makeFolders(folder, name)
                    directories.insert(name)
                case .regular:
                    guard let file = expected[name] else { throw fail(name, "is not in the manifest") }
                    guard entry.size <= file.size else {
                        throw fail(name, "declares \(entry.size) bytes, the manifest says \(file.size)")
                    }
                    try makeFolders(folder, (name as NSString).deletingLastPathComponent)
                    let (size, digest) = try write(reader, to: target, limit: file.size, durable: durable)
                    bytes += size
                    guard size == file.size else { throw fail(name, "has \(size) bytes, the manifest says \(file.size)") }
                    guard digest == file.sha256 else { throw fail(name, "has SHA-256 \(digest), the manifest says \(file.sha256)") }
                    seen.insert(name)
                case .symlink, .hardlink:
                    throw fail(entry.name, "is a \(entry.kind.rawValue) to \(entry.linkTarget ?? "?"), never found in granary's archives")
                case .other:
                    throw fail(entry.name, "is a special file (device, FIFO or socket), never found in granary's archives")
                }
            }
        } catch let error as ArchiveError {
            switch error {
            case .tooLarge(_, let member, let limit):
                throw fail(member, "is larger than the \(limit) bytes the manifest says")
            default:
                throw fail(nil, "is damaged or truncated: \(error.message)")
            }
        }
        if let missing = manifest.files.first(where: { !seen.contains($0.path) }) {
            throw fail(missing.path, "is listed in the manifest but missing")
        }
        var checks: [String: String] = [:]
        for store in manifest.stores {
            // The name decides where the store goes in the user's folder: it must stay inside it.
            guard isSafe(store.name), store.path == Manifest.storesFolder + store.name else {
                throw fail(store.path, "names store \(store.name.debugDescription), which would leave the user's folder")
            }
            guard seen.contains(store.path) else { throw fail(store.path, "is the store \(store.name) but is not in the archive") }
            let path = folder + "/" + store.path
            guard FileSystem.head(path, count: 16) == StoreHeader.magic else {
                throw fail(store.path, "is not a SQLite database")
            }
            if check != .none {
                let problems: [String]
                do {
                    // The extracted copy is private to this run and finished: the check takes its
                    // pages in place (the tee's mapped windows) rather than copying each one out.
                    let db = try Database.openFinished(path: path)
                    problems = db.integrityCheck(full: check == .full)
                } catch {
                    throw fail(store.path, "cannot be opened by SQLite: \(error.message)")
                }
                guard problems == ["ok"] else {
                    throw fail(store.path, "fails \(check == .full ? "integrity_check" : "quick_check"): \(problems.prefix(3).joined(separator: "; "))")
                }
                checks[store.name] = "ok"
            }
            // Opening for the check may leave an empty -wal/-shm beside the extracted copy.
            try FileSystem.removeFile(path + "-wal")
            try FileSystem.removeFile(path + "-shm")
        }
        return Outcome(manifest: manifest, bytes: bytes, checks: checks)
    }

    /// Verifies `archive` in a private temporary folder under `workFolder`, removed afterwards
    /// whatever happens.
    public static func verify(
        archive: String, workFolder: String, check: CheckMode = .full, expectedUser: String? = nil
    ) throws -> Outcome {
        try FileSystem.makeDirectory(workFolder)
        let folder = try FileSystem.createTemporaryDirectory(in: workFolder, for: "verify")
        defer { FileSystem.removeTree(folder) }
        return try extract(archive: archive, into: folder, check: check, expectedUser: expectedUser, durable: false)
    }

    /// Verifies the archive `source` gives, as ``verify(archive:workFolder:check:expectedUser:)``.
    public static func verify(
        source: ArchiveSource, name: String, workFolder: String, check: CheckMode = .full, expectedUser: String? = nil
    ) throws -> Outcome {
        try FileSystem.makeDirectory(workFolder)
        let folder = try FileSystem.createTemporaryDirectory(in: workFolder, for: "verify")
        defer { FileSystem.removeTree(folder) }
        return try extract(source: source, name: name, into: folder, check: check, expectedUser: expectedUser, durable: false)
    }

    /// A relative name made of ordinary components: no `/` at the start, no empty, `.` or `..`
    /// component, no NUL. Any other byte is a valid name on Linux (a store may be called
    /// `Café.sqlite`, or have a newline in its name); it is escaped wherever it is shown.
    static func isSafe(_ name: String) -> Bool {
        let parts = name.split(separator: "/", omittingEmptySubsequences: false)
        return !name.isEmpty && !name.hasPrefix("/") && !parts.contains("..") && !parts.contains(".") && !parts.contains("")
            && !name.utf8.contains(0)
    }

    /// Creates `relative` (and its parents) inside `base`, refusing to follow anything that is
    /// not a real folder made by us.
    private static func makeFolders(_ base: String, _ relative: String) throws {
        var path = base
        for part in relative.split(separator: "/") {
            path += "/" + part
            if let info = FileSystem.status(path) {
                guard (info.st_mode & S_IFMT) == S_IFDIR else { throw FileSystemError("mkdir", path: path, code: ENOTDIR) }
            } else {
                try FileSystem.makeDirectory(path)
            }
        }
    }

    /// Streams the current member into a new file at `target` (never an existing one), hashing
    /// it on the way; reads at most `limit + 1` bytes. A `durable` file is written back as it
    /// grows (so the fsync at the end has little left) and fsynced.
    private static func write(
        _ reader: ArchiveReader, to target: String, limit: Int64, durable: Bool
    ) throws -> (Int64, String) {
        let fd = RawPath.open(target, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if fd < 0 { throw FileSystemError("create", path: target) }
        var hasher = SHA256()
        var failure: FileSystemError?
        var written: Int64 = 0
        var writebackFrom: Int64 = 0
        let size: Int64
        do {
            size = try reader.stream(limit: limit) { chunk in
                hasher.update(bufferPointer: chunk)
                if failure == nil {
                    do throws(FileSystemError) { try FileSystem.writeAll(fd, chunk, path: target) } catch { failure = error }
                    written += Int64(chunk.count)
                    if durable && written - writebackFrom >= ArchiveOutput.writebackStep {
                        _ = granary_start_writeback(fd, writebackFrom, written - writebackFrom)
                        writebackFrom = written
                    }
                }
            }
        } catch {
            close(fd)
            throw error
        }
        let synced = durable ? fsync(fd) : 0
        close(fd)
        if let failure { throw failure }
        if synced != 0 { throw FileSystemError("fsync", path: target) }
        return (size, hasher.finalize().hex)
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
        case .unsupportedFormat(_, let format):
            return "has format \(format), newer than this granary reads (\(Manifest.currentFormat)): use a newer granary"
        case .missing: return "is missing"
        }
    }
}
