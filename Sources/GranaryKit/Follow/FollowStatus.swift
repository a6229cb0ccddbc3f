import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What `granary follow` knows of each user's following, kept as it runs: written to the
/// repository after each round (`.granary-follow/HOST.json`, one small file per host, replaced
/// atomically) for `check`, and as Prometheus text for `follow --textfile` (docs/follow.md).
///
/// The lag of a user at a moment `now` is `now - shippedThrough`: `shippedThrough` is the start
/// of the newest round that left every commit then in the user's `-wal` files published in a
/// segment (a round that failed, paused, or stopped at `bytes_per_user` does not move it). An
/// idle user followed every round has a lag of about one interval; a user whose following is
/// paused, or a follower that stopped, has a lag that grows from that round on.
public struct FollowStatus: Codable, Sendable, Equatable {
    public struct User: Codable, Sendable, Equatable {
        /// The generation followed (its base archive's file name), nil while none could start.
        public var generation: String?
        public var sequence = 0
        /// Microseconds since 1970: every commit before it is in a published segment.
        public var shippedThrough: Int64?
        /// When this follower's current unbroken stretch of rounds for the user began
        /// (microseconds): every round since left nothing committed behind or read on where the
        /// last left off, none failed or paused, in this generation and this process. A restart
        /// of `follow`, a failed round, a pause or a new generation starts a new stretch. `restore
        /// --at` takes the state as proof only for moments after the window's end within it
        /// (``FollowRestore/attested(_:generations:entry:)``).
        public var steadySince: Int64?
        /// The newest observation of the newest published segment (microseconds).
        public var lastShipped: Int64?
        /// Why this user's following is paused (nil: following).
        public var paused: String?

        public init() {}
    }

    public var format = 1
    public var host: String
    /// When the follower wrote this (microseconds since 1970).
    public var updated: Int64 = 0
    public var users: [String: User] = [:]

    public init(host: String) { self.host = host }

    /// The file's object name in the repository: `.granary-follow/HOST.json` (a name no user
    /// folder can have).
    public static func object(host: String) -> String { ".granary-follow/" + host + ".json" }

    /// The state the follower of `host` last wrote to `repository` (local or remote), nil when
    /// there is none (or it does not decode, or cannot be read).
    public static func read(from repository: any Repository, host: String) -> FollowStatus? {
        if let local = repository.localPath { return read(repository: local, host: host) }
        guard let bytes = try? repository.readSmall(object(host: host)), bytes.count < 64 << 20 else { return nil }
        return try? JSONDecoder().decode(FollowStatus.self, from: Data(bytes))
    }

    /// Replaces the state in `repository`: in a local one, a temporary file synced and renamed
    /// in a private folder; in a remote one, one upload of the small object.
    public func write(to repository: any Repository) throws {
        if let local = repository.localPath { return try write(repository: local) }
        try repository.writeSmall(json(), to: Self.object(host: host))
    }

    /// Writes it to `repository`, a remote one's upload stopped after `seconds` (then it fails).
    public func write(to repository: any Repository, within seconds: Double) throws {
        guard let remote = repository as? RcloneRepository else { return try write(to: repository) }
        try remote.writeSmall(json(), to: Self.object(host: host), within: seconds)
    }

    /// The state the follower of `host` last wrote to the local repository at `repository`, nil
    /// when there is none (or it does not decode).
    public static func read(repository: String, host: String) -> FollowStatus? {
        let path = repository + "/" + object(host: host)
        guard let data = FileManager.default.contents(atPath: path), data.count < 64 << 20 else { return nil }
        return try? JSONDecoder().decode(FollowStatus.self, from: data)
    }

    /// Replaces the file in the local repository at `repository` (a temporary file synced, renamed).
    public func write(repository: String) throws {
        let folder = repository + "/.granary-follow"
        if !FileSystem.isDirectory(folder) { try FileSystem.makeDirectory(folder, mode: 0o700) }
        try FileSystem.writeAtomically(json(), to: repository + "/" + Self.object(host: host))
    }

