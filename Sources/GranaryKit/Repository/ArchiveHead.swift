import Foundation
import GranaryDigest

/// An archive's head: its manifest and the SHA-256 of the manifest's bytes (what a delta records
/// of the archive it is built on), read from its first member alone. The one way granary reads a
/// manifest, for a repository's archive (``Repository/head(of:)``) and for a file named on the
/// command line (``init(file:)``) alike.
public struct ArchiveHead: Sendable {
    public let manifest: Manifest
    /// The SHA-256 of `MANIFEST.json`'s bytes, in lowercase hex.
    public let sha256: String

    /// The head of the archive file at `path`, reading nothing after it.
    public init(file path: String) throws {
        self = try Self.read(.file(path), name: path)
    }

    /// Reads the head of the archive in `source`; `name` names it in messages. What is wrong
    /// with the archive is a ``VerificationFailure``; a download cut short is thrown as what it
    /// is (the transfer's failure), never as a damaged archive.
    static func read(_ source: ArchiveSource, name: String) throws -> ArchiveHead {
        ReadTrace.note("head", name)
        do {
            let reader = try source.reader(name: name, blockSize: 64 * 1024)
            guard let first = try reader.next(), first.name == Manifest.memberName, first.kind == .regular else {
                throw VerificationFailure(archive: name, reason: "does not start with \(Manifest.memberName)")
            }
            let bytes = try reader.readAll(limit: Manifest.sizeLimit)
            let manifest: Manifest
            do {
                manifest = try Manifest.decode(bytes, source: name)
            } catch {
                var failure = VerificationFailure(archive: name, member: Manifest.memberName, reason: error.reason)
                if case .unsupportedFormat(_, let format) = error { failure.unreadableFormat = format }
                throw failure
            }
            if case .stream(let stream) = source { stream.stop() }
            return ArchiveHead(manifest: manifest, sha256: SHA256.hash(data: bytes).hex, size: bytes.count)
        } catch {
            if let failure = source.transferFailure() { throw failure }
            throw error
        }
    }

    private init(manifest: Manifest, sha256: String, size: Int) {
        self.manifest = manifest
        self.sha256 = sha256
        self.size = size
    }

    /// The size of `MANIFEST.json` in bytes (what ``HeadMemo`` counts).
    let size: Int
}

/// Heads already read, while one `prune` runs (``remembering(_:)``): prune's plan asks for the same
/// manifests several times (the chains a kept delta needs, the runs a merge replaces, the plan
/// again after the merges, the chain a merge's base and its proof walk), and reads each once.
///
/// An archive's head is remembered under what the listing says of it: its object, size,
/// modification stamp and identity (a local file's device, inode and change time; a remote
/// object's ETag or upload time). A file rewritten, replaced or copied over since is another key
/// and is read again: the memo never answers for bytes it did not read. At most
/// ``byteLimit`` bytes of manifests are held; past that, the memo starts again empty.
enum HeadMemo {
    static let byteLimit = 32 << 20
    private static let lock = NSLock()
    nonisolated(unsafe) private static var depth = 0
    nonisolated(unsafe) private static var heads: [String: ArchiveHead] = [:]
    nonisolated(unsafe) private static var bytes = 0

    /// Runs `body` with the memo on (calls nest); the memo is emptied when the outermost ends.
    static func remembering<T>(_ body: () throws -> T) rethrows -> T {
        lock.withLock { depth += 1 }
        defer {
            lock.withLock {
                depth -= 1
                if depth == 0 {
                    heads = [:]
                    bytes = 0
                }
            }
        }
        return try body()
    }

    /// The key of `entry` as listed; nil for a file outside a repository, or when the memo is off.
    static func key(_ entry: RepositoryEntry) -> String? {
        guard let object = entry.object, lock.withLock({ depth > 0 }) else { return nil }
        return "\(object)\n\(entry.size)\n\(entry.modified)\n\(entry.identity ?? "")"
    }

    static func lookup(_ key: String) -> ArchiveHead? { lock.withLock { heads[key] } }

    static func remember(_ head: ArchiveHead, key: String) {
        lock.withLock {
            guard depth > 0 else { return }
            if bytes + head.size > byteLimit {
                heads = [:]
                bytes = 0
            }
            heads[key] = head
            bytes += head.size
        }
    }
}

extension Repository {
    /// The head of `entry`, reading nothing after it (for a remote archive, a ranged read of its
    /// first bytes; the whole object only for a manifest that does not fit). An archive whose
    /// name its manifest contradicts is refused (``DeltaRestore/impostor(_:)``).
    public func head(of entry: RepositoryEntry) throws -> ArchiveHead {
        let head = try headAsWritten(entry)
        if entry.object != nil, let problem = entry.name.disagreement(with: head.manifest) {
            throw VerificationFailure(
                archive: entry.path, member: Manifest.memberName, reason: DeltaRestore.impostor(problem))
        }
        return head
    }

    private func headAsWritten(_ entry: RepositoryEntry) throws -> ArchiveHead {
        if let key = HeadMemo.key(entry), let head = HeadMemo.lookup(key) { return head }
        let head = try headRead(entry)
        if let key = HeadMemo.key(entry) { HeadMemo.remember(head, key: key) }
        return head
    }

    private func headRead(_ entry: RepositoryEntry) throws -> ArchiveHead {
        if let file = entry.localFile { return try ArchiveHead.read(.file(file), name: entry.path) }
        let head: Int64 = 1 << 20
        do {
            return try ArchiveHead.read(try open(entry, head: min(head, entry.size)), name: entry.path)
        } catch let error as RepositoryError {
            throw error
        } catch  where entry.size > head {
            // A manifest larger than the head (many attachments): read on until it ends.
            return try ArchiveHead.read(try open(entry), name: entry.path)
        }
    }
}
