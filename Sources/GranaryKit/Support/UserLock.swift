import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One run per user at a time: an exclusive `flock(2)` on `<root>/.granary/locks/<user>.lock`.
///
/// The kernel drops a `flock` when its holder exits, however it exits, so a crashed run
/// never leaves a stale lock. The holder writes its pid into the file so that a waiting
/// run can name it. Acquiring retries with backoff until the timeout (restic's habit).
///
/// ```swift
/// let lock = try UserLock.acquire(root: root, user: id, timeout: .seconds(30))
/// defer { lock.release() }
/// ```
public final class UserLock: @unchecked Sendable {
    private var fd: Int32
    /// The lock file.
    public let path: String

    private init(fd: Int32, path: String) {
        self.fd = fd
        self.path = path
    }

    deinit { release() }

    /// The lock file of a user: `<id>.lock`, or for an id too long to take a suffix (ids may have
    /// 255 bytes, a file name too), its first bytes and a hash of the whole id.
    public static func path(root: Root, user: UserID) -> String {
        let id = user.rawValue
        let name = id.utf8.count + 5 <= 255 ? id : String(decoding: id.utf8.prefix(180), as: UTF8.self) + "-" + String(SHA256.hash(data: Array(id.utf8)).hex.prefix(32))
        return root.stateFolderPath + "/locks/" + name + ".lock"
    }

    /// Takes the user's lock, waiting up to `timeout` for another run to finish.
    public static func acquire(root: Root, user: UserID, timeout: Duration) throws(LockError) -> UserLock {
        let path = path(root: root, user: user)
        do {
            // The state folder must be granary's own (checked once per lock, which every command that
            // changes a user takes first).
            _ = try root.stateFolder()
        } catch {
            throw .cannotCreate(path: path, underlying: FileSystemError("open", path: root.stateFolderPath, code: EACCES))
        }
        do {
            try FileSystem.makeDirectory(root.stateFolderPath + "/locks", mode: 0o700)
        } catch {
            throw .cannotCreate(path: path, underlying: error)
        }
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        if fd < 0 { throw .cannotCreate(path: path, underlying: FileSystemError("open", path: path)) }
        let deadline = ContinuousClock.now + timeout
        var delay = Duration.milliseconds(10)
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
                let holder = holderPID(fd)
                close(fd)
                throw .held(user: user.rawValue, path: path, pid: holder)
            }
            let remaining = deadline - ContinuousClock.now
            Thread.sleep(forTimeInterval: min(delay, remaining).timeInterval)
            delay = min(delay * 2, .milliseconds(500))
        }
        // We hold it: record our pid for whoever waits next.
        ftruncate(fd, 0)
        let text = "\(getpid())\n"
        _ = text.withCString { pwrite(fd, $0, strlen($0), 0) }
        return UserLock(fd: fd, path: path)
    }

    private static func holderPID(_ fd: Int32) -> Int32? {
        var buffer = [UInt8](repeating: 0, count: 32)
        let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 31, 0) }
        guard n > 0 else { return nil }
        return Int32(String(decoding: buffer[0..<n], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// Releases the lock (also done when the value goes away or the process exits).
    public func release() {
        guard fd >= 0 else { return }
        ftruncate(fd, 0)
        close(fd)
        fd = -1
    }
}

/// The user's lock could not be taken.
public enum LockError: GranaryError, Sendable {
    case held(user: String, path: String, pid: Int32?)
    case cannotCreate(path: String, underlying: FileSystemError)
    case interrupted(path: String)

    public var description: String {
        switch self {
        case .held(let user, _, let pid):
            return "another granary run holds the lock of \(user)" + (pid.map { " (pid \($0))" } ?? "")
        case .cannotCreate(let path, let underlying): return "cannot take the lock \(path): \(underlying.description)"
        case .interrupted: return "interrupted while waiting for a lock"
        }
    }

    public var status: ExitStatus {
        switch self {
        case .held: return .temporaryFailure
        case .cannotCreate(_, let underlying): return underlying.status
        case .interrupted: return .interrupted
        }
    }

    public var hint: String? {
        switch self {
        case .held: return "wait for it to finish, or pass --lock-timeout SECONDS to wait longer"
        case .cannotCreate(_, let underlying): return underlying.hint
        case .interrupted: return nil
        }
    }
}
