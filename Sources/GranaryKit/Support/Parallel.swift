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
