import Foundation
import GranaryKit
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A real S3 server for the tests: moto's (`moto_server`, from PyPI, installed by `make test`
/// into `.build-tools/moto`), started on a free loopback port and stopped with the value. Nothing
/// leaves 127.0.0.1. Tests that need it are skipped, saying why, when moto or rclone is missing.
final class S3Server: @unchecked Sendable {
    /// The package folder (three levels above this file).
    static let packageDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// `moto_server` in the package's tool folder, else `GRANARY_MOTO_SERVER`.
    static let motoServer: String = {
        if let path = ProcessInfo.processInfo.environment["GRANARY_MOTO_SERVER"], !path.isEmpty { return path }
        return packageDirectory + "/.build-tools/moto/bin/moto_server"
    }()

    /// rclone, where granary looks for it as root.
    static let rclone: String? = ["/usr/bin/rclone", "/usr/local/bin/rclone"].first { access($0, X_OK) == 0 }

    /// Whether the remote tests can run here; the message says why not (shown as the skip reason).
    static let available: Bool = access(motoServer, X_OK) == 0 && rclone != nil
    static let unavailableReason: Comment =
        "remote-repository tests skipped: \(access(motoServer, X_OK) == 0 ? "" : "moto is not installed (\(motoServer); make test installs it from PyPI) ")\(rclone == nil ? "rclone is not installed (apt-get install rclone)" : "")"

    let port: Int
    private var process: Process?
    let log: String

    /// The credentials the tests use: moto accepts any; these are recognisable in output.
    static let accessKey = "AKIAGRANARYTESTKEY42"
    static let secretKey = "granary-secret-Zq8Wm3Xv7Lp2Rt9Ks4Hd"

    init(log: String) throws {
        self.log = log
        port = try Self.freePort()
        try start()
    }

    deinit { stop() }

    /// Starts (or restarts, empty) the server on its port and waits until it answers.
    func start() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.motoServer)
        process.arguments = ["-H", "127.0.0.1", "-p", String(port)]
        FileManager.default.createFile(atPath: log, contents: nil)
        let handle = FileHandle(forWritingAtPath: log)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        self.process = process
        Self.live.started(process.processIdentifier)
        for _ in 0..<300 {
            if Self.answers(port: port) { return }
            usleep(50_000)
        }
        throw S3ServerError.didNotStart(log)
    }

    /// Kills the server (SIGKILL): everything it held is gone.
    func kill() {
        guard let process, process.isRunning else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        Self.live.stopped(process.processIdentifier)
    }

    /// The servers still running, killed when the test process exits: a `static let` server
    /// (the suite's shared one) is never deinitialised, and moto outliving the run would keep
    /// a port and a core busy.
    static let live = LiveServers()

    final class LiveServers: @unchecked Sendable {
        private let lock = NSLock()
        private var pids: Set<Int32> = []
        private var registered = false

        func started(_ pid: Int32) {
            lock.withLock {
                pids.insert(pid)
                if !registered {
                    registered = true
                    atexit { S3Server.live.killAll() }
                }
            }
        }

        func stopped(_ pid: Int32) { _ = lock.withLock { pids.remove(pid) } }

        func killAll() {
            for pid in lock.withLock({ pids }) { Glibc.kill(pid, SIGKILL) }
        }
    }

    func stop() { kill() }

    var endpoint: String { "http://127.0.0.1:\(port)" }

    /// What granary needs to reach the server as `s3:`: the usual AWS variables.
    func environment(endpointPort: Int? = nil) -> [String: String] {
        [
            "AWS_ACCESS_KEY_ID": Self.accessKey, "AWS_SECRET_ACCESS_KEY": Self.secretKey, "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": "http://127.0.0.1:\(endpointPort ?? port)",
            // One attempt: a fault ends a run at once. The timeouts are long enough for a loaded
            // CI machine (a listing there once took over 20 s behind four test processes and two
            // builds; CI now runs six test processes and no build beside them); the tests of a stalled server set short ones of their own (or, for
            // follow's uploads, rely on the shipper's own deadline).
            "RCLONE_RETRIES": "1", "RCLONE_LOW_LEVEL_RETRIES": "1", "RCLONE_CONTIMEOUT": "10s", "RCLONE_TIMEOUT": "60s",
        ]
    }

    /// Runs rclone against the server directly (the test's own view, not granary's), through a
    /// remote `moto:` defined in the environment; `extra` adds variables (a config file).
    @discardableResult
    func rclone(_ arguments: [String], extra: [String: String] = [:]) throws -> GranaryProcess.Result {
        var environment = self.environment()
        environment["RCLONE_CONFIG_MOTO_TYPE"] = "s3"
        environment["RCLONE_CONFIG_MOTO_PROVIDER"] = "Other"
        environment["RCLONE_CONFIG_MOTO_ENV_AUTH"] = "true"
        environment["RCLONE_CONFIG_MOTO_ENDPOINT"] = endpoint
        environment["RCLONE_CONFIG_MOTO_NO_HEAD"] = "true"
        environment["AWS_CA_BUNDLE"] = ""
        for (key, value) in extra { environment[key] = value }
        return try GranaryProcess.runExecutable(Self.rclone!, ["--quiet"] + arguments, environment: environment)
    }

    /// Creates a bucket.
    func makeBucket(_ name: String) throws {
        let result = try rclone(["mkdir", "moto:" + name])
        guard result.status == 0 else { throw S3ServerError.rclone(result.stderr) }
    }

    /// Every object under `path` of the server (`bucket/prefix`), by name relative to it.
    func objects(_ path: String) throws -> [String: Int64] {
        let result = try rclone(["lsjson", "-R", "--files-only", "--no-mimetype", "--no-modtime", "moto:" + path])
        guard result.status == 0 else { throw S3ServerError.rclone(result.stderr) }
        struct Item: Decodable { let Path: String; let Size: Int64 }
        let items = try JSONDecoder().decode([Item].self, from: Data(result.stdout.utf8))
        return Dictionary(items.map { ($0.Path, $0.Size) }, uniquingKeysWith: { a, _ in a })
    }

    /// The bytes of one object, as stored.
    func read(_ path: String, scratch: String) throws -> Data {
        let result = try rclone(["copyto", "moto:" + path, scratch])
        guard result.status == 0 else { throw S3ServerError.rclone(result.stderr) }
        defer { unlink(scratch) }
        return FileManager.default.contents(atPath: scratch) ?? Data()
    }

    static func answers(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
    }

    /// A loopback port nobody listens on now.
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = 0
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0 else { throw S3ServerError.noPort }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return Int(UInt16(bigEndian: address.sin_port))
    }
}

enum S3ServerError: Error {
    case didNotStart(String)
    case noPort
    case rclone(String)
}
