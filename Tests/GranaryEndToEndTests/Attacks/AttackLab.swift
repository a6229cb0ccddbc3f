import Foundation
import GranaryDigest
import GranaryKit
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The attack suite: granary, run as root, against a hostile user who controls their own folder
/// (see docs/security.md). Every case checks that nothing outside the attacker's own folder was
/// read into their archives or their folder, written, moved, chowned or deleted: the victim's
/// folder, a root-only canary and a root-owned stand-in for /etc are fingerprinted (names, types,
/// owners, modes, link counts, contents) before and after, and the attacker's archives are
/// extracted with stock tar and searched for the others' bytes.
///
/// It needs root (it creates users with useradd and runs their processes with setpriv), as CI
/// has; elsewhere it is skipped with that reason.
@Suite(
    "attacks on the trust boundary", .serialized,
    .enabled(
        if: AttackLab.canRun,
        "the attack suite needs root (CI runs make test as root): it creates users and runs their processes")
)
struct AttackTests {}

enum AttackLab {
    static let canRun = geteuid() == 0

    /// What granary's exit codes may be (granary(1), EXIT STATUS).
    static let documentedCodes: Set<Int32> = [0, 1, 64, 65, 66, 73, 74, 75, 130]

    /// The attack helpers (Tests/Fixtures/attacks).
    static let fixtures: String = {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
            .appendingPathComponent("Fixtures/attacks").path
    }()

    static let python: String =
        FileManager.default.isExecutableFile(atPath: "/usr/bin/python3") ? "/usr/bin/python3" : "python3"
}

enum LabError: Error, CustomStringConvertible {
    case setup(String)
    var description: String {
        switch self {
        case .setup(let text): return text
        }
    }
}

/// An unprivileged account the attack tests act as, made once (useradd -M, no login shell).
struct LabUser: Sendable {
    let name: String
    let uid: uid_t
    let gid: gid_t

    static func ensure(_ name: String) throws -> LabUser {
        if let user = lookup(name) { return user }
        let result = try GranaryProcess.runExecutable("/usr/sbin/useradd", ["-M", "-s", "/usr/sbin/nologin", name])
        guard let user = lookup(name) else {
            throw LabError.setup("useradd \(name) failed (\(result.status)): \(result.stderr)")
        }
        return user
    }

    static func lookup(_ name: String) -> LabUser? {
        guard let entry = getpwnam(name) else { return nil }
        return LabUser(name: name, uid: entry.pointee.pw_uid, gid: entry.pointee.pw_gid)
    }

    /// setpriv's arguments that run a command as this user, with no supplementary groups.
    var setpriv: [String] { ["--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "--"] }
}

/// How a run of granary (or a helper) ended.
struct Outcome: CustomStringConvertible {
    var status: Int32
    /// The signal that ended it, when one did.
    var signal: Int32?
    var stdout: String
    var stderr: String
    /// It was still running at its deadline and was killed.
    var timedOut: Bool
    var seconds: Double

    var description: String {
        let how =
            timedOut ? "hung (killed at the deadline)" : signal.map { "killed by signal \($0)" } ?? "exit \(status)"
        return
            "\(how) after \(String(format: "%.2f", seconds)) s; stdout: \(stdout.suffix(600)) stderr: \(stderr.suffix(1200))"
    }
}

/// A started process whose output is collected as it comes.
final class Spawned: @unchecked Sendable {
    let process = Process()
    private let lock = NSLock()
    private var out = Data()
    private var err = Data()
    private var readers = DispatchGroup()
    private let started = ContinuousClock.now

    init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("GRANARY_") }
        env["NO_COLOR"] = "1"
        env.merge(environment ?? [:]) { $1 }
        process.environment = env
        let outPipe = Pipe()
        let errPipe = Pipe()
        process.standardOutput = outPipe
        process.standardError = errPipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        for (pipe, isOut) in [(outPipe, true), (errPipe, false)] {
            readers.enter()
            let handle = pipe.fileHandleForReading
            Thread.detachNewThread { [self] in
                while true {
                    let chunk = handle.availableData
                    if chunk.isEmpty { break }
                    lock.lock()
                    if isOut { out.append(chunk) } else { err.append(chunk) }
                    lock.unlock()
                }
                readers.leave()
            }
        }
    }

    var pid: Int32 { process.processIdentifier }
    var stdout: String { lock.withLock { String(decoding: out, as: UTF8.self) } }
    var stderr: String { lock.withLock { String(decoding: err, as: UTF8.self) } }

