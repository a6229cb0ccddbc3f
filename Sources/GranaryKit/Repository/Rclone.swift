import CLinux
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs rclone (<https://rclone.org>), the transport of remote repositories.
///
/// rclone is a runtime dependency of remote repositories only: it is looked up when a remote
/// repository is first used, never for a local one. Credentials never go on its command line
/// (visible to every user in `ps`): an `s3:` location's remote is defined through rclone's
/// `RCLONE_CONFIG_<NAME>_*` variables, and the AWS keys stay in the environment rclone inherits
/// (its `env_auth`), which only the same user and root can read. What rclone prints is kept for
/// messages with every credential the environment holds replaced by `***`.
///
/// As root, the program run is `rclone` from the system's folders only (`PATH` is not consulted:
/// nothing in root's environment chooses a program to run), and the rclone configuration file it
/// reads must be root's and writable by nobody else, like granary's own.
public struct Rclone: Sendable {
    /// The rclone executable.
    public let executable: String
    /// The environment rclone runs with.
    public let environment: [String: String]

    /// Folders searched for rclone as root.
    static let systemFolders = ["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"]

    #if TEST_HOOKS
        /// A debug build's test switch (``searchOnly(in:)``): look for rclone in this folder only.
        nonisolated(unsafe) private static var searchOnlyIn: String?

        /// A debug build's test switch, set by the executable once at start, before any
        /// repository is opened (granary's TestHooks, from `GRANARY_TEST_RCLONE_FOLDER`): look for
        /// rclone in `folder` only, as on a machine without rclone. Nothing in GranaryKit sets it.
        public static func searchOnly(in folder: String?) { searchOnlyIn = folder }
    #endif

    /// Finds rclone, or throws `RepositoryError.rcloneMissing`.
    public static func locate(
        environment: [String: String] = ProcessInfo.processInfo.environment, euid: uid_t = geteuid()
    ) throws(RepositoryError) -> Rclone {
        var folders =
            euid == 0 ? systemFolders : (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":").map(String.init)
        #if TEST_HOOKS
            // Tests stand in for a machine without rclone (root's search ignores PATH).
            if let folder = searchOnlyIn { folders = [folder] }
        #endif
        folders = folders.filter { $0.hasPrefix("/") }
        for folder in folders
        where access(folder + "/rclone", X_OK) == 0 && FileSystem.isRegularFile(folder + "/rclone") {
            return Rclone(executable: folder + "/rclone", environment: environment)
        }
        throw .rcloneMissing
    }

    /// A finished run: its exit status and what it printed.
    public struct Output: Sendable {
        public var status: Int32
        public var standardOutput: [UInt8]
        /// What rclone said on standard error, with credentials replaced.
        public var diagnostics: String
        /// Whether it was stopped at its deadline (``run(_:extra:input:deadline:)``).
        public var timedOut = false
    }

    /// Runs rclone with `arguments` and `extra` variables to completion; collects its output.
    /// With `deadline` (seconds), a run still going then is stopped (SIGTERM, then SIGKILL) and
    /// reported as ``Output/timedOut``: rclone's own retries multiply its timeouts in ways its
    /// flags do not show (each low-level try of an S3 request is tried again by the S3 client),
    /// so the bound granary documents is kept by granary itself.
    public func run(
        _ arguments: [String], extra: [String: String] = [:], input: String? = nil, deadline: Double? = nil
    ) throws(RepositoryError) -> Output {
        let process = try start(arguments, extra: extra, stdinPath: input)
        var output: [UInt8] = []
        let timedOut = Self.read(process, deadline: deadline) { output.append(contentsOf: $0) }
        if timedOut { process.stop() }
        let status = process.wait()
        var result = Output(status: status, standardOutput: output, diagnostics: process.diagnostics())
        result.timedOut = timedOut
        return result
    }

    /// Starts rclone with its standard output on a pipe the caller reads (a streamed download).
    /// Hands `chunk` what `process` writes to its output, as it comes, until the output ends or
    /// `deadline` seconds have passed (then true: the caller stops the process).
    static func read(_ process: RcloneProcess, deadline: Double?, _ chunk: (UnsafeRawBufferPointer) -> Void) -> Bool {
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)
        defer { buffer.deallocate() }
        let started = ContinuousClock.now
        while true {
            if let deadline {
                let left = deadline - (ContinuousClock.now - started).timeInterval
                if left <= 0 { return true }
                var ready = pollfd(fd: process.output, events: Int16(POLLIN), revents: 0)
                let polled = poll(&ready, 1, Int32(min(left, 1) * 1000) + 1)
                if polled < 0 && errno == EINTR { continue }
                if polled == 0 { continue }
            }
            let n = Glibc.read(process.output, buffer.baseAddress, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            chunk(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
        }
    }

    public func start(_ arguments: [String], extra: [String: String] = [:], stdinPath: String? = nil)
        throws(RepositoryError) -> RcloneProcess
    {
        var environment = self.environment
        for (key, value) in extra { environment[key] = value }
        // rclone links tcell (for its `ncdu` command), whose start-up fills a 1.1 MB table of the
        // display width of every Unicode scalar unless TCELL_MINIMIZE is set: 40 % of the CPU of
        // a short rclone run (a listing, a small upload), and granary starts one per remote step.
        // No command granary runs draws on a terminal.
        if environment["TCELL_MINIMIZE"] == nil { environment["TCELL_MINIMIZE"] = "1" }
        let (program, argv) = Self.launch(executable, arguments)
        return try RcloneProcess.spawn(
            executable: program, arguments: argv, environment: environment,
            secrets: Self.secrets(in: environment))
    }

    /// How rclone is started: through `setpriv --pdeathsig TERM` (util-linux), so that it dies
    /// with granary, even a granary killed by SIGKILL (the signal is kept across the exec), and
    /// through `/bin/sh` for `umask 077`, so that whatever it creates on this machine (a local
    /// remote's files and folders) is 0600 and 0700. The program run is still `executable`,
    /// with the same pid.
    static func launch(_ executable: String, _ arguments: [String]) -> (String, [String]) {
        let shell = ["/bin/sh", "-c", "umask 077 && exec \"$0\" \"$@\"", executable] + arguments
        if let setpriv = Self.setpriv {
            return (setpriv, ["setpriv", "--pdeathsig", "TERM", "--"] + shell)
        }
        return ("/bin/sh", ["sh"] + shell.dropFirst())
    }

    /// util-linux's setpriv, from the system's folders.
    static let setpriv: String? = ["/usr/bin/setpriv", "/bin/setpriv"].first {
        access($0, X_OK) == 0 && FileSystem.isRegularFile($0)
    }

    /// The values in `environment` that must never be shown: keys, passwords, tokens.
    static func secrets(in environment: [String: String]) -> [String] {
        var values: [String] = []
        for (key, value) in environment where value.count >= 4 {
            let upper = key.uppercased()
            let secret =
                ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "RCLONE_CONFIG_PASS"].contains(
                    upper)
                || (upper.hasPrefix("RCLONE_")
                    && ["KEY", "SECRET", "PASS", "TOKEN", "PASSWORD", "PASSWORD2", "ACCOUNT", "SAS_URL", "CREDENTIALS"]
                        .contains { upper.hasSuffix("_" + $0) })
            if secret { values.append(value) }
        }
        return values.sorted { $0.count > $1.count }
    }

    /// `text` with every secret replaced by `***`, and user:password@ in URLs removed.
    static func scrub(_ text: String, secrets: [String]) -> String {
        var result = text
        for secret in secrets { result = result.replacingOccurrences(of: secret, with: "***") }
        // http://user:password@host → http://***@host
        if let regex = try? NSRegularExpression(pattern: "([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\\s]+@") {
            result = regex.stringByReplacingMatches(
                in: result, range: NSRange(result.startIndex..., in: result), withTemplate: "$1***@")
        }
        return result
    }
}

/// A running rclone: its standard output is a pipe (`output`), its standard error is collected
/// on a thread so that it can never block the child, and kept (at most 64 KiB) for messages.
public final class RcloneProcess: @unchecked Sendable {
    public let pid: pid_t
    /// The read end of rclone's standard output.
    public let output: Int32
    private let secrets: [String]
    private let errors = ErrorCollector()
    private var status: Int32?

    private init(pid: pid_t, output: Int32, errorPipe: Int32, secrets: [String]) {
        self.pid = pid
        self.output = output
        self.secrets = secrets
        let collector = errors
        Thread.detachNewThread { collector.drain(errorPipe) }
    }

    deinit {
        if status == nil {
            kill(pid, SIGTERM)
            _ = wait()
        }
        close(output)
    }

    static func spawn(executable: String, arguments: [String], environment: [String: String], secrets: [String])
        throws(RepositoryError) -> RcloneProcess
    {
        var outPipe: [Int32] = [0, 0]
        var errPipe: [Int32] = [0, 0]
        guard granary_pipe_cloexec(&outPipe) == 0 else {
            throw .transport(
                location: executable, detail: "cannot create a pipe: \(String(cString: strerror(errno)))",
                temporary: false)
        }
        guard granary_pipe_cloexec(&errPipe) == 0 else {
            close(outPipe[0]); close(outPipe[1])
            throw .transport(
                location: executable, detail: "cannot create a pipe: \(String(cString: strerror(errno)))",
                temporary: false)
        }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        // Signals granary handles (SIGINT, SIGTERM) start with their default action in rclone, and
        // none is blocked: an interrupted granary ends its transfers.
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGQUIT] { sigaddset(&defaults, signal) }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))
        let argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] =
            environment.sorted { $0.key < $1.key }.map { strdup($0.key + "=" + $0.value) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let rc = posix_spawn(&pid, executable, &actions, &attributes, argv, envp)
        close(outPipe[1])
        close(errPipe[1])
        guard rc == 0 else {
            close(outPipe[0]); close(errPipe[0])
            if rc == ENOENT { throw .rcloneMissing }
            throw .transport(
                location: executable, detail: "cannot run rclone: \(String(cString: strerror(rc)))", temporary: false)
        }
        return RcloneProcess(pid: pid, output: outPipe[0], errorPipe: errPipe[0], secrets: secrets)
    }

    /// Waits for rclone to end; its exit status (128 + N when killed by signal N).
    @discardableResult
    public func wait() -> Int32 {
        if let status { return status }
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
        let code = (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
        status = code
        errors.waitUntilDrained()
        return code
    }

    /// Stops rclone at once: SIGTERM, and SIGKILL when it has not ended a second later.
    func stop() {
        guard status == nil else { return }
        kill(pid, SIGTERM)
        for _ in 0..<20 {
            var raw: Int32 = 0
            let done = waitpid(pid, &raw, WNOHANG)
            if done == pid {
                status = (raw & 0x7f) == 0 ? (raw >> 8) & 0xff : 128 + (raw & 0x7f)
                errors.waitUntilDrained()
                return
            }
            usleep(50_000)
        }
        kill(pid, SIGKILL)
    }

    /// Stops rclone (the caller read what it needed).
    public func terminate() {
        guard status == nil else { return }
        kill(pid, SIGTERM)
        wait()
    }

    /// What rclone wrote on standard error (after `wait`), credentials replaced.
    public func diagnostics() -> String {
        Rclone.scrub(errors.text, secrets: secrets)
    }

    /// Collects a child's standard error on its own thread.
    final class ErrorCollector: @unchecked Sendable {
        private let condition = NSCondition()
        private var bytes: [UInt8] = []
        private var done = false

        func drain(_ fd: Int32) {
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
                if n < 0 && errno == EINTR { continue }
                if n <= 0 { break }
                condition.lock()
                if bytes.count < 64 * 1024 { bytes.append(contentsOf: buffer[0..<n]) }
                condition.unlock()
            }
            close(fd)
            condition.lock()
            done = true
            condition.broadcast()
            condition.unlock()
        }

        func waitUntilDrained() {
            condition.lock()
            while !done { condition.wait() }
            condition.unlock()
        }

        var text: String {
            condition.lock()
            defer { condition.unlock() }
            return String(decoding: bytes, as: UTF8.self)
        }
    }
}
