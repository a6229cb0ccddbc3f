import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// SIGINT, SIGTERM and SIGHUP as a flag that long-running work polls.
///
/// The executable calls `installHandlers()`; the core checks `Interruption.check()` between
/// chunks and throws `InterruptedError`, so every `defer` and `catch` that removes a
/// temporary file runs before the process exits with 130 (129 after SIGHUP).
///
/// The handlers are installed without `SA_RESTART`: a system call blocked when the first
/// signal arrives (an `open(2)` of a FIFO, a `flock(2)`) returns `EINTR` instead of going back
/// to sleep, so the code that made it can check `isRequested` and give up.
public enum Interruption {
    private static let flag = Atomic<Int32>(0)
    /// How many ``heldBack(_:)`` sections are running: while one is, a request is not seen.
    private static let holding = Atomic<Int>(0)

    /// Whether SIGINT, SIGTERM or SIGHUP has arrived (and no ``heldBack(_:)`` section is running).
    public static var isRequested: Bool {
        holding.load(ordering: .acquiring) == 0 && flag.load(ordering: .relaxed) != 0
    }

    /// The signal that arrived, or 0.
    public static var signal: Int32 { flag.load(ordering: .relaxed) }

    /// Marks the run as interrupted (the signal handler calls this; tests may too).
    public static func request(_ signal: Int32 = SIGINT) { flag.store(signal, ordering: .relaxed) }

    /// Runs `body` with requests held back: a signal that arrives meanwhile is seen only when it
    /// returns. For a commit, which must end with every store switched and every owner resumed
    /// rather than stop half-way (SQLite's progress handler, which interrupts a statement on a
    /// request, holds back too). A second signal still ends the process at once, as a kill would:
    /// the commit's journal lets `granary recover` finish it.
    public static func heldBack<T>(_ body: () throws -> T) rethrows -> T {
        holding.add(1, ordering: .acquiringAndReleasing)
        defer { holding.subtract(1, ordering: .acquiringAndReleasing) }
        return try body()
    }

    /// Throws `InterruptedError` when a signal has arrived.
    public static func check() throws(InterruptedError) {
        if isRequested { throw InterruptedError(signal: signal) }
    }

    /// Unblocks SIGINT, SIGTERM and SIGHUP in the calling thread (call it first thing in `main`,
    /// so that every thread started later inherits the mask).
    ///
    /// The signal mask survives `fork`/`exec`: a parent that spawns us from a thread with those
    /// signals blocked (Foundation's `Process` on Linux does, and so do some supervisors) would
    /// otherwise leave us deaf to SIGTERM, and a backup would run to the end instead of cleaning up.
    public static func unblockSignals() {
        var set = sigset_t()
        sigemptyset(&set)
        sigaddset(&set, SIGINT)
        sigaddset(&set, SIGTERM)
        sigaddset(&set, SIGHUP)
        sigprocmask(SIG_UNBLOCK, &set, nil)
        // Past a file-size limit (ulimit -f), write(2) fails with EFBIG only when SIGXFSZ is
        // ignored; by default the signal kills us mid-write and leaves temporaries behind.
        Glibc.signal(SIGXFSZ, SIG_IGN)
    }

    /// Installs SIGINT, SIGTERM and SIGHUP handlers that only set the flag (without
    /// `SA_RESTART`). A second signal exits at once, with 128 + its number.
    public static func installHandlers() {
        unblockSignals()
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { signal in
            if Interruption.flag.load(ordering: .relaxed) != 0 { _exit(128 + signal) }
            Interruption.flag.store(signal, ordering: .relaxed)
        }
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        for signal in [SIGINT, SIGTERM, SIGHUP] { sigaction(signal, &action, nil) }
    }
}

/// The run was interrupted by a signal.
public struct InterruptedError: GranaryError, Sendable {
    public let signal: Int32
    public var description: String { "interrupted by \(InterruptedError.name(signal)); nothing was left half-written" }

    /// `SIGINT`, `SIGTERM` or `SIGHUP`.
    public static func name(_ signal: Int32) -> String {
        switch signal {
        case SIGTERM: return "SIGTERM"
        case SIGHUP: return "SIGHUP"
        default: return "SIGINT"
        }
    }
}
