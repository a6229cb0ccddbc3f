import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The environment root's rclone runs with: built by granary from an allow-list, never the one
/// granary inherited.
///
/// rclone takes any setting from its environment (`RCLONE_<FLAG>`, a whole remote from
/// `RCLONE_CONFIG_<NAME>_*`), starts a remote-control server on `RCLONE_RC=true`, and its AWS
/// client reads `AWS_CONFIG_FILE`, whose `credential_process` is a command it runs. Under
/// `sudo -E` (or sudoers' `SETENV`) all of these are the invoking user's. So, as root:
///
/// - the variables granary documents (the AWS credentials, region, endpoint and profile
///   settings, `RCLONE_CONFIG`, `RCLONE_CONFIG_PASS`, `RCLONE_CONFIG_<NAME>_*` and a few
///   transfer settings such as `RCLONE_TIMEOUT`; see ``allowed(_:)``) are taken from the
///   environment only when it is root's own: not under sudo (`SUDO_UID` or `SUDO_USER` set) and
///   not when the real uid is another user's;
/// - the same variables are read from the file `remote_environment` of granary's configuration
///   names (`KEY=VALUE` lines, root's and writable by nobody else), which works the same under
///   sudo and from cron;
/// - `RCLONE_RC*` never (rclone's remote-control server), whatever the source, and rclone is run
///   with `--rc=false`;
/// - the AWS shared files (`AWS_CONFIG_FILE`, `AWS_SHARED_CREDENTIALS_FILE`, else root's
///   `~/.aws/config` and `~/.aws/credentials`) and rclone's configuration file are used only when
///   they, and every folder on the way to them, are root's and writable by nobody else.
///
/// Not as root, rclone runs with the user's own environment, less `RCLONE_RC*`.
public enum RemoteEnvironment {
    /// The AWS variables granary documents (granary(1), ENVIRONMENT).
    static let awsNames: Set<String> = [
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
        "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_CA_BUNDLE", "AWS_PROFILE", "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE", "AWS_ROLE_ARN", "AWS_ROLE_SESSION_NAME", "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN", "AWS_EC2_METADATA_DISABLED", "AWS_STS_REGIONAL_ENDPOINTS",
    ]
    /// rclone's own variables granary passes on: its configuration file and password, and settings
    /// of how transfers are made (never what runs or listens).
    static let rcloneNames: Set<String> = [
        "RCLONE_CONFIG", "RCLONE_CONFIG_PASS", "RCLONE_CA_CERT", "RCLONE_RETRIES", "RCLONE_LOW_LEVEL_RETRIES",
        "RCLONE_CONTIMEOUT", "RCLONE_TIMEOUT", "RCLONE_BWLIMIT", "RCLONE_TRANSFERS", "RCLONE_CHECKERS",
        "RCLONE_S3_UPLOAD_CUTOFF", "RCLONE_S3_CHUNK_SIZE",
    ]
    /// Network settings Go's HTTP client reads.
    static let networkNames: Set<String> = [
        "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "SSL_CERT_FILE",
        "SSL_CERT_DIR",
    ]

    /// Whether `name` is a variable root's rclone may be given.
    public static func allowed(_ name: String) -> Bool {
        if awsNames.contains(name) || rcloneNames.contains(name) || networkNames.contains(name) { return true }
        // A remote defined in the environment: RCLONE_CONFIG_<NAME>_<KEY>.
        if name.hasPrefix("RCLONE_CONFIG_"), name.dropFirst(14).contains("_") { return true }
        return false
    }

    /// `RCLONE_RC`, `RCLONE_RC_*`: the remote-control server, never wanted.
    static func isRemoteControl(_ name: String) -> Bool {
        name == "RCLONE_RC" || name.hasPrefix("RCLONE_RC_")
    }

    /// Whether `environment` is root's own: root, not acting for a user through sudo, with a real
    /// uid of root.
    public static func isRootsOwn(
        environment: [String: String], euid: uid_t = geteuid(), uid: uid_t = getuid()
    ) -> Bool {
        guard euid == 0 else { return false }
        let sudo = ["SUDO_UID", "SUDO_USER"].contains { environment[$0].map { !$0.isEmpty } ?? false }
        return !sudo && uid == 0
    }