    /// Waits until stdout has a line starting with `prefix`; false at the deadline or when it exited first.
    @discardableResult
    func waitForLine(_ prefix: String, timeout: Double = 10) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if stdout.split(separator: "\n").contains(where: { $0.hasPrefix(prefix) }) { return true }
            if !process.isRunning {
                // Exited: what it wrote may still be in the pipe, until the readers reach its end.
                _ = readers.wait(timeout: .now() + max(0, deadline.timeIntervalSinceNow))
                return stdout.split(separator: "\n").contains(where: { $0.hasPrefix(prefix) })
            }
            usleep(2_000)
        }
        return false
    }

    /// Whether the process is stopped (state T in /proc/PID/stat).
    var isStopped: Bool {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = text.lastIndex(of: ")")
        else { return false }
        let state = text[text.index(close, offsetBy: 2)]
        return state == "T" || state == "t"
    }

    /// Waits for the end (killing it with SIGKILL at the deadline) and returns how it ended.
    func wait(timeout: Double) -> Outcome {
        let deadline = Date().addingTimeInterval(timeout)
        var timedOut = false
        while process.isRunning {
            if Date() >= deadline {
                timedOut = true
                kill(pid, SIGKILL)
                break
            }
            usleep(2_000)
        }
        process.waitUntilExit()
        readers.wait()
        let elapsed = (ContinuousClock.now - started).components
        let signaled = process.terminationReason == .uncaughtSignal
        return Outcome(
            status: signaled ? 128 + process.terminationStatus : process.terminationStatus,
            signal: signaled ? process.terminationStatus : nil, stdout: stdout, stderr: stderr, timedOut: timedOut,
            seconds: Double(elapsed.seconds) + Double(elapsed.attoseconds) / 1e18)
    }

    /// Asks it to stop (SIGTERM) and waits.
    @discardableResult
    func stop(timeout: Double = 10) -> Outcome {
        if process.isRunning { kill(pid, SIGTERM) }
        return wait(timeout: timeout)
    }

    deinit { if process.isRunning { kill(pid, SIGKILL) } }
}

/// One test's world: a root folder with a victim and an attacker, a repository, a root-only
/// canary and a root-owned stand-in for /etc, all under a fresh folder.
///
/// Both users have the same layout, so that a link from the attacker's folder into the victim's
/// lands on a file or folder of the same name: `Local.sqlite` (WAL) with Core Data external data
/// (`.Local_SUPPORT/_EXTERNAL_DATA/photo-1`, `photo-2`), `Data/App.sqlite` (rollback journal) and
/// `notes.txt`. Every file carries its owner's marker; the attacker's must never hold another's.
final class Lab {
    let temporary: TemporaryFolder
    let victim: LabUser
    let attacker: LabUser
    /// Random, per lab: the bytes that must never reach the attacker.
    let victimMarker = "VICTIM-SECRET-" + UUID().uuidString
    let attachmentMarker = "VICTIM-ATTACHMENT-" + UUID().uuidString
    let canaryMarker = "ROOT-CANARY-" + UUID().uuidString
    let etcMarker = "ETC-STAND-IN-" + UUID().uuidString
    let attackerMarker = "ATTACKER-OWN-" + UUID().uuidString

    var base: String { temporary.path }
    var root: String { base + "/root" }
    var repo: String { initializedRepository(base + "/repo") }
    /// A root-owned folder standing in for /etc: nothing in it may change.
    var etc: String { base + "/etc" }
    /// A root-only folder (0700) with a SQLite canary and a text canary.
    var secret: String { base + "/secret" }
    var canaryStore: String { secret + "/canary.sqlite" }
    var canaryFile: String { secret + "/canary.txt" }
    var tools: String { base + "/tools" }
    var victimHome: String { root + "/victim" }
    var attackerHome: String { root + "/attacker" }

