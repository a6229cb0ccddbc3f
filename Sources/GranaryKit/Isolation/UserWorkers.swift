import CLinux
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One process per user: a run over several users does each user's work in a worker, a fresh
/// copy of granary (`/proc/self/exe`, re-executed with the run's own argument bytes and a word
/// that names the one user), so that whatever a user's content does to the process that reads it
/// ends that user's work only.
///
/// A user controls files granary reads and processes it talks to: the owner of a store can
/// truncate its `-shm` (or the store) while SQLite has it mapped, and touching a mapped page past
/// the end of a file kills the reader with SIGBUS; a bug that a hostile store reaches can trap
/// (a Swift runtime check) or abort. In one process any of those ends the whole run, and the users
/// after the one at fault are never backed up. In a worker they end the worker: the parent sees
/// how it ended (`Ending`), reports that user as failed (`WorkerFailed`), and goes on with the
/// others. This is how privilege-separated daemons (sshd, postfix) confine the work on input
/// they do not trust.
///
/// The parent and a worker speak over the worker's standard output, a line at a time:
/// `P<TAB>phase<TAB>done<TAB>total` for progress, `F<TAB>location<TAB>code<TAB>reason` for a
/// mirror that failed (``FailedMirror``: the parent passes it to the workers it starts next, which
/// do not try that mirror again), `M<TAB>…` for the new archive the parent sends to the mirrors
/// (``MirrorHandOver``: beside the next workers, so no mirror delays a local backup), then
/// `R<TAB>` and the user's result (one line of JSON, whatever
/// the caller makes of it) as the last line. A worker that ends without its
/// result line failed, whatever its exit status says. Its standard input is `/dev/null`, its
/// standard error the parent's (warnings, and what the Swift runtime prints on a trap).
///
/// Each worker runs in a process group of its own: a terminal's Ctrl-C reaches the parent only,
/// which passes the signal on to each running worker once (a second signal would end a worker at
/// once, without its clean-up), and starts no new one.
public enum UserWorkers {
    /// How a worker process ended.
    public enum Ending: Sendable, Equatable, CustomStringConvertible {
        /// It exited with this status.
        case exited(Int32)
        /// A signal ended it (SIGBUS, SIGSEGV, SIGABRT, SIGILL or SIGTRAP for a trap, SIGKILL…).
        case signaled(Int32)

        public var description: String {
            switch self {
            case .exited(let status): return "exited with status \(status)"
            case .signaled(let signal): return "was killed by \(UserWorkers.signalName(signal))"
            }
        }
    }

    /// One user's worker: its result line, when it sent one, and how it ended.
    public struct Reply: Sendable {
        public let user: UserID
        /// What followed `R<TAB>` on the worker's last line.
        public let result: String?
        public let ending: Ending
        /// The mirrors that failed in this worker (its `F` lines).
        public var failedMirrors: [FailedMirror] = []
        /// The archive the worker left for the parent to send to the mirrors (its `M` line).
        public var handedOver: MirrorHandOver?

        /// The result, when the worker sent one and then exited normally; else why the user failed.
        public func get() -> Swift.Result<String, WorkerFailed> {
            if let result, ending == .exited(0) { return .success(result) }
            return .failure(WorkerFailed(user: user.rawValue, ending: ending))
        }
    }

    /// The program a worker runs: this one.
    static let executable = "/proc/self/exe"

    /// Runs one worker per user, `jobs` at a time, each with the command line `arguments(user)`
    /// (without the program's name; words as `FolderName` makes them, so that bytes that are
    /// not UTF-8 reach the worker as they are). Progress lines go to `progress`. After SIGINT,
    /// SIGTERM or SIGHUP, no new worker starts: the users left get `Ending.signaled` with that
    /// signal and no result. In the order of `users`. `finished` is told of each worker's reply as
    /// it ends, before the next worker's `arguments` are asked for (with `jobs` 1).
    public static func run(
        users: [UserID], jobs: Int, arguments: @escaping @Sendable (UserID) -> [String],
        progress: (any BackupProgress)?, finished: (@Sendable (Reply) -> Void)? = nil
    ) -> [Reply] {
        let replies = Replies(count: users.count)
        let queue = OperationQueue()
        queue.maxConcurrentOperationCount = max(1, jobs)
        for (index, user) in users.enumerated() {
            queue.addOperation {
                guard !Interruption.isRequested else {
                    replies.set(index, Reply(user: user, result: nil, ending: .signaled(Interruption.signal)))
                    return
                }
                let reply = run(user: user, arguments: arguments(user), progress: progress)
                finished?(reply)
                replies.set(index, reply)
            }
        }
        queue.waitUntilAllOperationsAreFinished()
        return replies.all
    }

