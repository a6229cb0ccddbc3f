import Foundation
import GranaryDigest
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// One run per user at a time: an exclusive `flock(2)` on `<root>/.granary/locks/<user>.lock`.
///
/// The kernel drops a `flock` when its holder exits, however it exits, so a crashed run
/// never leaves a stale lock. The holder records its pid, its command and when it took the
/// lock in the file (three lines: `1234`, `granary backup`, Unix seconds), so that a waiting
/// run can name it. Acquiring retries with backoff until the timeout (restic's habit).
///
/// The program says once what its runs are (`UserLock.configure(command:onWait:)`): the
/// command recorded for whoever waits next, and a callback told when an acquire has to wait,
/// so that a program at a terminal can say so at once (the core itself never prints).
///
/// ```swift
/// let lock = try UserLock.acquire(root: root, user: id, timeout: .seconds(30))
/// defer { lock.release() }
/// ```
public final class UserLock: @unchecked Sendable {
    /// Who holds a lock, as the holder recorded it; each part is `nil` when it was not recorded.
    public struct Holder: Sendable, Equatable {
        public var pid: Int32?
        /// The holder's command, such as `granary backup`.
        public var command: String?
        /// When the holder took the lock.
        public var since: Date?

        public init(pid: Int32? = nil, command: String? = nil, since: Date? = nil) {
            self.pid = pid
            self.command = command
            self.since = since
        }
    }

    /// An acquire that found the lock held and is about to wait for it.
    public struct Wait: Sendable {
        public let user: UserID
        public let path: String
        public let holder: Holder
        /// How long it will wait at most.
        public let timeout: Duration
    }

    private struct Configuration {
        var command = "granary"
        var onWait: (@Sendable (Wait) -> Void)?
    }

    private static let configuration = Mutex(Configuration())

    /// How many locks this process has taken. What a remote repository listed before a lock
    /// was taken is not given again after it (``ListingMemo``): whoever held it before may have
    /// written there, and a listing after the lock must show that.
    private static let taken = Mutex<UInt64>(0)
    static var acquisitions: UInt64 { taken.withLock { $0 } }

    /// Sets the command this process records as a lock's holder, and what to call when an
    /// acquire has to wait (once per acquire, before the first wait).
    public static func configure(command: String, onWait: (@Sendable (Wait) -> Void)?) {
        configuration.withLock { $0 = Configuration(command: command, onWait: onWait) }
    }

    private var fd: Int32
    /// The lock file.
    public let path: String
    /// Where the user's folder would be: a lock whose user has no folder when it is released (an
    /// id that never existed, a user retired) takes its file with it.
    private let userPath: String

    private init(fd: Int32, path: String, userPath: String) {
        self.fd = fd
        self.path = path
        self.userPath = userPath
    }

    deinit { release() }

    /// The lock file of a user: `<id>.lock`, or for an id too long to take a suffix (ids may have
    /// 255 bytes, a file name too), its first bytes and a hash of the whole id.
    public static func path(root: Root, user: UserID) -> String {
        let id = user.rawValue
        let name =
            id.utf8.count + 5 <= 255
            ? id
            : String(decoding: id.utf8.prefix(180), as: UTF8.self) + "-"
                + String(SHA256.hash(data: Array(id.utf8)).hex.prefix(32))
        return root.stateFolderPath + "/locks/" + name + ".lock"
    }

    /// Takes the user's lock, waiting up to `timeout` for another run to finish.
    public static func acquire(root: Root, user: UserID, timeout: Duration) throws(LockError) -> UserLock {
        try acquire(root: root, path: path(root: root, user: user), user: user, timeout: timeout)
    }

    /// Takes the lock file at `path` (in the state folder's `locks`), as ``acquire(root:user:timeout:)``
    /// does for a user's: `user` names it in a wait and in ``LockError/held(user:path:holder:)``,
    /// and its folder beneath the root decides whether the file goes with the lock's release.
    static func acquire(root: Root, path: String, user: UserID, timeout: Duration, kept: Bool = false)
        throws(LockError) -> UserLock
    {
        do {
            // The state folder must be granary's own (checked once per lock, which every command that
            // changes a user takes first).
            _ = try root.stateFolder()
        } catch {
            throw .cannotCreate(
                path: path, underlying: FileSystemError("open", path: root.stateFolderPath, code: EACCES))
        }
        do {
            try FileSystem.makeDirectory(root.stateFolderPath + "/locks", mode: 0o700)
        } catch {
            throw .cannotCreate(path: path, underlying: error)
        }
        let deadline = ContinuousClock.now + timeout
        while true {
            let fd = try lockFile(path: path, user: user, timeout: timeout, deadline: deadline)
            // A lock file is removed by its last holder when the user has no folder: whoever opened
            // it before that holds a lock on a file no longer there, and opens the new one.
            var held = stat()
            var named = stat()
            if fstat(fd, &held) == 0, lstat(path, &named) == 0, held.st_dev == named.st_dev,
                held.st_ino == named.st_ino
            {
                // We hold it: record who we are for whoever waits next.
                let command = configuration.withLock { $0.command }
                ftruncate(fd, 0)
                let oneLine = command.unicodeScalars.filter { $0.value >= 0x20 && $0 != "\u{7F}" }
                let text =
                    "\(getpid())\n\(String(String.UnicodeScalarView(oneLine)))\n\(Int64(Date().timeIntervalSince1970))\n"
                _ = text.withCString { pwrite(fd, $0, strlen($0), 0) }
                taken.withLock { $0 &+= 1 }
                // A kept lock's file stays (its "user folder" is the root, always there).
                return UserLock(fd: fd, path: path, userPath: kept ? root.path : root.path + "/" + user.rawValue)
            }
            close(fd)
        }
    }