    init() throws {
        victim = try LabUser.ensure("granary-victim")
        attacker = try LabUser.ensure("granary-attacker")
        temporary = TemporaryFolder("granary-attack")
        chmod(base, 0o755)
        try Self.makeFolder(root, mode: 0o755)
        try Self.makeFolder(etc, mode: 0o755)
        try Self.write(etc + "/passwd", "root:x:0:0:\(etcMarker)\n", mode: 0o644)
        try Self.write(etc + "/shadow", "root:\(etcMarker):19000::::::\n", mode: 0o600)
        try Self.makeFolder(etc + "/cron.d", mode: 0o755)
        try Self.write(etc + "/cron.d/job", "# \(etcMarker)\n", mode: 0o644)
        try Self.makeFolder(secret, mode: 0o700)
        try Self.makeStore(canaryStore, wal: false, marker: canaryMarker)
        chmod(canaryStore, 0o600)
        try Self.write(canaryFile, "\(canaryMarker)\n", mode: 0o600)
        try Self.makeFolder(tools, mode: 0o755)
        for name in FileSystem.contents(of: AttackLab.fixtures) where name.hasSuffix(".py") {
            try FileManager.default.copyItem(atPath: AttackLab.fixtures + "/" + name, toPath: tools + "/" + name)
            chmod(tools + "/" + name, 0o644)
        }
        try makeHome(victimHome, owner: victim, marker: victimMarker, attachment: attachmentMarker, mode: 0o700)
        try makeHome(attackerHome, owner: attacker, marker: attackerMarker, attachment: attackerMarker, mode: 0o755)
    }

    // MARK: Building