    /// Runs one worker to its end.
    static func run(user: UserID, arguments: [String], progress: (any BackupProgress)?) -> Reply {
        var pipe: [Int32] = [0, 0]
        guard granary_pipe_cloexec(&pipe) == 0 else {
            return Reply(user: user, result: nil, ending: .exited(-Int32(errno)))
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, pipe[1], 1)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // A group of its own (see above); the signals the parent handles start with their default
        // action and unblocked (the worker installs its own handlers).
        posix_spawnattr_setpgroup(&attributes, 0)
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGPIPE] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setflags(
            &attributes, Int16(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let words = [executable] + arguments
        let argv: [UnsafeMutablePointer<CChar>?] =
            words.map { word in
                let bytes = FolderName.encode(word) + [0]
                return bytes.withUnsafeBufferPointer { buffer in
                    strdup(UnsafeRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self))
                }
            } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, Glibc.environ)
        close(pipe[1])
        guard rc == 0 else {
            close(pipe[0])
            return Reply(user: user, result: nil, ending: .exited(Int32(0) - rc))
        }
        let (result, failed, handedOver) = read(pipe[0], from: pid, user: user, progress: progress)
        close(pipe[0])
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
        let ending: Ending = (raw & 0x7f) == 0 ? .exited((raw >> 8) & 0xff) : .signaled(raw & 0x7f)
        return Reply(user: user, result: result, ending: ending, failedMirrors: failed, handedOver: handedOver)
    }

    /// Reads the worker's lines until it closes its end: progress is passed on, the result kept.
    /// Once the parent is interrupted, the worker is sent the same signal, once.
    static func read(_ fd: Int32, from pid: pid_t, user: UserID, progress: (any BackupProgress)?) -> (
        String?, [FailedMirror], MirrorHandOver?
    ) {
        var pending: [UInt8] = []
        var result: String?
        var failed: [FailedMirror] = []
        var handedOver: MirrorHandOver?
        var forwarded = false
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            if !forwarded && Interruption.isRequested {
                forwarded = true
                kill(pid, Interruption.signal)
            }
            var poller = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, forwarded ? -1 : 100)
            if ready < 0 && errno != EINTR { break }
            if ready <= 0 { continue }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            pending.append(contentsOf: buffer[0..<n])
            while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                // Checked as bytes, before anything is made of it: a field holds no control
                // character at all (a tab only between fields). A Swift `Character` would not do:
                // "\r\n" is one grapheme, neither "\r" nor "\n".
                let hostile = pending[..<newline].contains(where: Self.isControl)
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                if hostile { continue }
                if line.hasPrefix("R\t") {
                    result = String(line.dropFirst(2))
                } else if line.hasPrefix("F\t"), let mirror = FailedMirror(line: line) {
                    failed.append(mirror)
                } else if line.hasPrefix("M\t"), let handOver = MirrorHandOver(line: line) {
                    handedOver = handOver
                } else if line.hasPrefix("P\t"), let progress {
                    let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
                    if fields.count == 4, let done = Int64(fields[2]), let total = Int64(fields[3]) {
                        progress.update(user: user.rawValue, phase: String(fields[1]), done: done, total: total)
                    }
                }
            }
            // A worker gets no say over the parent's memory: a line longer than any result is
            // not one (the worker failed).
            if pending.count > 64 << 20 { break }
        }
        return (result, failed, handedOver)
    }

    /// A control byte other than the tab that separates fields (C0, DEL). Bytes of UTF-8
    /// sequences (C1 controls are two bytes, 0xC2 0x80…) are checked by ``isControl(scalar:)``.
    static func isControl(_ byte: UInt8) -> Bool { (byte < 0x20 && byte != 0x09) || byte == 0x7F }

    /// A control character (C0, DEL, C1): none may be in a field of a worker's line.
    public static func isControl(scalar: Unicode.Scalar) -> Bool {
        scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value)
    }

    /// The worker's side: progress and the result, written on standard output.
    public final class Reporter: BackupProgress, @unchecked Sendable {
        private let lock = NSLock()
        private var lastSent = ContinuousClock.now - .seconds(1)

        public init() {}

        public func update(user: String, phase: String, done: Int64, total: Int64) {
            lock.lock()
            defer { lock.unlock() }
            // The parent draws at most five times a second; send no more than it can use.
            let now = ContinuousClock.now
            guard now - lastSent >= .milliseconds(100) || done == total else { return }
            lastSent = now
            Self.write("P\t\(phase)\t\(done)\t\(total)\n")
        }

        /// Tells the parent that `mirror` failed (before ``finish(_:)``).
        public func failed(_ mirror: FailedMirror) {
            lock.lock()
            defer { lock.unlock() }
            Self.write(mirror.line + "\n")
        }

        /// Hands the new archive to the parent, to send to the mirrors (before ``finish(_:)``).
        public func handOver(_ archive: MirrorHandOver) {
            lock.lock()
            defer { lock.unlock() }
            Self.write(archive.line + "\n")
        }

        /// Sends the result (one line: `result` must hold no newline), the worker's last words.
        public func finish(_ result: String) {
            lock.lock()
            defer { lock.unlock() }
            Self.write("R\t" + result + "\n")
        }

        private static func write(_ text: String) {
            var bytes = Array(text.utf8)[...]
            while !bytes.isEmpty {
                let n = bytes.withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { return }
                bytes = bytes.dropFirst(n)
            }
        }
    }

    /// `SIGBUS`, `SIGSEGV`…: the usual name of a signal.
    public static func signalName(_ signal: Int32) -> String {
        let names: [Int32: String] = [
            SIGBUS: "SIGBUS", SIGSEGV: "SIGSEGV", SIGABRT: "SIGABRT", SIGILL: "SIGILL", SIGTRAP: "SIGTRAP",
            SIGKILL: "SIGKILL", SIGTERM: "SIGTERM", SIGINT: "SIGINT", SIGHUP: "SIGHUP", SIGFPE: "SIGFPE",
            SIGXFSZ: "SIGXFSZ", SIGXCPU: "SIGXCPU", SIGPIPE: "SIGPIPE",
        ]
        return names[signal] ?? "signal \(signal)"
    }

    private final class Replies: @unchecked Sendable {
        private let lock = NSLock()
        private var items: [Reply?]
        init(count: Int) { items = Array(repeating: nil, count: count) }
        func set(_ index: Int, _ reply: Reply) {
            lock.lock()
            items[index] = reply
            lock.unlock()
        }
        var all: [Reply] {
            lock.lock()
            defer { lock.unlock() }
            return items.compactMap { $0 }
        }
    }
}

