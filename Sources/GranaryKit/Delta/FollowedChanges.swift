import Foundation

/// Phase 2 of deltas (issue 51): while `granary follow` runs, it has shipped every committed WAL
/// frame of a user's stores since the base of its generation, so a `backup --delta` hashes only
/// the pages those frames (and the frames of the live `-wal` not yet shipped) name, and takes every
/// other page's hash from its base. The record is read by the follow layer
/// (`FollowedPages`, which the backup cannot name) and handed over as this source.
/// Invariant D13 (docs/delta-invariants.md): what must hold for the candidates to be a superset of
/// the changed pages, and every case that falls back to hashing every page.
public struct FollowedPagesSource: Sendable {
    /// The record of `user`'s newest follow generation on this host in `repository`, when its base
    /// is one of `chain` (the delta's base chain, newest first: archive file names).
    let record: @Sendable (_ user: UserID, _ chain: [String], _ repository: any Repository) -> FollowedRecord

    init(record: @escaping @Sendable (UserID, [String], any Repository) -> FollowedRecord) {
        self.record = record
    }
}

/// What `follow` recorded of a user since its generation's base: per store, the pages its shipped
/// frames name, and how to read the rest (the live `-wal` from the last shipped cursor).
struct FollowedRecord: Sendable {
    /// The generation (its base archive's file name), when there is a usable one.
    var generation: String?
    /// Why there is none (nil when there is).
    var unusable: String?
    var stores: [String: Store] = [:]

    static func none(_ why: String) -> FollowedRecord { FollowedRecord(generation: nil, unusable: why) }

    struct Store: Sendable {
        /// The page size of the frames shipped (nil: none was).
        var pageSize: Int?
        var changes = FollowedChanges()
        /// Reads the live store's `-wal` from the last shipped cursor to its end, proven continuous
        /// (the follow layer's rules); called inside the copy's read transaction.
        var tail: @Sendable (StoreFile) -> Swift.Result<FollowedChanges, FollowedFallback>
    }
}

/// Why a store's delta hashes every page after all (said in `-v` and JSON).
struct FollowedFallback: Error, Sendable, Equatable {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

/// Page numbers named by frames, and the database sizes their commits gave.
struct FollowedChanges: Sendable {
    /// Page indexes (from 0) some frame wrote.
    var pages = PageBits()
    /// The smallest database size (pages) a commit gave, and the last one's.
    var smallest = Int.max
    var last: Int?
    /// The page size of the frames (nil: no frame).
    var pageSize: Int?

    mutating func frame(page number: Int) { if number > 0 { pages.insert(number - 1) } }
    mutating func commit(pages size: Int) {
        smallest = min(smallest, size)
        last = size
    }

    mutating func add(_ other: FollowedChanges) {
        pages.formUnion(other.pages)
        smallest = min(smallest, other.smallest)
        if other.last != nil { last = other.last }
    }
}

extension PageBits {
    mutating func formUnion(_ other: PageBits) {
        other.forEach { insert($0) }
    }
}

/// One store's phase-2 setting for its discarded copy (``DeltaAttempt/NoCopy``).
struct FollowedStore {
    /// The record's pages of this store, or why the store hashes every page.
    var record: Swift.Result<FollowedRecord.Store, FollowedFallback>
    /// The live store (the tail's `-wal` is opened beneath its folder).
    var store: StoreFile
    /// The base's page count of this store.
    var basePages: Int
    /// Whether every page is also hashed and each one phase 2 took from the base checked against
    /// it (debug builds).
    var crossCheck: Bool

    /// The pages to hash, decided inside the copy's read transaction (`pageCount`, `pageSize`: what
    /// it reads), or why every page is hashed.
    /// Invariant D13 (docs/delta-invariants.md)
    func candidates(pageCount: Int, pageSize: Int) -> Swift.Result<PageRecorder.Candidates, FollowedFallback> {
        let record: FollowedRecord.Store
        switch self.record {
        case .failure(let why): return .failure(why)
        case .success(let found): record = found
        }
        if let recorded = record.pageSize, recorded != pageSize {
            return .failure(.init("follow recorded pages of \(recorded) bytes, the store has \(pageSize)"))
        }
        var changes = record.changes
        switch record.tail(store) {
        case .failure(let why): return .failure(why)
        case .success(let tail):
            if let size = tail.pageSize, size != pageSize {
                return .failure(.init("the -wal has pages of \(size) bytes, the store \(pageSize)"))
            }
            changes.add(tail)
        }
        // The size the read transaction sees must be the last commit's follow saw (or the base's,
        // when nothing was committed since): a size no frame explains is a change outside the record.
        let expected = changes.last ?? basePages
        guard expected == pageCount else {
            return .failure(
                .init("the store has \(pageCount) pages, the last commit follow saw \(expected)"))
        }
        // Every page at or past the smallest size a commit gave (or past the base's count) may have
        // been cut and grown back: hashed.
        let from = min(basePages, changes.smallest)
        return .success(PageRecorder.Candidates(pages: changes.pages, from: from, crossCheck: crossCheck))
    }

    /// Whether phase 2's cross-check runs: in debug builds (what the tests run), never in a
    /// release build (GranaryKit reads no environment of its own).
    static var crossCheckWanted: Bool {
        #if TEST_HOOKS
            return true
        #else
            return _isDebugAssertConfiguration()
        #endif
    }
}

/// A page phase 2 took from the base changed after all: the candidates were not a superset of the
/// changed pages (a broken invariant D13). Only the cross-check finds it, and it fails the backup.
public struct FollowedCrossCheckFailure: GranaryError, Equatable {
    /// The page (from 1) whose hash differed from the base's though follow's record left it out.
    public let page: Int
    public var description: String {
        "phase 2 of the delta missed a changed page (page \(page)): follow's record is not a superset of the changes; report this as a bug"
    }
}
