import Foundation

/// Work at once on several threads.
enum Parallel {
    /// Two pieces of work at once, on two threads (the caller's and a helper with 1 MiB of
    /// stack), for stages that read the same data (a check and a hash of one snapshot): either may
    /// run on either thread, and both on the caller when no helper could be started. Both run to
    /// the end; the first error (of `a`, then `b`) is thrown.
    static func both<A: Sendable, B: Sendable>(
        _ a: @escaping @Sendable () throws -> A, _ b: @escaping @Sendable () throws -> B
    ) throws -> (A, B) {
        let results = Pool(width: 2, stackSize: 1 << 20).each(2) { index -> Both<A, B> in
            index == 0 ? .first(Result { try a() }) : .second(Result { try b() })
        }
        guard case .first(let first) = results[0], case .second(let second) = results[1] else {
            preconditionFailure("Parallel.both: results out of order")
        }
        return (try first.get(), try second.get())
    }

    /// What ``both(_:_:)``'s two pieces gave, in one type for ``Pool/each(_:_:)``.
    private enum Both<A: Sendable, B: Sendable>: Sendable {
        case first(Result<A, any Error>)
        case second(Result<B, any Error>)
    }
}

extension Parallel {
    /// Threads kept for ``each(_:_:)``: `body(0)` … `body(count - 1)`, each once, on up to
    /// `width` threads at once (the caller's among them), their results in that order. For system
    /// calls that wait on the device, such as the `fsync`s of a group of files: issued together,
    /// they share the journal commit and the cache flush that each would otherwise wait for in
    /// turn. The helpers are started when first needed and kept, parked, until the pool is let
    /// go: a follower publishes groups ten times a second, and a thread started for each call
    /// cost more than the syncs it issued. The caller takes indices too and waits only for those
    /// a helper took: a helper that never started (a thread the system would not make) holds
    /// nothing back. One call at a time; a second caller waits for the first.
    final class Pool: @unchecked Sendable {
        let width: Int
        let shared: PoolShared
        /// Tests: false runs every body on the caller, as if no helper could be started.
        var startsHelpers = true

        /// `stackSize`: each helper's (256 KiB: enough for a system call and its error).
        init(width: Int, stackSize: Int = 1 << 18) {
            self.width = max(1, width)
            shared = PoolShared(stackSize: stackSize)
        }

        deinit { shared.stop() }

        func each<T: Sendable>(_ count: Int, _ body: @escaping @Sendable (Int) -> T) -> [T] {
            guard count > 1, width > 1 else { return (0..<count).map(body) }
            let results = PoolResults<T>(count)
            let shared = self.shared
            let job = PoolJob(count) { index in
                let result = body(index)
                shared.condition.withLock { results.values[index] = result }
            }
            shared.run(job, helpers: startsHelpers ? min(width, count) - 1 : 0)
            return shared.condition.withLock { results.values.map { $0! } }
        }
    }
}

/// What a ``Parallel/Pool``'s threads share; the condition's lock orders every access.
final class PoolShared: @unchecked Sendable {
    let condition = NSCondition()
    let stackSize: Int
    private var job: PoolJob?
    private var stopped = false
    /// Helpers asked for, and those whose loop is running (tests).
    private var started = 0
    private(set) var running = 0

    var runningNow: Int { condition.withLock { running } }

    init(stackSize: Int) { self.stackSize = stackSize }

    func stop() {
        condition.withLock {
            stopped = true
            condition.broadcast()
        }
    }

    func run(_ job: PoolJob, helpers: Int) {
        condition.lock()
        while self.job != nil { condition.wait() }
        self.job = job
        while started < helpers {
            started += 1
            let thread = Thread { [self] in helperLoop() }
            thread.stackSize = stackSize
            thread.start()
        }
        condition.broadcast()
        // The caller takes indices as the helpers do, then waits for those they took.
        while job.next < job.count { runNext(of: job) }
        while job.finished < job.count { condition.wait() }
        self.job = nil
        condition.broadcast()
        condition.unlock()
    }

    private func helperLoop() {
        condition.lock()
        running += 1
        while true {
            while !stopped && (job.map { $0.next >= $0.count } ?? true) { condition.wait() }
            if stopped { break }
            runNext(of: job!)
        }
        running -= 1
        condition.unlock()
    }

    /// Takes `job`'s next index and runs its body outside the lock (held when called, and again
    /// on return); the last to finish wakes the caller.
    private func runNext(of job: PoolJob) {
        let index = job.next
        job.next += 1
        condition.unlock()
        job.body(index)
        condition.lock()
        job.finished += 1
        if job.finished == job.count { condition.broadcast() }
    }
}

/// One call of ``Parallel/Pool/each(_:_:)``: the next index to hand out, how many are done.
final class PoolJob: @unchecked Sendable {
    let count: Int
    var next = 0
    var finished = 0
    let body: (Int) -> Void
    init(_ count: Int, _ body: @escaping (Int) -> Void) {
        self.count = count
        self.body = body
    }
}

/// The results of one call, written under the pool's lock.
private final class PoolResults<T>: @unchecked Sendable {
    var values: [T?]
    init(_ count: Int) { values = Array(repeating: nil, count: count) }
}

/// A result handed from one thread to another; the semaphore of a ``Pending`` orders the accesses.
private final class ResultBox<T>: @unchecked Sendable {
    var result: Result<T, any Error>?
}

/// Work started now on a thread of its own, its result taken later: ``wait()`` blocks until it
/// is there (any number of times, from any thread). Nothing waits for it otherwise: work whose
/// result nobody takes finishes on its own.
final class Pending<T: Sendable>: @unchecked Sendable {
    private let box = ResultBox<T>()
    private let done = DispatchSemaphore(value: 0)

    init(_ body: @escaping @Sendable () throws -> T) {
        let box = self.box, done = self.done
        let work = Work(body)
        let thread = Thread {
            box.result = Result { try work.run() }
            // (What the work held, such as a connection, is let go before the waiter goes on.)
            done.signal()
        }
        thread.stackSize = 1 << 20
        thread.start()
    }

    /// The work's result, or what it threw.
    func wait() throws -> T {
        done.wait()
        // Each waiter passes the signal on to the next one.
        defer { done.signal() }
        return try box.result!.get()
    }
}

/// The work of a ``Pending``, let go once it has run.
private final class Work<T>: @unchecked Sendable {
    private var body: (@Sendable () throws -> T)?
    init(_ body: @escaping @Sendable () throws -> T) { self.body = body }
    /// Runs the work once (its thread alone calls this), then drops it.
    func run() throws -> T {
        let body = self.body!
        self.body = nil
        return try body()
    }
}

/// A value handed to another thread as it is, for work whose accesses a join orders: a
/// connection that a ``Pending`` uses on its thread while the caller waits for it.
struct UncheckedSendable<T>: @unchecked Sendable {
    let value: T
    init(_ value: T) { self.value = value }
}
