import CSQLite
import CSQLiteLimits
import Foundation

/// What SQLite may spend on one connection to a store: a time budget and a memory ceiling.
///
/// A store's content is its owner's to choose, and SQLite evaluates some of it while granary
/// only reads: an expression index or a `NOT NULL` virtual generated column makes
/// `integrity_check` compute its expression for every row, and a few KiB of schema can make
/// that cost seconds and hundreds of MiB per row. Run as root over many users, granary gives
/// every connection it opens a budget (`ContentBudget`): the time spent inside SQLite calls on
/// it (less the time slept waiting for another connection's lock, which the busy timeout bounds)
/// is checked from SQLite's progress handler (<https://www.sqlite.org/c3ref/progress_handler.html>)
/// and the statement stopped past the budget; the SQLite heap its calls allocate is charged to
/// it and an allocation past the ceiling fails (`SQLITE_NOMEM`). Either fails that store with a
/// data error naming the limit, and a run over several users goes on with the next.
///
/// The time budget grows with the store: `time` for any store plus `timePerGiB` for each GiB of
/// its database file, so that an honest 10 GiB store is checked in full while a small
/// hostile one is stopped soon. A user's checks share one more budget across all the user's
/// stores (`ContentAccount`): `time` once plus `timePerGiB` for each GiB of all of them, so that a
/// user with many small stores gets no more time than one with a single store of the same size
/// (10 stores under the budget each would otherwise delay the next user by 10 budgets). The defaults (30 s + 2 min per GiB, 512 MiB) are several times
/// what an honest store needs (docs/performance.md, "Content limits", has the measurements).
///
/// The memory ceiling is per connection, not the process-wide `sqlite3_hard_heap_limit64`: with
/// several users backed up at once a hostile store would exhaust a shared ceiling and honest stores checked at
/// the same time would fail for it. See `Sources/CSQLiteLimits/include/granary_limits.h`.
///
/// Not bounded by either: a single SQL function call. The progress handler runs between
/// virtual-machine instructions, so one call that is slow by itself (a function quadratic in
/// the length of its arguments) runs to its end; the memory ceiling bounds the length of the
/// values it can be given.
public struct ContentLimits: Sendable, Equatable {
    /// The time budget of any store (`[limits] time`); with `timePerGiB` zero too, no budget.
    public var time: Duration
    /// Added to the budget for each GiB of the store (`[limits] time_per_gib`).
    public var timePerGiB: Duration
    /// The most SQLite heap, in bytes, a connection's calls may hold (`[limits] memory`); 0: none.
    public var memory: Int64

    public init(time: Duration, timePerGiB: Duration, memory: Int64) {
        self.time = time
        self.timePerGiB = timePerGiB
        self.memory = memory
    }

    /// 30 s plus 2 min per GiB; 512 MiB.
    public static let defaults = ContentLimits(time: .seconds(30), timePerGiB: .seconds(120), memory: 512 << 20)
    /// No budget, no ceiling.
    public static let unlimited = ContentLimits(time: .zero, timePerGiB: .zero, memory: 0)

    /// The time budget of a store of `size` bytes; `.zero` means none.
    public func timeBudget(forStoreOfSize size: Int64) -> Duration {
        time + timePerGiB * (Double(max(0, size)) / Double(1 << 30))
    }

    /// Whether memory ceilings are enforced in this process (the allocator wrapper is installed
    /// when the process starts, before SQLite initialises; embedding code that initialised SQLite
    /// first goes without).
    public static var memoryCeilingEnforced: Bool { granary_limits_memory_enforced() != 0 }
}

/// One user's time across stores: the checks of all a user's stores together stop once they have
/// spent `time` plus `timePerGiB` for each GiB of the stores (see `ContentLimits`). Each
/// connection opened with it is charged to it as well as to its own budget.
public final class ContentAccount: @unchecked Sendable {
    /// The shared budget (immutable; the C account counts atomically).
    public let budget: Duration
    /// The limits it was made under: those of each connection charged to it, unless given its own.
    public let limits: ContentLimits
    let handle: OpaquePointer?

    /// An account for stores of `size` bytes in all, under `limits`.
    public init(limits: ContentLimits, storesOfSize size: Int64) {
        self.limits = limits
        budget = limits.timeBudget(forStoreOfSize: size)
        handle = granary_account_create(ContentBudget.nanoseconds(budget))
    }

    deinit { granary_account_release(handle) }

    /// The time spent inside SQLite calls charged to it so far, and in copies of the user's
    /// bytes (``charge(_:)``).
    public var spent: Duration { .nanoseconds(granary_account_spent(handle)) }

    /// The account's time now: ``budget``, plus what copies added (``allow(copyOf:)``); `.zero`: none.
    public var limit: Duration { .nanoseconds(granary_account_limit(handle)) }

    /// Charges time spent outside SQLite: a copy of the user's bytes (``FileDigest``).
    public func charge(_ time: Duration) {
        let ns = time.components.seconds * 1_000_000_000 + time.components.attoseconds / 1_000_000_000
        granary_account_charge(handle, ns)
    }

