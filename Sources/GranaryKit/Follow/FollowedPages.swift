import Foundation

/// Phase 2 of deltas (issue 51): `follow`'s record of the pages that changed since a base, read
/// for `backup --delta` (``FollowedPagesSource``). The record is the user's newest generation on
/// this host, when its base is the delta's base or an archive of the base's chain: the pages its
/// segments' frames name, the database sizes their commits give, and each store's last shipped
/// cursor, from which the live `-wal` is read when the copy's read transaction holds it.
/// Anything incomplete or unproven is a reason, and the delta hashes every page.
/// Invariant D13 (docs/delta-invariants.md)
public enum FollowedPages {
    /// The source a backup is given (`BackupOperation.Options.followedPages`).
    public static func source() -> FollowedPagesSource {
        FollowedPagesSource { user, chain, repository in
            record(user: user, chain: chain, repository: repository)
        }
    }

    static func record(user: UserID, chain: [String], repository: any Repository) -> FollowedRecord {
        guard let local = repository.localPath else {
            return .none("the repository is not local (follow's segments are read from a local one)")
        }
        let host = repository.context.host
        guard let generation = FollowCatalogue.generations(in: local, user: user, host: host).last else {
            return .none("no follow generation of \(user.rawValue) on this host")
        }
        guard chain.contains(generation.name) else {
            return .none("follow's newest generation is built on \(generation.name), not on the base's chain")
        }
        guard generation.window != nil else {
            return .none("follow's generation on \(generation.name) misses a segment")
        }
        var stores: [String: FollowedRecord.Store] = [:]
        var cursors: [String: Segment.StoreCursor] = [:]
        for segment in generation.segments {
            var current: String?
            var header: Segment.Header?
            var problem: String?
            do {
                let trailer = try SegmentReader.read(segment.path) { record in
                    guard problem == nil else { return }
                    switch record {
                    case .header(let found): header = found
                    case .store(let run):
                        current = run.store
                        var store =
                            stores[run.store]
                            ?? FollowedRecord.Store(pageSize: run.pageSize, tail: { _ in .success(.init()) })
                        if store.pageSize != run.pageSize {
                            problem = "\(run.store)'s page size changed within the generation"
                        }
                        store.pageSize = run.pageSize
                        stores[run.store] = store
                    case .frame(let number, _):
                        guard let name = current, number > 0 else {
                            problem = "a frame without its store"
                            return
                        }
                        stores[name]?.changes.frame(page: Int(number))
                    case .commit(let commit):
                        guard let name = current else {
                            problem = "a commit without its store"
                            return
                        }
                        stores[name]?.changes.commit(pages: Int(commit.pages))
                    }
                }
                if let problem { return .none("segment \(segment.name): \(problem)") }
                guard let header, header.user == user.rawValue, header.host == host,
                    header.generation == generation.name, header.sequence == segment.sequence
                else { return .none("segment \(segment.name) does not belong where it lies") }
                cursors = trailer.cursors
            } catch {
                return .none(
                    "segment \(segment.name) cannot be read (\((error as? any GranaryError)?.description ?? "\(error)"))"
                )
            }
        }
        var record = FollowedRecord(generation: generation.name, unusable: nil)
        for (name, cursor) in cursors {
            var store = stores[name] ?? FollowedRecord.Store(pageSize: nil, tail: { _ in .success(.init()) })
            store.tail = { live in tail(of: live, from: cursor) }
            record.stores[name] = store
        }
        return record
    }

    /// The frames of `store`'s live `-wal` from `cursor` to its end, proven to follow it as
    /// `follow` proves them (``WALReader/read(from:limit:maxDatabaseBytes:sink:)``), or why not.
    static func tail(of store: StoreFile, from cursor: Segment.StoreCursor)
        -> Swift.Result<FollowedChanges, FollowedFallback>
    {
        guard store.device == cursor.device, store.inode == cursor.inode else {
            return .failure(.init("the store was replaced since follow's last segment"))
        }
        do {
            guard let reader = try WALReader.open(in: store.folder, store: store.fileName, storeOwner: store.uid) else {
                return cursor.wal == nil
                    ? .success(.init()) : .failure(.init("its -wal is gone since follow's last segment"))
            }
            if cursor.wal == nil && reader.length >= Int64(WALReader.headerSize) {
                return .failure(.init("a -wal began that follow did not read from its start"))
            }
            var changes = FollowedChanges()
            let read = try reader.read(from: cursor.wal, limit: .max) { frame, page in
                changes.pageSize = page.count
                changes.frame(page: Int(frame.pageNumber))
                if frame.isCommit { changes.commit(pages: Int(frame.commitPages)) }
            }
            if let broken = read.broken { return .failure(.init("its -wal since follow's last segment: \(broken)")) }
            if read.capped { return .failure(.init("its -wal since follow's last segment is too large to read")) }
            return .success(changes)
        } catch {
            return .failure(
                .init("its -wal cannot be read (\((error as? any GranaryError)?.description ?? "\(error)"))"))
        }
    }
}