    /// Opens the lock file and waits for its `flock` until `deadline`.
    private static func lockFile(path: String, user: UserID, timeout: Duration, deadline: ContinuousClock.Instant)
        throws(LockError) -> Int32
    {
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        if fd < 0 { throw .cannotCreate(path: path, underlying: FileSystemError("open", path: path)) }
        var delay = Duration.milliseconds(10)
        let onWait = configuration.withLock { $0.onWait }
        var told = false
        var attempts = 0
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            guard errno == EWOULDBLOCK || errno == EINTR else {
                let error = FileSystemError("lock", path: path)
                close(fd)
                throw .cannotCreate(path: path, underlying: error)
            }
            if Interruption.isRequested {
                close(fd)
                throw .interrupted(path: path)
            }
            if ContinuousClock.now >= deadline {
                let holder = Self.holder(fd)
                close(fd)
                throw .held(user: user.rawValue, path: path, holder: holder)
            }
            attempts += 1
            // The holder writes its record just after taking the lock: give it a few tries.
            if !told, let onWait, case let holder = Self.holder(fd), holder.pid != nil || attempts > 3 {
                told = true
                onWait(Wait(user: user, path: path, holder: holder, timeout: timeout))
            }
            let remaining = deadline - ContinuousClock.now
            Thread.sleep(forTimeInterval: min(delay, remaining).timeInterval)
            delay = min(delay * 2, .milliseconds(500))
        }
        return fd
    }

    /// The holder recorded in the lock file open at `fd` (a file written before pids were
    /// followed by a command and a time has only the pid).
    static func holder(_ fd: Int32) -> Holder {
        var buffer = [UInt8](repeating: 0, count: 512)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 511, 0) }
        guard n > 0 else { return Holder() }
        let lines = String(decoding: buffer[0..<n], as: UTF8.self).split(
            separator: "\n", omittingEmptySubsequences: false)
        var holder = Holder()
        holder.pid = lines.first.flatMap { Int32($0.trimmingCharacters(in: .whitespaces)) }
        if lines.count > 1, !lines[1].isEmpty { holder.command = String(lines[1]) }
        if lines.count > 2, let seconds = Int64(lines[2]) {
            holder.since = Date(timeIntervalSince1970: TimeInterval(seconds))
        }
        return holder
    }

    /// Lets the processes this one starts inherit the lock's descriptor (`posix_spawn` keeps a
    /// descriptor without close-on-exec): the lock is then held until the last of them has
    /// exited too, even when this process is killed first.
    func inheritedByChildren() {
        guard fd >= 0 else { return }
        _ = fcntl(fd, F_SETFD, 0)
    }

    /// Releases the lock (also done when the value goes away or the process exits).
    public func release() {
        guard fd >= 0 else { return }
        ftruncate(fd, 0)
        // No folder, no lock file: removed while still held, so a waiter sees it gone and opens anew.
        var folder = stat()
        if lstat(userPath, &folder) != 0, errno == ENOENT { unlink(path) }
        close(fd)
        fd = -1
    }
}

/// The user's lock could not be taken.
public enum LockError: GranaryError, Sendable {
    case held(user: String, path: String, holder: UserLock.Holder)
    /// Another `granary follow` follows the repository for the host (``FollowLock``).
    case followHeld(repository: String, host: String, holder: UserLock.Holder)
    case cannotCreate(path: String, underlying: FileSystemError)
    case interrupted(path: String)

    public var description: String {
        switch self {
        case .held(let user, _, let holder):
            return "another granary run holds the lock of \(user)" + LockError.naming(holder)
        case .followHeld(let repository, let host, let holder):
            return "another granary follow follows \(repository) as host \(host)" + LockError.naming(holder)
        case .cannotCreate(let path, let underlying): return "cannot take the lock \(path): \(underlying.description)"
        case .interrupted: return "interrupted while waiting for a lock"
        }
    }

}

extension LockError {
    /// ` (pid 1234, granary backup, since 10:02:03)`, or nothing when the holder recorded nothing.
    static func naming(_ holder: UserLock.Holder) -> String {
        var who: [String] = []
        if let pid = holder.pid { who.append("pid \(pid)") }
        if let command = holder.command { who.append(command) }
        if let since = holder.since { who.append("since " + LockError.clockTime(since)) }
        return who.isEmpty ? "" : " (" + who.joined(separator: ", ") + ")"
    }

    /// `HH:MM:SS` in local time, as a person at the machine reads a clock.
    public static func clockTime(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970)
        var parts = tm()
        localtime_r(&seconds, &parts)
        return String(format: "%02d:%02d:%02d", parts.tm_hour, parts.tm_min, parts.tm_sec)
    }
}
