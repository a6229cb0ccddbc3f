import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A repository on a remote reached through rclone: `s3:BUCKET[/PREFIX]` or `rclone:REMOTE:PATH`.
///
/// - `s3:` needs no rclone configuration (and reads none): its remote is defined for each rclone run through
///   rclone's `RCLONE_CONFIG_GRANARYS3_*` variables, from `AWS_REGION` (or
///   `AWS_DEFAULT_REGION`) and `AWS_ENDPOINT_URL` (or `AWS_ENDPOINT_URL_S3`, for MinIO, Ceph,
///   R2…); the keys themselves (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
///   `AWS_SESSION_TOKEN`, or an instance role) are read by rclone from the environment it
///   inherits. The bucket must exist: granary never creates one.
/// - `rclone:REMOTE:PATH` is any remote of the administrator's rclone configuration, `crypt`
///   remotes included (rclone encrypts before anything leaves the host). Connection strings
///   with parameters (`:s3,key=…:`) are refused: they would put settings, maybe secrets, on
///   rclone's command line.
///
/// The repository exists when its marker object `.granary-repository` does. An archive is
/// made visible only when complete: on object stores (S3 and the other bucket-based backends,
/// where a PUT or a multipart completion is atomic) it is uploaded under its final name; on
/// other backends it is uploaded under a hidden temporary name and moved server-side. A run that
/// is killed or cut off leaves at most a hidden temporary object (removed by the next run of
/// the user, `sync` and `recover`) or an unfinished multipart upload, which lists nothing.
/// Archives are first written to a local work folder (root's: `/var/cache/granary/work`, 0700;
/// another uid's: `$TMPDIR` or `/var/tmp`, in a folder `granary-UID` of mode 0700), then
/// uploaded with `rclone copyto`.
public struct RcloneRepository: Repository {
    public let location: String
    /// The repository's root as rclone names it (`granarys3:bucket/prefix`, `remote:path`).
    let root: String
    /// Variables added to rclone's environment (the `s3:` remote's definition).
    let extra: [String: String]
    /// Arguments given to every rclone run.
    let common: [String]
    /// How often a whole operation (a download) is tried.
    let tries: Int
    let rclone: Rclone
    /// Objects are uploaded under their final name (object stores), else under a temporary
    /// name then moved; nil until asked of rclone.
    private let features: FeatureCache
    /// Listings and records taken a moment ago (``ListingMemo``).
    let listings = ListingMemo()
    public let workFolder: String
    /// Inherited variables root's rclone was not given (the environment was not root's own).
    public private(set) var ignoredVariables: [String] = []

    /// The name of the remote an `s3:` location defines.
    static let s3Remote = "granarys3"

    public let context: RunContext