    /// The state as JSON: the very bytes `JSONEncoder` writes with `.sortedKeys` (keys in byte
    /// order, optionals left out when nil, `/` and control characters escaped as it does; tested
    /// against it), written directly. It is written every interval with every user in it: through
    /// `JSONEncoder` that was about a tenth of the follower's CPU with 1,000 users followed, most
    /// of them idle (a follower of 10,000 users would spend several percent of a core on it).
    public func json() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(64 + users.count * 192)
        out.append(contentsOf: #"{"format":"#.utf8)
        Self.number(Int64(format), into: &out)
        out.append(contentsOf: #","host":"#.utf8)
        Self.string(host, into: &out)
        out.append(contentsOf: #","updated":"#.utf8)
        Self.number(updated, into: &out)
        out.append(contentsOf: #","users":{"#.utf8)
        var first = true
        for name in users.keys.sorted(by: { $0.utf8.lexicographicallyPrecedes($1.utf8) }) {
            if !first { out.append(UInt8(ascii: ",")) }
            first = false
            Self.string(name, into: &out)
            out.append(UInt8(ascii: ":"))
            let user = users[name]!
            out.append(UInt8(ascii: "{"))
            if let generation = user.generation {
                out.append(contentsOf: #""generation":"#.utf8)
                Self.string(generation, into: &out)
                out.append(UInt8(ascii: ","))
            }
            if let lastShipped = user.lastShipped {
                out.append(contentsOf: #""lastShipped":"#.utf8)
                Self.number(lastShipped, into: &out)
                out.append(UInt8(ascii: ","))
            }
            if let paused = user.paused {
                out.append(contentsOf: #""paused":"#.utf8)
                Self.string(paused, into: &out)
                out.append(UInt8(ascii: ","))
            }
            out.append(contentsOf: #""sequence":"#.utf8)
            Self.number(Int64(user.sequence), into: &out)
            if let shippedThrough = user.shippedThrough {
                out.append(contentsOf: #","shippedThrough":"#.utf8)
                Self.number(shippedThrough, into: &out)
            }
            if let steadySince = user.steadySince {
                out.append(contentsOf: #","steadySince":"#.utf8)
                Self.number(steadySince, into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
        out.append(contentsOf: "}}".utf8)
        return out
    }

    static func hexDigit(_ value: UInt8) -> UInt8 {
        value < 10 ? UInt8(ascii: "0") + value : UInt8(ascii: "a") + value - 10
    }

    static func number(_ value: Int64, into out: inout [UInt8]) {
        out.append(contentsOf: String(value).utf8)
    }

    /// A JSON string as `JSONEncoder` writes one: `"` `\` `/` escaped, the control characters
    /// below 0x20 as `\b \f \n \r \t` or `\u00XX`, everything else as its UTF-8.
    static func string(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): out.append(contentsOf: #"\\"#.utf8)
            case UInt8(ascii: "/"): out.append(contentsOf: #"\/"#.utf8)
            case 0x08: out.append(contentsOf: #"\b"#.utf8)
            case 0x0C: out.append(contentsOf: #"\f"#.utf8)
            case 0x0A: out.append(contentsOf: #"\n"#.utf8)
            case 0x0D: out.append(contentsOf: #"\r"#.utf8)
            case 0x09: out.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20:
                out.append(contentsOf: #"\u00"#.utf8)
                out.append(hexDigit(byte >> 4))
                out.append(hexDigit(byte & 0xF))
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The user's lag at `now` in microseconds (nil: nothing ever shipped through).
    public func lag(of user: String, now: Int64) -> Int64? {
        users[user]?.shippedThrough.map { max(0, now - $0) }
    }

    /// Records one user's round: `began` when it started; `caughtUp` when it left nothing
    /// committed behind; `paused` when the user's following is paused and why.
    public mutating func record(
        user: String, generation: String?, sequence: Int, lastShipped: Int64?, began: Int64, caughtUp: Bool,
        paused: String?
    ) {
        var entry = users[user] ?? User()
        let previous = entry.generation
        entry.generation = generation
        entry.sequence = sequence
        if let lastShipped { entry.lastShipped = lastShipped }
        if paused != nil || generation == nil || (previous != nil && previous != generation) {
            entry.steadySince = nil
        } else if caughtUp && entry.steadySince == nil {
            entry.steadySince = began
        }
        if caughtUp && paused == nil && generation != nil { entry.shippedThrough = began }
        entry.paused = paused
        users[user] = entry
    }

    /// A followed user with nothing waiting is shipped through `through` (microseconds): the
    /// follower saw no change of theirs since then.
    public mutating func caughtUp(user: String, through: Int64) {
        guard var entry = users[user], entry.paused == nil, entry.generation != nil else { return }
        entry.shippedThrough = max(entry.shippedThrough ?? through, through)
        users[user] = entry
    }

    /// The follower's metrics in Prometheus' text exposition format, each user a label.
    public func prometheusText(now: Date) -> String {
        let micros = ArchiveName.micros(now)
        let label = PrometheusText.label
        var text = PrometheusText()
        func seconds(_ micros: Int64) -> String { String(format: "%.3f", Double(micros) / 1e6) }
        let byUser = users.keys.sorted().map { ("{user=\"\(label($0))\"}", $0, users[$0]!) }
        text.family(
            "granary_follow_lag_seconds",
            "Seconds since the start of the newest round that left every commit of the user shipped.",
            byUser.compactMap { labels, name, _ in lag(of: name, now: micros).map { (labels, seconds($0)) } })
        text.family(
            "granary_follow_last_shipped_timestamp_seconds",
            "When granary observed the newest commit it shipped for the user, in seconds since 1970.",
            byUser.compactMap { labels, _, user in user.lastShipped.map { (labels, seconds($0)) } })
        text.family(
            "granary_follow_paused",
            "1 when the user's following is paused (no generation, or its round fails), else 0.",
            byUser.map { labels, _, user in (labels, user.paused == nil ? "0" : "1") })
        text.family(
            "granary_follow_timestamp_seconds", "When follow wrote this file, in seconds since 1970.",
            [("", String(Int64(now.timeIntervalSince1970)))])
        return text.output
    }
}