/// A mirror that failed in one worker of a run over several users (a timeout, a refused
/// connection, an error of the remote): the parent passes it to the workers it starts next, which
/// report the mirror as not tried ("failed earlier in this run") instead of trying it again, so a
/// dead mirror costs its time bound once per run, not once per user. `granary sync` catches up.
public struct FailedMirror: Sendable, Equatable {
    /// The mirror's location, as configured.
    public let location: String
    /// The exit status the failure stands for (74 or 75).
    public let code: Int32
    /// What went wrong, one line.
    public let reason: String

    public init(location: String, code: Int32, reason: String) {
        self.location = location
        self.code = code
        self.reason = reason
    }

    /// The line a worker sends, and the value of the worker option that passes it on: fields
    /// separated by tabs (tabs and newlines in them become spaces).
    public var line: String {
        // Scalar by scalar, not by `Character`: "\r\n" is one Character, equal to neither.
        func clean(_ text: String) -> String {
            var scalars = String.UnicodeScalarView()
            for scalar in text.unicodeScalars {
                scalars.append(UserWorkers.isControl(scalar: scalar) ? " " : scalar)
            }
            return String(scalars)
        }
        return "F\t" + clean(location) + "\t" + String(code) + "\t" + clean(reason)
    }

    /// Reads ``line``; nil for anything else.
    public init?(line: String) {
        let fields = line.split(separator: "\t", maxSplits: 3, omittingEmptySubsequences: false)
        guard fields.count == 4, fields[0] == "F", !fields[1].isEmpty, let code = Int32(fields[2]),
            !line.unicodeScalars.contains(where: { $0 != "\t" && UserWorkers.isControl(scalar: $0) })
        else { return nil }
        self.init(location: String(fields[1]), code: code, reason: String(fields[3]))
    }
}