    public init(
        location: String, context: RunContext = .defaults,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) throws(RepositoryError) {
        self.location = location
        self.context = context
        // Root's rclone gets an environment built from an allow-list (RemoteEnvironment), never
        // the one a sudo user handed granary.
        let built = try RemoteEnvironment.build(from: environment, file: context.remoteEnvironmentFile)
        var environment = built.environment
        ignoredVariables = built.ignored
        var extra: [String: String] = [:]
        let limits = context.remote
        // Never rclone's remote-control server, whatever its environment or configuration says.
        let common = ["--quiet", "--use-server-modtime", "--rc=false"] + limits.flags(environment: environment)
        tries = limits.operationTries(environment: environment)
        deadline = limits.effective(environment: environment).bound
        let features = FeatureCache()
        if location.hasPrefix("s3:") {
            var rest = String(location.dropFirst(3))
            if rest.hasPrefix("//") { rest = String(rest.dropFirst(2)) }
            while rest.hasSuffix("/") { rest = String(rest.dropLast()) }
            let bucket = rest.split(separator: "/", maxSplits: 1).first.map(String.init) ?? ""
            guard !bucket.isEmpty, !rest.hasPrefix("/"), !rest.contains("//") else {
                throw .badLocation(location, "s3: needs a bucket, as in s3:BUCKET or s3:BUCKET/PREFIX")
            }
            root = Self.s3Remote + ":" + rest
            let prefix = "RCLONE_CONFIG_" + Self.s3Remote.uppercased() + "_"
            let endpoint =
                environment["AWS_ENDPOINT_URL_S3"].flatMap { $0.isEmpty ? nil : $0 } ?? environment["AWS_ENDPOINT_URL"]
            let region =
                environment["AWS_REGION"].flatMap { $0.isEmpty ? nil : $0 } ?? environment["AWS_DEFAULT_REGION"]
            extra[prefix + "TYPE"] = "s3"
            extra[prefix + "PROVIDER"] = endpoint?.isEmpty == false ? "Other" : "AWS"
            extra[prefix + "ENV_AUTH"] = "true"
            if let region, !region.isEmpty { extra[prefix + "REGION"] = region }
            if let endpoint, !endpoint.isEmpty { extra[prefix + "ENDPOINT"] = endpoint }
            // No configuration file at all: nothing in one (a user's, under sudo -E) can add to
            // or change this remote.
            extra["RCLONE_CONFIG"] = "/dev/null"
            // The bucket is the administrator's to create (with its region, policy, versioning).
            extra[prefix + "NO_CHECK_BUCKET"] = "true"
            // A multipart upload is checked part by part (Content-MD5) by the server; rclone 1.60's
            // extra HEAD …?versionId=null after it is refused by some S3 servers (moto 5).
            extra[prefix + "NO_HEAD"] = "true"
            // rclone 1.60's S3 client cannot load a CA bundle named by AWS_CA_BUNDLE (it fails on
            // every request); its own --ca-cert takes the same file.
            if let bundle = environment["AWS_CA_BUNDLE"] {
                environment["AWS_CA_BUNDLE"] = nil
                if environment["RCLONE_CA_CERT"] == nil, !bundle.isEmpty { extra["RCLONE_CA_CERT"] = bundle }
            }
            features.set(direct: true)
        } else if location.hasPrefix("rclone:") {
            let rest = String(location.dropFirst(7))
            guard let colon = rest.firstIndex(of: ":"), colon != rest.startIndex || rest.count > 1 else {
                throw .badLocation(location, "rclone: needs a remote, as in rclone:REMOTE:PATH")
            }
            var remote = String(rest[..<colon])
            if remote.isEmpty, let second = rest[rest.index(after: colon)...].firstIndex(of: ":") {
                remote = String(rest[..<second])
            }
            if remote.contains(",") || remote.contains("=") {
                // The parameters may hold a secret: they are not shown either.
                let shown = "rclone:" + remote.prefix { $0 != "," } + ",…"
                throw .badLocation(
                    shown,
                    "connection-string parameters would go on rclone's command line, where every user can read them; define the remote in rclone's configuration (or RCLONE_CONFIG_NAME_* variables)"
                )
            }
            if remote == "" || remote == ":local" || remote.hasPrefix("/") || remote.hasPrefix(".") {
                throw .badLocation(
                    location, "a local folder is a repository by its path, with the checks a local repository gets")
            }
            root = rest
        } else {
            throw .badLocation(location, "not a remote location")
        }
        if geteuid() == 0 {
            // Root reads root's rclone configuration (never one chosen by a sudo user's HOME or
            // XDG_CONFIG_HOME), and only when it and every folder on the way are root's alone.
            if location.hasPrefix("rclone:") {
                let home = environment["HOME"] ?? "/root"
                let config =
                    environment["RCLONE_CONFIG"].flatMap { $0.isEmpty ? nil : $0 } ?? home
                    + "/.config/rclone/rclone.conf"
                environment["RCLONE_CONFIG"] = config
                if let problem = RootEnvironment.trustProblem(config) {
                    throw .badLocation(location, "refusing the rclone configuration \(config) as root: \(problem)")
                }
            }
        }
        self.extra = extra
        self.common = common
        self.features = features
        rclone = try Rclone.locate(environment: environment)
        if geteuid() == 0 {
            // Root's: beneath a folder no other user can create first (a name in /var/tmp is
            // anyone's to take).
            workFolder = Self.rootWorkFolder
        } else {
            let base = environment["TMPDIR"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/var/tmp"
            workFolder = base + "/granary-\(geteuid())"
        }
    }

    public var localPath: String? { nil }

    /// `root` joined with `name`.
    func remote(_ name: String) -> String {
        name.isEmpty ? root : root.hasSuffix(":") || root.hasSuffix("/") ? root + name : root + "/" + name
    }

    public func display(_ object: String) -> String {
        location.hasSuffix(":") || location.hasSuffix("/") ? location + object : location + "/" + object
    }

    /// Runs rclone to completion; throws what a failure means. With `bounded` (a listing, a
    /// small object, a delete: never a transfer of an archive, whose time grows with its size),
    /// the run ends within ``deadline``.
    @discardableResult
    func run(_ arguments: [String], what: String, bounded: Bool = false) throws(RepositoryError) -> [UInt8] {
        let output = try rclone.run(common + arguments, extra: extra, deadline: bounded ? deadline : nil)
        if output.timedOut { throw timedOut(what) }
        guard output.status == 0 else {
            throw Self.failure(status: output.status, diagnostics: output.diagnostics, location: what)
        }
        return output.standardOutput
    }

    /// The longest one bounded operation may take (``RemoteLimits/bound`` of the effective limits).
    let deadline: Double

    /// The failure of an operation stopped at ``deadline``.
    func timedOut(_ what: String) -> RepositoryError {
        .transport(
            location: what,
            detail:
                "no answer within \(Int(deadline.rounded(.up))) s, the bound of the [remote] settings (retries × low_level_retries × (connect_timeout + timeout), and the pauses between tries)",
            temporary: true)
    }

    /// rclone's exit statuses that granary tells apart (rclone's documentation, "Exit code").
    enum ExitCode {
        static let directoryNotFound: Int32 = 3
        static let fileNotFound: Int32 = 4
        static let temporaryError: Int32 = 5
        /// Nothing was transferred, with `--error-on-no-transfer` (a name `--ignore-existing` found taken).
        static let nothingTransferred: Int32 = 9
        /// A status from here up: rclone died of a signal (128 + its number).
        static let signalled: Int32 = 128
    }

    /// What an rclone failure means: its exit status (``ExitCode``) and the last error it printed.
    static func failure(status: Int32, diagnostics: String, location: String) -> RepositoryError {
        let lines = diagnostics.split(separator: "\n").map { line -> String in
            var text = String(line)
            // "2026/11/23 20:24:29 ERROR : name: what" → "name: what"
            if let range = text.range(
                of: #"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} (ERROR|NOTICE|INFO|DEBUG|CRITICAL) ?: ?"#,
                options: .regularExpression)
            {
                text.removeSubrange(range)
            } else if let range = text.range(of: #"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2} "#, options: .regularExpression)
            {
                text.removeSubrange(range)
            }
            return text.trimmingCharacters(in: .whitespaces)
        }.filter { !$0.isEmpty && !$0.hasPrefix("Config file") }
        var detail = lines.last { !$0.hasPrefix("Attempt ") } ?? lines.last ?? "rclone exited with status \(status)"
        if detail.count > 400 { detail = String(detail.prefix(400)) + "…" }
        let lower = diagnostics.lowercased()
        if lower.contains("nosuchbucket") || lower.contains("status code: 404") {
            return .missing(location: location, detail: "no such bucket, or no such object (\(detail))")
        }
        if status == ExitCode.directoryNotFound || status == ExitCode.fileNotFound
            || lower.contains("directory not found") || lower.contains("is a directory or doesn't exist")
        {
            return .missing(location: location, detail: detail)
        }
        if ["accessdenied", "invalidaccesskeyid", "signaturedoesnotmatch", "403 forbidden", "status code: 403"]
            .contains(where: lower.contains)
        {
            return .denied(location: location, detail: detail)
        }
        let temporary =
            status == ExitCode.temporaryError || status >= ExitCode.signalled
            || [
                "connection refused", "connection reset", "timeout", "timed out", "503", "slowdown",
                "serviceunavailable", "unexpected eof", "broken pipe", "no such host", "500", "internalerror",
            ].contains(where: lower.contains)
        return .transport(location: location, detail: detail, temporary: temporary)
    }

    // MARK: Existence

    public func exists() throws(RepositoryError) -> Bool {
        if features.exists == true { return true }
        do {
            let found = try objects(in: "").contains { $0.name == LocalRepository.markerName }
            if found { features.set(exists: true) }
            return found
        } catch .missing {
            return false
        }
    }

    public func requireExisting() throws(RepositoryError) {
        if features.exists == true { return }
        let found: Bool
        do {
            found = try objects(in: "").contains { $0.name == LocalRepository.markerName }
        } catch .missing(let location, let detail) where detail.contains("no such bucket") {
            // A bucket that does not exist is said as such (its own fix), not as "not a repository".
            throw .missing(location: location, detail: detail)
        } catch .missing {
            found = false
        }
        if found {
            features.set(exists: true)
            return
        }
        // A crypt remote read with a wrong password shows nothing: say that, not "no repository".
        try checkDecryptable()
        throw .notARepository(location)
    }

    /// The repository must exist (``initialize()`` made it); a local remote's folder is checked.
    public func prepare() throws(RepositoryError) {
        try checkLocalFolder()
        try requireExisting()
    }

    public func initialize() throws(RepositoryError) -> Bool {
        // A remote that ends in this machine's filesystem (rclone `local`, an `alias` of one, a
        // plain path) gets a local repository's checks before anything is written: rclone writes
        // through a link it finds (a `.granary-repository` planted as a link to a root-only file
        // would get the marker's bytes), and its listing skips links, so the marker looks absent.
        try checkLocalFolder()
        if try exists() { return false }
        try checkNewLocation()
        try createMarker()
        try checkLocalFolder()
        return true
    }

    /// Before a repository is started where no marker is found: the location must be a folder,
    /// not an object (rclone would otherwise write beside the object, where nothing reads it
    /// back), and a crypt remote must hold no names its password cannot decrypt (a wrong
    /// password hides the real repository and would start a second one beside it).
    func checkNewLocation() throws(RepositoryError) {
        let stat = try rclone.run(
            common + ["lsjson", "--stat", "--no-mimetype", remote("")], extra: extra, deadline: deadline)
        if stat.timedOut { throw timedOut(location) }
        if stat.status == 0, let item = try? JSONDecoder().decode(Listed.self, from: Data(stat.standardOutput)),
            !item.IsDir
        {
            throw .badLocation(
                location,
                "it is an object (\(item.Size) bytes), not a folder: a repository is a prefix that holds objects; choose another prefix"
            )
        }
        try checkDecryptable()
    }

    /// Where no repository is found on a crypt remote: refused when the remote holds names its
    /// password cannot decrypt (a wrong password or salt hides the real repository), so that every
    /// command names the password rather than "no repository" or a missing archive.
    func checkDecryptable() throws(RepositoryError) {
        guard location.hasPrefix("rclone:"), try remoteFeatures().crypt else { return }
        // The crypt remote's top, listed with rclone's debug log, which alone names what it skips.
        let top = String(root[...root.firstIndex(of: ":")!])
        let listing = try rclone.run(
            ["--use-server-modtime", "--log-level", "DEBUG", "lsjson", "--max-depth", "1", "--no-mimetype", top],
            extra: extra)
        if listing.diagnostics.contains("Skipping undecryptable") {
            throw .badLocation(
                location,
                "no repository is there, and the crypt remote holds names its password cannot decrypt: a wrong password (or salt) hides the real repository (and would start a second one beside it); check the remote's password"
            )
        }
    }

    /// A remote on this machine's filesystem (an rclone `local` remote): its folder gets the
    /// checks a local repository's gets (granary's own, closed to everyone else), and rclone
    /// runs with umask 077 so that what it writes there is 0600 and 0700.
    func checkLocalFolder() throws(RepositoryError) {
        guard location.hasPrefix("rclone:"), let folder = try remoteFeatures().localRoot else { return }
        guard FileSystem.status(folder) != nil else { return }
        do { try LocalRepository(path: folder).checkOwnership() } catch .notARepository {}
    }

    /// What rclone says of the remote: whether it is a crypt remote, and the folder of a local one.
    func remoteFeatures() throws(RepositoryError) -> (crypt: Bool, localRoot: String?) {
        if let known = features.remote { return known }
        let bytes = try run(["backend", "features", remote("")], what: location, bounded: true)
        struct Document: Decodable {
            struct Flags: Decodable {
                let BucketBased: Bool?
                let IsLocal: Bool?
            }
            let Root: String?
            let String: String?
            let Features: Flags?
        }
        let document = try? JSONDecoder().decode(Document.self, from: Data(bytes))
        let known = (
            crypt: document?.String?.hasPrefix("Encrypted drive") == true,
            localRoot: document?.Features?.IsLocal == true ? document?.Root : nil
        )
        features.set(remote: known)
        if features.direct == nil { features.set(direct: document?.Features?.BucketBased ?? false) }
        return known
    }

    private func createMarker() throws(RepositoryError) {
        listings.changeBegins()
        defer { listings.changeEnds() }
        let folder = try prepareWorkFolder()
        let file = folder + "/.granary-repository.\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        defer { unlink(file) }
        do {
            try FileSystem.writeAtomically(Array("granary repository \(LocalRepository.format)\n".utf8), to: file)
        } catch { throw .local(error) }
        try run(["copyto", "--no-check-dest", file, remote(LocalRepository.markerName)], what: location)
        features.set(exists: true)
    }

    /// A remote repository is not a folder of this machine: it can neither be the root nor hold it.
    public func checkSeparate(from root: Root) throws(RepositoryError) {}

    /// Root's work folder: in `/var/cache/granary`, which root makes 0700 and nobody else can
    /// make first (its parents are root's and closed to others).
    public static let rootWorkFolder = "/var/cache/granary/work"

    /// The work folder, made 0700 and refused unless it is a real folder of granary's uid closed
    /// to everyone else. Root's is ``rootWorkFolder`` (every folder on the way root's and writable
    /// by nobody else); another uid's is `$TMPDIR/granary-UID` (else `/var/tmp/granary-UID`), in
    /// a shared folder: one another user made first is reported as theirs.
    public func prepareWorkFolder() throws(RepositoryError) -> String {
        var folders = [workFolder]
        if geteuid() == 0 {
            folders = []
            var path = ""
            for part in workFolder.split(separator: "/") {
                path += "/" + part
                folders.append(path)
            }
        }
        for (index, folder) in folders.enumerated() {
            let last = index == folders.count - 1
            let ours = geteuid() != 0 || folder.hasPrefix("/var/cache/granary")
            // A missing system folder on the way (/var/cache in a minimal container) is made as it would be.
            if RawPath.mkdir(folder, ours ? 0o700 : 0o755) != 0 && errno != EEXIST {
                throw .cannotCreate(folder, FileSystemError("create folder", path: folder))
            }
            guard let info = FileSystem.status(folder) else {
                throw .cannotCreate(folder, FileSystemError("stat", path: folder))
            }
            let isFolder = (info.st_mode & S_IFMT) == S_IFDIR
            if isFolder && info.st_uid == geteuid() && (ours ? info.st_mode & 0o077 == 0 : info.st_mode & 0o022 == 0) {
                continue
            }
            if !isFolder || info.st_uid != geteuid() {
                let owner = getpwuid(info.st_uid).map { String(cString: $0.pointee.pw_name) } ?? "uid \(info.st_uid)"
                throw .squatted(
                    folder,
                    !isFolder
                        ? "is not a folder"
                        : "belongs to \(owner) (uid \(info.st_uid)), not to granary's uid \(geteuid())")
            }
            throw .unsafe(
                folder,
                "is open to others (mode \(String(info.st_mode & 0o7777, radix: 8))): it is granary's work folder for remote repositories\(last ? "" : ", on the way")"
            )
        }
        return workFolder
    }

    // MARK: Listing

    public func rememberListings() { listings.enable() }

    struct Listed: Decodable, Sendable {
        let Name: String
        /// The path below the folder listed (a recursive listing's).
        let Path: String?
        let Size: Int64
        let ModTime: String?
        let IsDir: Bool
        /// The hashes asked for (`lsjson --hash`): on S3, `md5` is the object's ETag (a single-part
        /// upload's) or the MD5 rclone stored with a multipart upload.
        let Hashes: [String: String]?

        /// What another object of the same size uploaded in the same second cannot keep: on S3 its
        /// MD5 (``listsHashes``). Nil where nothing is listed: the size and the upload time (which
        /// every upload sets, to the second) decide alone.
        var identity: String? { Hashes?["md5"].flatMap { $0.isEmpty ? nil : "md5:" + $0 } }
    }

    /// Whether a listing asks for the objects' MD5: on S3 alone, where the listing carries it
    /// (the ETag) at no cost; elsewhere rclone would read or hash every object to give it.
    var listsHashes: Bool { location.hasPrefix("s3:") }

    private func list(_ folder: String, directories: Bool, recursive: Bool = false) throws(RepositoryError)
        -> [Listed]
    {
        let key = "list \(directories) \(recursive) \(folder)"
        if let known = listings.answer(key, as: [Listed].self) { return known }
        let begun = listings.begin()
        let moment = ContinuousClock.now
        let bytes = try run(
            ["lsjson"]
                + (directories
                    ? ["--dirs-only"] : ["--files-only"] + (listsHashes ? ["--hash", "--hash-type", "md5"] : []))
                + (recursive ? ["-R"] : []) + ["--no-mimetype", remote(folder)],
            what: display(folder), bounded: true)
        do {
            let listed = try JSONDecoder().decode([Listed].self, from: Data(bytes))
            listings.keep(key, listed, begun: begun, at: moment)
            return listed
        } catch {
            throw .transport(
                location: display(folder), detail: "rclone's listing cannot be read: \(error)", temporary: false)
        }
    }

    public func folders() throws(RepositoryError) -> [String] {
        do {
            return try list("", directories: true).map(\.Name).filter { !$0.hasPrefix(".") }.sorted()
        } catch .missing(let location, let detail) {
            throw .missing(location: location, detail: detail)
        }
    }

    public func objects(in folder: String) throws(RepositoryError) -> [RepositoryObject] {
        let listed: [Listed]
        do { listed = try list(folder, directories: false) } catch .missing(let location, let detail) {
            // A user folder that does not exist is empty; the repository itself must be there.
            if folder.isEmpty { throw .missing(location: location, detail: detail) }
            return []
        }
        return listed.map {
            RepositoryObject(
                name: $0.Name, size: $0.Size, modified: Self.nanoseconds($0.ModTime ?? ""), identity: $0.identity)
        }
    }

    /// One recursive listing (`lsjson -R`: on an object store, one listing of the prefix).
    public func objects(under folder: String) throws(RepositoryError) -> [RepositoryObject] {
        let listed: [Listed]
        do { listed = try list(folder, directories: false, recursive: true) } catch .missing { return [] }
        return listed.map {
            RepositoryObject(
                name: $0.Path ?? $0.Name, size: $0.Size, modified: Self.nanoseconds($0.ModTime ?? ""),
                identity: $0.identity)
        }
    }

    /// `2026-11-23T20:10:31.000000000Z` → nanoseconds since 1970 (0 when unreadable).
    static func nanoseconds(_ text: String) -> Int64 {
        guard text.count >= 20 else { return 0 }
        let seconds = String(text.prefix(19)) + "Z"
        let formatter = ISO8601DateFormatter()
        guard let date = formatter.date(from: seconds) else { return 0 }
        var nanos: Int64 = 0
        if let dot = text.firstIndex(of: ".") {
            let digits = text[text.index(after: dot)...].prefix { $0.isNumber }
            nanos = Int64((digits + String(repeating: "0", count: max(0, 9 - digits.count))).prefix(9)) ?? 0
        }
        return Int64(date.timeIntervalSince1970) * 1_000_000_000 + nanos
    }

    // MARK: Reading

    public func read(_ object: String, size: Int64, head: Int64?) throws(RepositoryError) -> ArchiveSource {
        let expected = head.map { min($0, size) } ?? size
        let start = { @Sendable (offset: Int64) throws(RepositoryError) -> RcloneProcess in
            var arguments = common + ["cat"]
            if offset > 0 { arguments += ["--offset", String(offset)] }
            if head != nil { arguments += ["--count", String(expected - offset)] }
            arguments.append(remote(object))
            return try rclone.start(arguments, extra: extra)
        }
        return .stream(
            RepositoryStream(
                process: try start(0), location: display(object), expected: expected, tries: tries, resume: start))
    }

    // MARK: Writing

    /// Whether uploads go straight to the final name (object stores, where they appear whole).
    func uploadsDirectly() throws(RepositoryError) -> Bool {
        if let direct = features.direct { return direct }
        _ = try remoteFeatures()
        return features.direct ?? false
    }

    public func write(_ object: String, from file: String) throws(RepositoryError) -> Bool {
        listings.changeBegins()
        defer { listings.changeEnds() }
        let (folder, name) = Self.split(object)
        if try uploadsDirectly() {
            return try uploadUnlessTaken(file, to: object)
        }
        if try objects(in: folder).contains(where: { $0.name == name }) { return false }
        let temporary = (folder.isEmpty ? "" : folder + "/") + Self.temporaryName(for: name)
        do {
            try run(["copyto", "--no-check-dest", file, remote(temporary)], what: display(object))
            try run(["moveto", remote(temporary), remote(object)], what: display(object))
        } catch {
            _ = try? rclone.run(
                common + ["deletefile", "--retries", "1", remote(temporary)], extra: extra, deadline: deadline)
            throw error
        }
        return true
    }

    /// Uploads `file` under its final name unless an object already has that name (false then,
    /// the object untouched), in one rclone run: `--ignore-existing` asks for the name (a HEAD on
    /// S3) right before the upload, in the same process, and `--error-on-no-transfer` tells the
    /// skip apart (status 9; a failure keeps its own status). A lookup of the name in a run of
    /// its own would start rclone twice, and leave the gap of a process start between the
    /// question and the upload.
    func uploadUnlessTaken(_ file: String, to object: String) throws(RepositoryError) -> Bool {
        listings.changeBegins()
        defer { listings.changeEnds() }
        let output = try rclone.run(
            common + ["copyto", "--ignore-existing", "--error-on-no-transfer", file, remote(object)], extra: extra)
        if output.status == ExitCode.nothingTransferred { return false }
        guard output.status == 0 else {
            throw Self.failure(status: output.status, diagnostics: output.diagnostics, location: display(object))
        }
        return true
    }

    /// `USER/NAME` → (`USER`, `NAME`).
    static func split(_ object: String) -> (String, String) {
        guard let slash = object.lastIndex(of: "/") else { return ("", object) }
        return (String(object[..<slash]), String(object[object.index(after: slash)...]))
    }

    /// The marker in the hidden names of uploads not yet moved to their final name.
    static let uploadMarker = ".upload-"

    /// `.NAME.upload-HOST-PID-RAND`: hidden (no listing shows it), and telling which run made it.
    static func temporaryName(for name: String) -> String {
        ".\(name)\(uploadMarker)\(ProcessInfo.processInfo.hostName)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    }

    public func delete(_ object: String) throws(RepositoryError) {
        listings.changeBegins()
        defer { listings.changeEnds() }
        do { try run(["deletefile", remote(object)], what: display(object), bounded: true) } catch .missing {}
        _ = try? rclone.run(
            common + ["deletefile", "--retries", "1", remote(Self.sidecar(of: object))], extra: extra,
            deadline: deadline)
    }

    /// A server-side move (a copy, then the old object deleted: a run stopped between leaves both,
    /// which a listing shows once and the next conversion finishes).
    public func rename(_ object: String, to target: String) throws(RepositoryError) -> Bool {
        listings.changeBegins()
        defer { listings.changeEnds() }
        let (folder, name) = Self.split(target)
        if try objects(in: folder).contains(where: { $0.name == name }) { return false }
        try run(["moveto", remote(object), remote(target)], what: display(object))
        return true
    }

    /// `USER/.NAME.verify.json`.
    static func sidecar(of object: String) -> String {
        let (folder, name) = split(object)
        return (folder.isEmpty ? "" : folder + "/") + "." + name + ".verify.json"
    }

    public func readSidecar(of object: String) -> [UInt8]? {
        guard
            let output = try? rclone.run(
                common + ["cat", remote(Self.sidecar(of: object))], extra: extra, deadline: deadline),
            output.status == 0,
            !output.standardOutput.isEmpty
        else { return nil }
        return output.standardOutput
    }

    /// One `rclone cat` of the folder's sidecars: the records are JSON objects, one after the
    /// other, each naming its archive.
    public func readSidecars(in folder: String) -> [String: [UInt8]] {
        let key = "records \(folder)"
        if let known = listings.answer(key, as: [String: [UInt8]].self) { return known }
        let begun = listings.begin()
        let moment = ContinuousClock.now
        guard
            let output = try? rclone.run(
                common + ["cat", "--max-depth", "1", "--include", "/.*.verify.json", remote(folder)], extra: extra),
            output.status == 0
        else { return [:] }
        var result: [String: [UInt8]] = [:]
        struct Named: Decodable { let archive: String? }
        for object in Self.jsonObjects(output.standardOutput) {
            if let name = (try? JSONDecoder().decode(Named.self, from: Data(object)))?.archive { result[name] = object }
        }
        listings.keep(key, result, begun: begun, at: moment)
        return result
    }

    /// Splits concatenated JSON objects.
    static func jsonObjects(_ bytes: [UInt8]) -> [[UInt8]] {
        var objects: [[UInt8]] = []
        var depth = 0
        var start = 0
        var inString = false
        var escaped = false
        for (index, byte) in bytes.enumerated() {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "{"):
                if depth == 0 { start = index }
                depth += 1
            case UInt8(ascii: "}"):
                depth -= 1
                if depth == 0 { objects.append(Array(bytes[start...index])) }
                if depth < 0 { depth = 0 }
            default: break
            }
        }
        return objects
    }

    public func writeSidecar(_ bytes: [UInt8], of object: String) throws(RepositoryError) {
        listings.changeBegins()
        defer { listings.changeEnds() }
        let folder = try prepareWorkFolder()
        let file = folder + "/" + Self.temporaryName(for: "sidecar")
        defer { unlink(file) }
        do { try FileSystem.writeAtomically(bytes, to: file) } catch { throw .local(error) }
        try run(["copyto", "--no-check-dest", file, remote(Self.sidecar(of: object))], what: display(object))
    }

    public func readSmall(_ object: String) throws(RepositoryError) -> [UInt8]? {
        let bytes: [UInt8]
        do { bytes = try run(["cat", remote(object)], what: display(object), bounded: true) } catch .missing {
            return nil
        }
        // `rclone cat` of a name that is not there prints nothing and succeeds (the name is read
        // as a filter): an empty answer is an empty object only when the listing has it.
        if bytes.isEmpty {
            let (folder, name) = Self.split(object)
            guard try objects(in: folder).contains(where: { $0.name == name }) else { return nil }
        }
        return bytes
    }

    public func writeSmall(_ bytes: [UInt8], to object: String) throws(RepositoryError) {
        listings.changeBegins()
        defer { listings.changeEnds() }
        let folder = try prepareWorkFolder()
        let file = folder + "/" + Self.temporaryName(for: "small")
        defer { unlink(file) }
        do { try FileSystem.writeAtomically(bytes, to: file) } catch { throw .local(error) }
        try run(["copyto", "--no-check-dest", file, remote(object)], what: display(object))
    }

    /// ``writeSmall(_:to:)`` stopped after `seconds` (then it fails as a run stopped at its
    /// deadline: the object is the one before, or this one whole).
    public func writeSmall(_ bytes: [UInt8], to object: String, within seconds: Double) throws(RepositoryError) {
        listings.changeBegins()
        defer { listings.changeEnds() }
        let folder = try prepareWorkFolder()
        let file = folder + "/" + Self.temporaryName(for: "small")
        defer { unlink(file) }
        do { try FileSystem.writeAtomically(bytes, to: file) } catch { throw .local(error) }
        let output = try rclone.run(
            common + ["copyto", "--no-check-dest", file, remote(object)], extra: extra, deadline: seconds)
        if output.timedOut {
            throw .transport(
                location: display(object), detail: "not written within the \(seconds) s it was given",
                temporary: true)
        }
        guard output.status == 0 else {
            throw Self.failure(status: output.status, diagnostics: output.diagnostics, location: display(object))
        }
    }

    public func deleteSmall(_ object: String) throws(RepositoryError) {
        listings.changeBegins()
        defer { listings.changeEnds() }
        do { try run(["deletefile", remote(object)], what: display(object), bounded: true) } catch .missing {}
    }

    public func stagingFolder(for user: UserID) throws -> String {
        try prepareWorkFolder()
    }

    /// The repository takes a small probe object in the user's folder (which is removed), and
    /// the local work folder, where the archive is written before its upload, has the room.
    public func checkRoom(for user: UserID, bytes: Int64) throws(RepositoryError) {
        listings.changeBegins()
        defer { listings.changeEnds() }
        try prepare()
        let folder = try prepareWorkFolder()
        if let free = FreeSpace.of(folder)?.bytes, bytes > free - FreeSpace.spare {
            throw .noRoom(folder, free: free, needed: bytes)
        }
        let probe = user.rawValue + "/" + Self.temporaryName(for: "probe")
        let file = folder + "/" + Self.temporaryName(for: "probe")
        defer { unlink(file) }
        do { try FileSystem.writeAtomically([], to: file) } catch { throw .local(error) }
        try run(["copyto", "--no-check-dest", file, remote(probe)], what: display(probe))
        _ = try? rclone.run(common + ["deletefile", "--retries", "1", remote(probe)], extra: extra)
    }

    /// Hidden uploads of runs that died: this host's whose process is gone, any host's older than
    /// a day. (An unfinished S3 multipart upload lists nothing; `sync` asks the backend to
    /// clean those up.)
    public func removeDeadTemporaries(users: [UserID]) -> [String] {
        // Listed as any listing is (most runs find nothing to remove); each removal forgets
        // what was listed.
        var removed = StaleTemporaries.clean(workFolder)
        let ids = users.isEmpty ? ((try? self.users()) ?? []) : users
        let host = ProcessInfo.processInfo.hostName
        let now = Int64(Date().timeIntervalSince1970) * 1_000_000_000
        for user in ids {
            for object in (try? objects(in: user.rawValue)) ?? [] where object.name.hasPrefix(".") {
                guard let marker = object.name.range(of: Self.uploadMarker, options: .backwards) else { continue }
                var parts = object.name[marker.upperBound...].split(
                    separator: "-", omittingEmptySubsequences: false)
                guard parts.count >= 3, let pid = Int32(parts[parts.count - 2]) else { continue }
                parts.removeLast(2)
                let dead =
                    parts.joined(separator: "-") == host && pid != getpid() && kill(pid, 0) != 0 && errno == ESRCH
                let old = object.modified > 0 && now - object.modified > 86_400 * 1_000_000_000
                guard dead || old else { continue }
                let key = user.rawValue + "/" + object.name
                listings.changeBegins()
                defer { listings.changeEnds() }
                if (try? run(["deletefile", remote(key)], what: display(key))) != nil {
                    removed.append(display(key))
                }
            }
            // (S3) An upload of this host killed half-way: the unfinished multipart upload of an
            // archive of this host and user (the caller holds the user's lock: no live run of this
            // host is uploading one; another host's names hold its own host).
            for key in unfinishedUploads(of: user) {
                listings.changeBegins()
                defer { listings.changeEnds() }
                _ = try? rclone.run(
                    common + ["backend", "cleanup", remote(key), "-o", "max-age=0s"], extra: extra,
                    deadline: deadline)
                removed.append(display(key) + " (unfinished upload)")
            }
            // A legacy upload killed after its host marker was written: the marker without its
            // archive, and (S3) the unfinished multipart upload of exactly that name.
            for archive in orphanedArchives(of: user) {
                let key = user.rawValue + "/" + archive
                listings.changeBegins()
                defer { listings.changeEnds() }
                if location.hasPrefix("s3:") {
                    _ = try? rclone.run(
                        common + ["backend", "cleanup", remote(key), "-o", "max-age=0s"], extra: extra,
                        deadline: deadline)
                }
                if (try? deleteSmall(Hosts.marker(of: key, host: context.host))) != nil {
                    removed.append(display(key) + " (unfinished upload)")
                }
            }
        }
        return removed
    }

    /// The names (`USER/NAME`) of `user`'s archives of this host with an unfinished multipart
    /// upload (S3; none elsewhere).
    func unfinishedUploads(of user: UserID) -> [String] {
        guard location.hasPrefix("s3:") else { return [] }
        // Listed once per repository value (a run of many users asks once).
        let all: [String]
        if let cached = features.multipartKeys {
            all = cached
        } else {
            struct Upload: Decodable { let Key: String? }
            guard
                let output = try? rclone.run(
                    common + ["backend", "list-multipart-uploads", remote("")], extra: extra, deadline: deadline),
                output.status == 0, !output.timedOut,
                let buckets = try? JSONDecoder().decode([String: [Upload]?].self, from: Data(output.standardOutput))
            else { return [] }
            all = buckets.values.compactMap { $0 }.joined().compactMap(\.Key)
            features.set(multipartKeys: all)
        }
        var keys: Set<String> = []
        for key in all {
            let parts = key.split(separator: "/").map(String.init)
            guard parts.count >= 2, parts[parts.count - 2] == user.rawValue,
                ArchiveName(fileName: parts[parts.count - 1])?.host == context.host
            else { continue }
            keys.insert(user.rawValue + "/" + parts[parts.count - 1])
        }
        return keys.sorted()
    }

    /// Asks an object store to drop its unfinished multipart uploads older than a day (S3:
    /// `rclone backend cleanup`); other backends have none.
    public func removeUnfinishedUploads() {
        listings.changeBegins()
        defer { listings.changeEnds() }
        guard location.hasPrefix("s3:") else { return }
        _ = try? rclone.run(
            common + ["backend", "cleanup", remote(""), "-o", "max-age=24h"], extra: extra, deadline: deadline)
    }
}

/// Remembers what rclone said of a remote (a `Sendable` box: repositories are values): its
/// features, and that the repository exists once that was seen (a repository is never removed
/// by granary, so one run asks once).
final class FeatureCache: @unchecked Sendable {
    private let lock = NSLock()
    private var value: Bool?
    private var seen: Bool?
    var direct: Bool? { lock.withLock { value } }
    func set(direct: Bool) { lock.withLock { value = direct } }
    var exists: Bool? { lock.withLock { seen } }
    func set(exists: Bool) { lock.withLock { seen = exists } }
    private var described: (crypt: Bool, localRoot: String?)?
    var remote: (crypt: Bool, localRoot: String?)? { lock.withLock { described } }
    func set(remote: (crypt: Bool, localRoot: String?)) { lock.withLock { described = remote } }
    private var multipart: [String]?
    /// The keys of the unfinished multipart uploads, listed once (``RcloneRepository/unfinishedUploads(of:)``).
    var multipartKeys: [String]? { lock.withLock { multipart } }
    func set(multipartKeys: [String]) { lock.withLock { multipart = multipartKeys } }
}

/// What this repository value listed a moment ago (a `Sendable` box, shared by its copies): a
/// command asks for the same folder's listing and records several times over (a delta backup of
/// one user five times, `check` its records three), and each answer is an rclone run, a process
/// and a round trip. An answer is given again for at most ``lifetime`` after it was listed, and
/// never after anything this process writes or deletes through the repository: every such call
/// forgets them all, before and after it runs (``changeBegins()``), and an answer taken while one
/// ran is not kept. What another process changed in the repository shows up within
/// ``lifetime``: no later than it would behind one slow listing; and nothing listed before this
/// process took a user's lock is given after it (``UserLock/acquisitions``: the lock's holder
/// before may have written, and a prune after a backup must see it). No decision that claims a name
/// rests on a remembered answer: a name is claimed by the upload itself (`--ignore-existing`),
/// or, where uploads go through a temporary name, after a listing taken within the write (a
/// change under way: nothing is remembered or given then).
final class ListingMemo: @unchecked Sendable {
    /// How long an answer is given again.
    static let lifetime: Duration = .seconds(2)
    private let lock = NSLock()
    /// Off until ``RcloneRepository/rememberListings()``: a repository value that watches others
    /// change the repository (`follow`, a test) asks each time.
    private var enabled = false
    func enable() { lock.withLock { enabled = true } }
    /// Counts the changes begun and ended: an answer is kept only when none began or ended
    /// while it was taken.
    private var generation: UInt64 = 0
    private var changing = 0
    private var entries: [String: (at: ContinuousClock.Instant, locks: UInt64, value: any Sendable)] = [:]