    static func makeFolder(_ path: String, mode: mode_t) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        chmod(path, mode)
    }

    static func write(_ path: String, _ text: String, mode: mode_t) throws {
        try Data(text.utf8).write(to: URL(fileURLWithPath: path))
        chmod(path, mode)
    }

    /// A store with a `notes` table holding `marker` (as text, so its bytes are in the file).
    static func makeStore(_ path: String, wal: Bool, marker: String, rows: Int = 40) throws {
        let db = try Database(path: path, mode: .create)
        try db.execute(wal ? "PRAGMA journal_mode=WAL" : "PRAGMA journal_mode=DELETE")
        try db.execute("CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT)")
        try db.execute("BEGIN")
        for row in 0..<rows {
            try db.execute(
                "INSERT INTO notes(body) VALUES ('\(marker) row \(row) \(String(repeating: "x", count: 200))')")
        }
        try db.execute("COMMIT")
    }

    func makeHome(_ home: String, owner: LabUser, marker: String, attachment: String, mode: mode_t) throws {
        try Self.makeFolder(home, mode: mode)
        try Self.makeStore(home + "/Local.sqlite", wal: true, marker: marker)
        try Self.makeFolder(home + "/.Local_SUPPORT/_EXTERNAL_DATA", mode: 0o755)
        try Self.write(home + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-1", "\(attachment) photo one\n", mode: 0o600)
        try Self.write(home + "/.Local_SUPPORT/_EXTERNAL_DATA/photo-2", "\(attachment) photo two\n", mode: 0o644)
        try Self.makeFolder(home + "/Data", mode: 0o750)
        try Self.makeStore(home + "/Data/App.sqlite", wal: false, marker: marker)
        try Self.write(home + "/notes.txt", "\(marker) notes\n", mode: 0o600)
        chmod(home + "/Local.sqlite", 0o640)
        chmod(home + "/Data/App.sqlite", 0o600)
        Self.chownTree(home, to: owner)
    }

    /// lchown of everything under `path` (links themselves, never followed).
    static func chownTree(_ path: String, to user: LabUser) {
        lchown(path, user.uid, user.gid)
        guard let info = FileSystem.status(path), info.st_mode & S_IFMT == S_IFDIR else { return }
        for name in FileSystem.contents(of: path) { chownTree(path + "/" + name, to: user) }
    }

    /// A symbolic link at `path` (owned by `owner`) pointing at `target`, replacing what is there.
    func symlink(_ path: String, to target: String, owner: LabUser? = nil) {
        FileSystem.removeTree(path)
        Glibc.symlink(target, path)
        let who = owner ?? attacker
        lchown(path, who.uid, who.gid)
    }

    /// Swaps two names atomically (renameat2 RENAME_EXCHANGE), as root.
    static func exchange(_ a: String, _ b: String) throws {
        let from = try Folder<GranaryOwned>.open(path: (a as NSString).deletingLastPathComponent)
        let to = try Folder<GranaryOwned>.open(path: (b as NSString).deletingLastPathComponent)
        try from.renameAsGranary(
            (a as NSString).lastPathComponent, to: to, as: (b as NSString).lastPathComponent, .exchange)
    }

    /// A FIFO, a character device (1,5: what /dev/zero is) or a link to /dev/zero at `path`, owned
    /// by the attacker. Devices are made by root, standing in for a host where the user can get one
    /// into their folder (a bind mount, an old backup restored with tar -p…).
    enum Special: String, CaseIterable, CustomStringConvertible {
        case fifo, device, zeroLink
        var description: String { rawValue }
    }

    func makeSpecial(_ kind: Special, at path: String) throws {
        FileSystem.removeTree(path)
        switch kind {
        case .fifo:
            guard mkfifo(path, 0o644) == 0 else { throw LabError.setup("mkfifo \(path): \(errno)") }
        case .device:
            guard mknod(path, S_IFCHR | 0o666, dev_t((1 << 8) | 5)) == 0 else {
                throw LabError.setup("mknod \(path): \(errno)")
            }
        case .zeroLink:
            Glibc.symlink("/dev/zero", path)
        }
        lchown(path, attacker.uid, attacker.gid)
    }

    // MARK: Running

    /// Runs granary (root) on this lab's root and repository; killed and reported as hung at `timeout`.
    func granary(_ arguments: [String], repo: String? = nil, environment: [String: String] = [:], timeout: Double = 30)
        throws -> Outcome
    {
        try start(arguments, repo: repo, environment: environment).wait(timeout: timeout)
    }

    func start(_ arguments: [String], repo: String? = nil, environment: [String: String] = [:]) throws -> Spawned {
        try Spawned(
            GranaryProcess.binDirectory + "/granary", arguments + ["--root", root, "--repo", repo ?? self.repo],
            environment: environment)
    }

    /// Starts an attack helper (Tests/Fixtures/attacks/SCRIPT) as `user` and waits for its "ready".
    func helper(_ script: String, _ arguments: [String], as user: LabUser? = nil) throws -> Spawned {
        let who = user ?? attacker
        let spawned = try Spawned(
            "/usr/bin/setpriv", who.setpriv + [AttackLab.python, tools + "/" + script] + arguments)
        guard spawned.waitForLine("ready") else {
            let outcome = spawned.stop()
            throw LabError.setup("\(script) did not get ready: \(outcome)")
        }
        return spawned
    }

    /// Runs a command as `user` to its end.
    @discardableResult
    func run(as user: LabUser, _ command: [String]) throws -> Outcome {
        try Spawned("/usr/bin/setpriv", user.setpriv + command).wait(timeout: 30)
    }

    // MARK: Watching

    /// Names, types, owners, modes, link counts and contents (SHA-256; a link's target) of
    /// everything under `path`, one line each, never following a link and never opening anything
    /// but regular files.
    static func fingerprint(_ path: String) -> [String] {
        var lines: [String] = []
        func walk(_ full: String, _ relative: String) {
            guard let info = FileSystem.status(full) else { return }
            let type: String
            var content = ""
            switch info.st_mode & S_IFMT {
            case S_IFDIR: type = "dir"
            case S_IFREG:
                type = "file"
                content = SHA256.hash(data: FileManager.default.contents(atPath: full) ?? Data()).hex
            case S_IFLNK:
                type = "link"
                content = (try? FileManager.default.destinationOfSymbolicLink(atPath: full)) ?? "?"
            case S_IFIFO: type = "fifo"
            case S_IFSOCK: type = "socket"
            default: type = "device"
            }
            lines.append(
                "\(relative.isEmpty ? "." : relative) \(type) uid=\(info.st_uid) gid=\(info.st_gid) mode=\(String(info.st_mode & 0o7777, radix: 8)) links=\(info.st_nlink) \(content)"
            )
            if type == "dir" {
                for name in FileSystem.contents(of: full) {
                    walk(full + "/" + name, relative.isEmpty ? name : relative + "/" + name)
                }
            }
        }
        walk(path, "")
        return lines
    }

    /// What must not change: the victim's folder, the /etc stand-in and the root-only canary.
    struct Watch {
        var victim: [String]
        var etc: [String]
        var secret: [String]
    }

    func watch() -> Watch {
        Watch(victim: Self.fingerprint(victimHome), etc: Self.fingerprint(etc), secret: Self.fingerprint(secret))
    }

    /// The markers that must never appear in the attacker's archives or folder.
    var foreignMarkers: [String] { [victimMarker, attachmentMarker, canaryMarker, etcMarker] }

    private var scannedArchives: Set<String> = []

    /// The attacker's archives in the repository (backups and safety archives).
    func attackerArchives(in repository: String? = nil) -> [String] {
        let folder = (repository ?? repo) + "/attacker"
        return FileSystem.contents(of: folder).filter { $0.hasSuffix(".tar.zst") || $0.hasSuffix(".tar") }.map {
            folder + "/" + $0
        }
    }

    /// Every foreign marker found in a regular file under `path` ("file: marker").
    func foreignBytes(under path: String) -> [String] {
        var found: [String] = []
        func walk(_ full: String) {
            guard let info = FileSystem.status(full) else { return }
            switch info.st_mode & S_IFMT {
            case S_IFDIR: for name in FileSystem.contents(of: full) { walk(full + "/" + name) }
            case S_IFREG:
                guard let data = FileManager.default.contents(atPath: full) else { return }
                for marker in foreignMarkers where data.range(of: Data(marker.utf8)) != nil {
                    found.append("\(full): \(marker)")
                }
            default: break
            }
        }
        walk(path)
        return found
    }

    /// Extracts each attacker archive not looked at yet (stock tar) and returns the foreign bytes in them.
    func foreignBytesInArchives(in repository: String? = nil) throws -> [String] {
        var found: [String] = []
        for archive in attackerArchives(in: repository) where !scannedArchives.contains(archive) {
            scannedArchives.insert(archive)
            let into = base + "/extracted-\(scannedArchives.count)"
            try FileSystem.makeDirectory(into)
            let result = try GranaryProcess.runExecutable("/usr/bin/tar", ["-xf", archive, "-C", into])
            if result.status != 0 { found.append("\(archive): stock tar cannot extract it: \(result.stderr)") }
            found += foreignBytes(under: into).map { "\(archive) → \($0)" }
            FileSystem.removeTree(into)
        }
        return found
    }

    /// Checks that nothing outside the attacker's folder changed since `before`, and that neither
    /// the attacker's archives nor (unless `folderToo` is false) their folder hold anyone else's bytes.
    ///
    /// With `linkCounts` false, a file's link count may change: removing a hard link that root
    /// made in the attacker's folder to someone else's file takes nothing from that file.
    func expectContained(
        since before: Watch, _ context: String, folderToo: Bool = true, linkCounts: Bool = true,
        sourceLocation: SourceLocation = #_sourceLocation
    ) throws {
        let after = watch()
        let strip = { (lines: [String]) -> Set<String> in
            Set(
                linkCounts
                    ? lines
                    : lines.map { $0.replacingOccurrences(of: #" links=\d+ "#, with: " ", options: .regularExpression) }
            )
        }
        for (name, old, new) in [
            ("the victim's folder", before.victim, after.victim), ("the /etc stand-in", before.etc, after.etc),
            ("the root-only canary", before.secret, after.secret),
        ] {
            let changed = strip(old).symmetricDifference(strip(new)).sorted()
            #expect(
                changed.isEmpty, "\(context): \(name) changed: \(changed.prefix(6).joined(separator: " | "))",
                sourceLocation: sourceLocation)
        }
        let leaked = try foreignBytesInArchives()
        #expect(
            leaked.isEmpty, "\(context): the attacker's archives hold others' bytes: \(leaked.prefix(4))",
            sourceLocation: sourceLocation)
        if folderToo {
            let inFolder = foreignBytes(under: attackerHome)
            #expect(
                inFolder.isEmpty, "\(context): the attacker's folder holds others' bytes: \(inFolder.prefix(4))",
                sourceLocation: sourceLocation)
        }
    }

    /// A run ended in time with a documented exit code.
    static func expectDocumented(
        _ outcome: Outcome, _ context: String, sourceLocation: SourceLocation = #_sourceLocation
    ) {
        #expect(!outcome.timedOut, "\(context): \(outcome)", sourceLocation: sourceLocation)
        #expect(outcome.signal == nil, "\(context): \(outcome)", sourceLocation: sourceLocation)
        #expect(
            AttackLab.documentedCodes.contains(outcome.status), "\(context): undocumented exit code: \(outcome)",
            sourceLocation: sourceLocation)
    }

    /// A refused run: one of `codes`, and a message naming `file`.
    static func expectRefused(
        _ outcome: Outcome, _ context: String, codes: Set<Int32> = [65], naming file: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        expectDocumented(outcome, context, sourceLocation: sourceLocation)
        #expect(
            codes.contains(outcome.status), "\(context): expected exit \(codes.sorted()): \(outcome)",
            sourceLocation: sourceLocation)
        #expect(
            outcome.stderr.contains(file), "\(context): the message does not name \(file): \(outcome)",
            sourceLocation: sourceLocation)
    }
}
