import Crypto
import Foundation

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
            return ArchiveHead(manifest: manifest, sha256: SHA256.hash(data: bytes).hex)
        } catch {
            if let failure = source.transferFailure() { throw failure }
            throw error
        }
    }

    private init(manifest: Manifest, sha256: String) {
        self.manifest = manifest
        self.sha256 = sha256
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