    /// Where an answer is taken from: the changes counted, and the user locks this process had
    /// taken (``UserLock/acquisitions``: an answer from before a lock is not given after it).
    struct Mark {
        let generation: UInt64
        let locks: UInt64
    }

    /// The mark an answer is taken from: nil while a change runs (nothing is kept then).
    func begin() -> Mark? {
        let locks = UserLock.acquisitions
        return lock.withLock { enabled && changing == 0 ? Mark(generation: generation, locks: locks) : nil }
    }

    func answer<T: Sendable>(_ key: String, as type: T.Type) -> T? {
        lock.withLock {
            guard changing == 0, let entry = entries[key], ContinuousClock.now - entry.at < Self.lifetime,
                entry.locks == UserLock.acquisitions
            else {
                return nil
            }
            return entry.value as? T
        }
    }

    /// Keeps `value`, taken since `begun` (``begin()``), unless something changed meanwhile.
    func keep(_ key: String, _ value: some Sendable, begun: Mark?, at moment: ContinuousClock.Instant) {
        lock.withLock {
            guard let begun, begun.generation == generation, changing == 0 else { return }
            entries[key] = (moment, begun.locks, value)
        }
    }

    /// A call that writes or deletes in the repository begins: every answer is forgotten, and
    /// none is kept until it ended (``changeEnds()``, forgetting them again).
    func changeBegins() {
        lock.withLock {
            generation &+= 1
            changing += 1
            entries = [:]
        }
    }

    func changeEnds() {
        lock.withLock {
            generation &+= 1
            changing -= 1
            entries = [:]
        }
    }
}