    /// The environment rclone runs with, and the names of inherited variables left out (for a note).
    public static func build(
        from inherited: [String: String], euid: uid_t = geteuid(), uid: uid_t = getuid(), file: String? = nil
    ) throws(RepositoryError) -> (environment: [String: String], ignored: [String]) {
        guard euid == 0 else {
            return (inherited.filter { !isRemoteControl($0.key) }, [])
        }
        let home = getpwuid(0).map { String(cString: $0.pointee.pw_dir) } ?? "/root"
        let own = isRootsOwn(environment: inherited, euid: euid, uid: uid)
        var environment: [String: String] = [
            "PATH": Rclone.systemFolders.joined(separator: ":"),
            "HOME": own ? inherited["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? home : home,
        ]
        if own, let tmp = inherited["TMPDIR"], tmp.hasPrefix("/") { environment["TMPDIR"] = tmp }
        var ignored: [String] = []
        for (key, value) in inherited where allowed(key) {
            if own { environment[key] = value } else { ignored.append(key) }
        }
        if let file {
            for (key, value) in try read(file) { environment[key] = value }
        }
        for key in environment.keys where isRemoteControl(key) { environment[key] = nil }
        // The AWS client's shared files: a credential_process there is a command run as root.
        let base = environment["HOME"] ?? home
        for (variable, fallback) in [
            ("AWS_CONFIG_FILE", base + "/.aws/config"), ("AWS_SHARED_CREDENTIALS_FILE", base + "/.aws/credentials"),
        ] {
            let path = environment[variable].flatMap { $0.isEmpty ? nil : $0 } ?? fallback
            if let problem = RootEnvironment.trustProblem(path) {
                throw .untrustedFile(path, "the AWS client's file (\(variable))", problem)
            }
        }
        return (environment, ignored.sorted())
    }

    /// The allowed `KEY=VALUE` lines of a root-owned environment file (`export ` and one level of
    /// quotes accepted, `#` comments); anything else in it is refused, naming the line.
    static func read(_ path: String) throws(RepositoryError) -> [String: String] {
        let fd: Int32
        switch RootEnvironment.openTrusted(path) {
        case .opened(let opened): fd = opened
        case .absent: throw .untrustedFile(path, "the remote environment file", "it does not exist")
        case .untrusted(let problem): throw .untrustedFile(path, "the remote environment file", problem)
        }
        defer { close(fd) }
        var info = stat()
        guard geteuid() != 0 || (fstat(fd, &info) == 0 && info.st_mode & S_IFMT == S_IFREG && info.st_size < 1 << 20)
        else { throw .untrustedFile(path, "the remote environment file", "it is not a regular file under 1 MiB") }
        var bytes: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        while bytes.count < 1 << 20 {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { break }
            bytes += buffer[0..<n]
        }
        var result: [String: String] = [:]
        for (index, raw) in String(decoding: bytes, as: UTF8.self).split(
            separator: "\n", omittingEmptySubsequences: false
        )
        .enumerated() {
            var line = raw.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("export ") { line = String(line.dropFirst(7)).trimmingCharacters(in: .whitespaces) }
            guard let equals = line.firstIndex(of: "=") else {
                throw .untrustedFile(path, "the remote environment file", "line \(index + 1) is not KEY=VALUE")
            }
            let key = String(line[..<equals])
            var value = String(line[line.index(after: equals)...])
            if value.count >= 2, let first = value.first, first == "'" || first == "\"", value.last == first {
                value = String(value.dropFirst().dropLast())
            }
            guard allowed(key) else {
                throw .untrustedFile(
                    path, "the remote environment file",
                    "line \(index + 1): \(key) is not a variable granary passes to rclone (granary(1), ENVIRONMENT)")
            }
            result[key] = value
        }
        return result
    }
}