/// The earlier failure of a mirror, as a worker learnt it from its parent (``FailedMirror``).
public struct MirrorFailedEarlier: GranaryError, Sendable {
    public let failure: FailedMirror
    public init(_ failure: FailedMirror) { self.failure = failure }
    public var description: String { failure.reason }
    /// Whether the failure was temporary (75: a timeout, a refused connection).
    public var isTemporary: Bool { failure.code == 75 }
}

/// A user's worker ended without its result: a crash-class fault (SIGBUS on a file the user
/// truncated under a mapping, a trap, an abort) or a kill. That user failed; the run went on.
public struct WorkerFailed: GranaryError, Sendable {
    public let user: String
    public let ending: UserWorkers.Ending

    public init(user: String, ending: UserWorkers.Ending) {
        self.user = user
        self.ending = ending
    }

    public var description: String {
        var text = "\(user): the process working on this user \(ending) before it finished"
        if ending == .signaled(SIGBUS) {
            text += " (a file of the user's was truncated while it was read: its owner's doing, or a damaged disk)"
        }
        return text + "; nothing of this run was published for \(user), the other users are not affected"
    }
}

/// The new archive a worker leaves for its parent to send to the mirrors: the parent sends it
/// beside the next users' backups (``BackupRun/MirrorSender``), so that a slow or dead mirror
/// delays no local backup.
public struct MirrorHandOver: Sendable, Equatable {
    /// The archive's file name in the user's folder of the repository.
    public let archive: String
    /// A local file with the archive's bytes: the published archive itself, or a second name of
    /// the uploaded temporary file (`removeAfter`).
    public let path: String
    /// Whether the parent removes `path` once sent.
    public let removeAfter: Bool

    public init(archive: String, path: String, removeAfter: Bool) {
        self.archive = archive
        self.path = path
        self.removeAfter = removeAfter
    }

    /// How the name of the file a worker hands over to be removed after sending begins
    /// (`FileSystem.temporaryName(for: "mirror")`).
    public static let temporaryPrefix = ".mirror" + FileSystem.temporaryMarker

    /// `M<TAB>0|1<TAB>archive<TAB>path` (the path last: it may hold any byte but a newline).
    public var line: String { "M\t" + (removeAfter ? "1" : "0") + "\t" + archive + "\t" + path }

    /// Reads ``line``; nil for anything else.
    public init?(line: String) {
        let fields = line.split(separator: "\t", maxSplits: 3, omittingEmptySubsequences: false)
        guard fields.count == 4, fields[0] == "M", fields[1] == "0" || fields[1] == "1", !fields[2].isEmpty,
            !fields[3].isEmpty, !fields[2].contains("/"), fields[2] != ".", fields[2] != "..",
            !line.unicodeScalars.contains(where: { $0 != "\t" && UserWorkers.isControl(scalar: $0) })
        else { return nil }
        self.init(archive: String(fields[2]), path: String(fields[3]), removeAfter: fields[1] == "1")
    }

    /// Whether the parent may act on ``path``: a worker's word is not trusted with a path (the
    /// parent removes a file given with `removeAfter`, and reads and sends the others). A file to
    /// remove must lie directly in `staging`, the run's own scratch folder for the user
    /// (``Repository/stagingFolder(for:)``), under the name of a temporary file made for a
    /// mirror (``temporaryPrefix``: for a local repository that folder also holds the user's
    /// published archives, which a worker's word must not remove); any other must be `published`,
    /// the archive's own file in the repository.
    public func isAccepted(staging: String?, published: String? = nil) -> Bool {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard path.hasPrefix("/"), !parts.contains(where: { $0 == "." || $0 == ".." }) else { return false }
        if removeAfter {
            guard let staging else { return false }
            let name = parts.last ?? ""
            return PathText.parent(path) == staging && name.hasPrefix(Self.temporaryPrefix)
                && name.count > Self.temporaryPrefix.count
        }
        return published.map { $0 == path } ?? (staging.map { PathText.parent(path) == $0 } ?? false)
    }
}