    /// Adds to the account what a copy of a file of `bytes` allocated bytes may take: `timePerGiB`
    /// for each GiB, as for a store. Counted from the blocks the file has, not its length: a
    /// file with a hole of terabytes reads the hole at the speed of memory, and an honest
    /// attachment (whose blocks are its length) gets the time a slow disk needs for it.
    public func allow(copyOf bytes: Int64) {
        let extra = limits.timePerGiB * (Double(max(0, bytes)) / Double(1 << 30))
        granary_account_extend(
            handle, extra.components.seconds * 1_000_000_000 + extra.components.attoseconds / 1_000_000_000)
    }

    /// Whether the account's time is spent (never, for an account without one).
    public var isSpent: Bool {
        let limit = limit
        return limit > .zero && spent > limit
    }
}

/// A limit a store ran into.
public enum ContentLimit: Sendable, Equatable, CustomStringConvertible {
    /// The time budget, as it was for that store; `acrossStores`: the user's, shared by all its
    /// stores (`ContentAccount`).
    case time(Duration, acrossStores: Bool = false)
    /// The memory ceiling, in bytes.
    case memory(Int64)

    public var description: String {
        switch self {
        case .time(let budget, let acrossStores):
            // Whole seconds from 10 s on: the per-GiB part of a small store's budget is noise.
            let shown =
                budget >= .seconds(10)
                ? .seconds(
                    budget.components.seconds + (budget.components.attoseconds >= 500_000_000_000_000_000 ? 1 : 0))
                : budget
            if acrossStores {
                return
                    "the user's time budget of \(DurationText.format(shown)) for all its stores ([limits] time, time_per_gib)"
            }
            return "its time budget of \(DurationText.format(shown)) ([limits] time, time_per_gib)"
        case .memory(let bytes): return "its memory ceiling of \(ByteCountText.render(bytes)) ([limits] memory)"
        }
    }
}

/// One connection's budget (see `ContentLimits`): created with the connection, entered around
/// every call into SQLite on it.
final class ContentBudget {
    let handle: OpaquePointer?
    let limits: ContentLimits
    /// The time budget, once `setTime` has set it.
    private(set) var time: Duration = .zero
    var memory: Int64 { limits.memory }

    /// How often (in virtual-machine instructions) the progress handler looks at the clock: a
    /// look costs a few ns (the coarse clock, from the vDSO), an instruction some ns, and a row
    /// of an index check some 10 instructions, so an expensive expression runs at most a few
    /// rows past the budget.
    static let instructionsPerLook: Int32 = 16

    /// The account the connection's time is also charged to, if any.
    let account: ContentAccount?

    /// A budget with `limits`' memory ceiling, charged to `account` too; its time is set once the
    /// store's size is known.
    init(limits: ContentLimits, account: ContentAccount? = nil) {
        self.limits = limits
        self.account = account
        handle = granary_budget_create(0, max(0, limits.memory))
        if let account { granary_budget_set_account(handle, account.handle) }
    }

    /// Sets the time budget of a store of `size` bytes.
    func setTime(forStoreOfSize size: Int64) {
        time = limits.timeBudget(forStoreOfSize: size)
        granary_budget_set_time(handle, Self.nanoseconds(time))
    }

    /// `duration` in whole nanoseconds, at most `Int64.max`.
    static func nanoseconds(_ duration: Duration) -> Int64 {
        let (seconds, attoseconds) = duration.components
        let nanoseconds = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        return nanoseconds.overflow ? Int64.max : max(0, nanoseconds.partialValue + attoseconds / 1_000_000_000)
    }

    deinit { granary_budget_release(handle) }

    /// The busy handler's question, asked before and after each wait for a lock.
    private static let interruption: Void = granary_limits_set_interruption { Interruption.isRequested ? 1 : 0 }

    /// Installs the time check on `db`, and its busy timeout, whose waits the budget leaves out
    /// and which ends at once when SIGINT, SIGTERM or SIGHUP has arrived.
    func watch(_ db: OpaquePointer, busyTimeout milliseconds: Int32) {
        Self.interruption
        granary_budget_watch(handle, db, Self.instructionsPerLook)
        granary_budget_busy_timeout(handle, db, milliseconds)
    }

    /// Runs `body` (calls into SQLite on this budget's connection) with its time and allocations
    /// counted against the budget.
    @inline(__always)
    func charging<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        let previous = granary_budget_enter(handle)
        defer { granary_budget_leave(handle, previous) }
        return try body()
    }

    /// The limit the connection ran into, if any (time first: a statement stopped for time may
    /// also have had an allocation refused on its way).
    var exceeded: ContentLimit? {
        guard let handle else { return nil }
        let bits = granary_budget_exceeded(handle)
        if bits & CONTENT_BUDGET_TIME != 0 { return .time(time) }
        if bits & CONTENT_BUDGET_ACCOUNT != 0, let account { return .time(account.budget, acrossStores: true) }
        if bits & CONTENT_BUDGET_MEMORY != 0 { return .memory(memory) }
        return nil
    }

    /// SQLite heap charged now and at most, in bytes.
    var memoryUsed: Int64 { handle.map { granary_budget_memory_used($0) } ?? 0 }
    var memoryPeak: Int64 { handle.map { granary_budget_memory_peak($0) } ?? 0 }
}
