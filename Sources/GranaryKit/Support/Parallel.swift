import Foundation

/// Two pieces of work at once, on two threads, for stages that read the same data (a check
/// and a hash of one snapshot). Both run to the end; the first error (of `a`, then `b`) is thrown.
enum Parallel {
    static func both<A: Sendable, B: Sendable>(
        _ a: @escaping @Sendable () throws -> A, _ b: @escaping @Sendable () throws -> B
    ) throws -> (A, B) {
        let second = ResultBox<B>()
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            second.result = Result { try b() }
            done.signal()
        }
        thread.stackSize = 1 << 20
        thread.start()
        let first = Result { try a() }
        done.wait()
        return (try first.get(), try second.result!.get())
    }
}

extension Parallel {
    /// `body(0)` … `body(count - 1)`, each once, on up to `width` threads at once (the caller's
    /// among them); their results in that order. For system calls that wait on the device, such
    /// as the `fsync`s of a group of files: issued together, they share the journal commit and
    /// the cache flush that each would otherwise wait for in turn.
    static func each<T: Sendable>(_ count: Int, width: Int, _ body: @escaping @Sendable (Int) -> T) -> [T] {
        guard count > 1, width > 1 else { return (0..<count).map(body) }
        let work = Indexed<T>(count)
        let helpers = min(width, count) - 1
        let done = DispatchSemaphore(value: 0)
        for _ in 0..<helpers {
            let thread = Thread {
                work.drain(body)
                done.signal()
            }
            thread.stackSize = 1 << 18
            thread.start()
        }
        work.drain(body)
        for _ in 0..<helpers { done.wait() }
        return work.taken()
    }
}

/// The indices of ``Parallel/each(_:width:_:)`` handed out one at a time, and the results; the
/// lock orders every access, the semaphore the last read.
private final class Indexed<T: Sendable>: @unchecked Sendable {
    private let lock = NSLock()
    private let count: Int
    private var next = 0
    private var results: [T?]

    init(_ count: Int) {
        self.count = count
        results = Array(repeating: nil, count: count)
    }

    func drain(_ body: (Int) -> T) {
        while true {
            let index: Int? = lock.withLock {
                guard next < count else { return nil }
                next += 1
                return next - 1
            }
            guard let index else { return }
            let result = body(index)
            lock.withLock { results[index] = result }
        }
    }

    func taken() -> [T] { lock.withLock { results.map { $0! } } }
}

/// A result handed from one thread to another; the semaphore in `Parallel.both` orders the accesses.
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
