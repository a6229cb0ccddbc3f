import Foundation
import GranaryDigest

/// `MANIFEST.json`, the first member of every archive: what the archive holds and how to check it.
///
/// Format version 1 lists every file in `files`. An archive with more than
/// `fileListThreshold` external-data files (a Core Data store with 80,000 attachments makes a
/// format-1 manifest of 20 MiB, a million of them 250 MiB) is written in format 2: `files` lists
/// the stores only, and the external-data files are listed in the second member,
/// `MANIFEST.files`, one line each (`SHA256 SIZE MODE PATH`), in the order the archive holds them,
/// with that member's own size and SHA-256 in `fileList`. A reader checks that list as it goes,
/// member after member, so reading it takes the same memory whatever the number of files.
///
/// One size limit, `sizeLimit`, holds for `MANIFEST.json` when it is written (`layout()`: a
/// backup whose manifest would be larger fails, before anything is published) and when it is
/// read. Readers refuse a newer `format` (they cannot know what it means). Keys are sorted and
/// dates are RFC 3339 in UTC, so the same content always serialises to the same bytes.
public struct Manifest: Codable, Sendable, Equatable {
    /// The member name.
    public static let memberName = "MANIFEST.json"
    /// The second member of a format-2 archive.
    public static let fileListName = "MANIFEST.files"
    /// Archives with more external-data files than this list them in `MANIFEST.files`.
    public static let fileListThreshold = 10_000
    /// The largest `MANIFEST.json` a writer writes and a reader accepts.
    public static let sizeLimit = 16 << 20
    /// Where stores go inside an archive.
    public static let storesFolder = "stores/"
    /// Where a final archive keeps the user's other regular files (notes, preferences: anything
    /// that is not part of a store), by their path relative to the user's folder.
    public static let plainFilesFolder = "files/"

    /// One file in the archive.
    public struct File: Codable, Sendable, Equatable {
        /// What a file in an archive is (in the manifest: `"store"`, `"external"` or `"plain"`).
        public enum Kind: String, Codable, Sendable {
            /// A database snapshot.
            case store
            /// A Core Data external-data file.
            case external
            /// Any other regular file of the user's folder (final archives: `files/…`).
            case plain
            /// Delta archives (issue 35): a store's page hashes, `stores/NAME.pages` (``PageFiles``).
            case pages
            /// Delta archives (issue 35): a store's changed pages, `stores/NAME.delta` (``PageFiles``).
            case pageDelta
        }

        /// Member path, for example `stores/Local.sqlite`.
        public var path: String
        public var size: Int64
        /// Lower-case hex SHA-256 of the content.
        public var sha256: String
        public var kind: Kind
        /// The file's permission bits in the user's folder (external-data files; absent in
        /// archives made before granary recorded them).
        public var mode: UInt32?
        /// The file's owner, group and mode in the user's folder (plain files).
        public var owner: Ownership?

        public init(
            path: String, size: Int64, sha256: String, kind: Kind, mode: UInt32? = nil, owner: Ownership? = nil
        ) {
            self.path = path
            self.size = size
            self.sha256 = sha256
            self.kind = kind
            self.mode = mode
            self.owner = owner
        }
    }

    /// Who owned a file or folder in the user's folder, and its permission bits: by number, and by
    /// name when the number had one on the host that made the archive.
    public struct Ownership: Codable, Sendable, Equatable {
        public var uid: UInt32
        public var gid: UInt32
        /// Permission bits (`st_mode & 07777`).
        public var mode: UInt32
        public var user: String?
        public var group: String?

        public init(uid: UInt32, gid: UInt32, mode: UInt32, user: String? = nil, group: String? = nil) {
            self.uid = uid
            self.gid = gid
            self.mode = mode
            self.user = user
            self.group = group
        }

        /// The ownership of a file, with the names the host gives its uid and gid.
        public static func of(uid: UInt32, gid: UInt32, mode: UInt32) -> Ownership {
            Ownership(
                uid: uid, gid: gid, mode: mode & 0o7777, user: AccountNames.user(uid), group: AccountNames.group(gid))
        }
    }

    /// Core Data metadata of a store that has `Z_METADATA`.
    public struct CoreData: Codable, Sendable, Equatable {
        /// `NSStoreUUID` / `Z_METADATA.Z_UUID`.
        public var storeUUID: String?
        /// `NSStoreModelVersionHashes`: entity name → base64 of the hash.
        public var modelVersionHashes: [String: String]
        /// Entity name → rows in its table.
        public var entityRowCounts: [String: Int64]

        public init(storeUUID: String?, modelVersionHashes: [String: String], entityRowCounts: [String: Int64]) {
            self.storeUUID = storeUUID
            self.modelVersionHashes = modelVersionHashes
            self.entityRowCounts = entityRowCounts
        }
    }

    /// One store (a database snapshot) in the archive.
    public struct Store: Codable, Sendable, Equatable {
        /// The store's path relative to the user's folder, for example `Local.sqlite`.
        public var name: String
        /// Member path of the snapshot, for example `stores/Local.sqlite`.
        public var path: String
        public var pageSize: Int
        public var pageCount: Int
        /// The live store's journal mode when it was snapshotted (`wal`, `delete`, …).
        public var journalMode: String
        /// The SQLite library version that made the snapshot.
        public var sqliteVersion: String
        /// `quick`, `full` or `none`: which check ran on the snapshot.
        public var check: String
        /// `ok`, or the problems the check found.
        public var integrity: String
        /// Member folder of the Core Data external data, when the store has one.
        public var externalDataPath: String?
        public var coreData: CoreData?
        /// The live database file's owner and mode when it was snapshotted.
        public var owner: Ownership?

        public init(
            name: String, path: String, pageSize: Int, pageCount: Int, journalMode: String, sqliteVersion: String,
            check: String, integrity: String, externalDataPath: String? = nil, coreData: CoreData? = nil
        ) {
            self.name = name
            self.path = path
            self.pageSize = pageSize
            self.pageCount = pageCount
            self.journalMode = journalMode
            self.sqliteVersion = sqliteVersion
            self.check = check
            self.integrity = integrity
            self.externalDataPath = externalDataPath
            self.coreData = coreData
        }
    }

    /// The manifest's format: what it holds decides it when it is encoded (``encoded()``), so it
    /// is never set by hand.
    public internal(set) var format: ManifestFormat
    public var tool: String
    public var toolVersion: String
    public var user: String
    public var host: String
    public var created: Date
    /// An optional label, for example `pre-restore`.
    public var label: String?
    /// Format 2: the `MANIFEST.files` member that lists the external-data files.
    public var fileList: FileList?
    public var compression: Compression
    public var stores: [Store]
    public var files: [File]
    /// What the archive is: a regular backup (`backup`, also when absent), a `safety` archive (what
    /// a restore or reset replaced), or a `final` archive (what a retired user left).
    public var kind: ArchiveKind?
    /// For a safety archive: the archive the restore put in place (nil for a reset).
    public var restoredFrom: String?
    /// The user's folder's owner and mode when the archive was made.
    public var folder: Ownership?
    /// The folders inside the user's folder that hold stores or their external data (`Data`,
    /// `.Notes_SUPPORT`, `.Notes_SUPPORT/_EXTERNAL_DATA`), by path relative to the user's folder,
    /// with their owner and mode: a restore that makes them makes them alike.
    public var folders: [String: Ownership]?
    /// Archives written with `backup --delta` (issue 35): page hashes, and for a delta its base.
    public var delta: DeltaInfo?
    /// SHA-256 of the manifest's own bytes with this value left empty (`"checksum" : ""`).
    ///
    /// Members are checked against the manifest, but nothing else would check the manifest:
    /// zstd frames carry no checksum as libarchive writes them, and an uncompressed archive has
    /// none at all, so a flipped bit in, say, a model version hash would go unnoticed. Set by
    /// `encoded()`, checked by `decode` when present.
    public var checksum: String?

    public init(
        user: String, host: String, created: Date, label: String?, compression: Compression, stores: [Store],
        files: [File]
    ) {
        self.format = .plain
        self.tool = "granary"
        self.toolVersion = GranaryVersion.current
        self.user = user
        self.host = host
        self.created = created
        self.label = label
        self.compression = compression
        self.stores = stores
        self.files = files
    }

    /// The member that lists a format-2 archive's external-data files.
    public struct FileList: Codable, Sendable, Equatable {
        /// `MANIFEST.files`.
        public var member: String
        /// Lines (files) in it.
        public var count: Int
        public var size: Int64
        /// Lower-case hex SHA-256 of its content.
        public var sha256: String
    }

    /// What goes at the head of an archive: `MANIFEST.json`, and the files to list in
    /// `MANIFEST.files` (empty in format 1).
    public struct Layout: Sendable {
        public var manifest: [UInt8]
        public var listed: [File]
        /// The size of `MANIFEST.files`.
        public var listSize: Int64
    }

    /// The manifest laid out for an archive: format 1, or format 2 when more than
    /// `fileListThreshold` external-data files are listed. Throws `ManifestError.tooLarge` when
    /// `MANIFEST.json` would be over `sizeLimit`.
    public func layout() throws(ManifestError) -> Layout {
        var head = self
        var listed: [File] = []
        var listSize: Int64 = 0
        if files.lazy.filter({ $0.kind == .external }).count > Self.fileListThreshold {
            listed = files.filter { $0.kind == .external }
            head.files = files.filter { $0.kind != .external }
            var hasher = SHA256()
            for file in listed {
                let line = Self.fileListLine(file)
                hasher.update(data: line)
                listSize += Int64(line.count)
            }
            head.fileList = FileList(
                member: Self.fileListName, count: listed.count, size: listSize, sha256: hasher.finalize().hex)
        }
        let bytes = head.encoded()
        guard bytes.count <= Self.sizeLimit else {
            throw .tooLarge(
                user: user, size: bytes.count, stores: stores.count,
                entities: stores.reduce(0) { $0 + ($1.coreData?.entityRowCounts.count ?? 0) })
        }
        return Layout(manifest: bytes, listed: listed, listSize: listSize)
    }

    /// One line of `MANIFEST.files`: `SHA256 SIZE MODE PATH` and a newline. `MODE` is the file's
    /// permission bits in octal, or `-` when not recorded. The path is its string's
    /// UTF-8 with `\` written `\\` and each byte below 0x20, and 0x7F, written `\xHH`: a file name
    /// may hold any byte but NUL, a line feed too.
    public static func fileListLine(_ file: File) -> [UInt8] {
        var line = Array("\(file.sha256) \(file.size) \(file.mode.map { String($0, radix: 8) } ?? "-") ".utf8)
        let hex = Array("0123456789abcdef".utf8)
        for byte in file.path.utf8 {
            if byte == 0x5C {
                line += [0x5C, 0x5C]
            } else if byte < 0x20 || byte == 0x7F {
                line += [0x5C, 0x78, hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            } else {
                line.append(byte)
            }
        }
        line.append(0x0A)
        return line
    }

    /// Parses one line of `MANIFEST.files` (without its newline); `nil` when it is not one.
    public static func fileListEntry(_ line: some Collection<UInt8>) -> File? {
        guard let first = line.firstIndex(of: 0x20) else { return nil }
        let digest = line[..<first]
        let rest = line[line.index(after: first)...]
        guard let second = rest.firstIndex(of: 0x20) else { return nil }
        let sizeText = rest[..<second]
        let afterSize = rest[rest.index(after: second)...]
        guard let third = afterSize.firstIndex(of: 0x20) else { return nil }
        let modeText = String(decoding: afterSize[..<third], as: UTF8.self)
        let mode: UInt32?
        if modeText == "-" {
            mode = nil
        } else {
            guard modeText.count <= 6, let value = UInt32(modeText, radix: 8) else { return nil }
            mode = value
        }
        guard digest.count == 64, digest.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 >= 0x61 && $0 <= 0x66) }),
            !sizeText.isEmpty, sizeText.count <= 18, sizeText.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
            let size = Int64(String(decoding: sizeText, as: UTF8.self))
        else { return nil }
        func nibble(_ byte: UInt8) -> UInt8? {
            switch byte {
            case 0x30...0x39: return byte - 0x30
            case 0x61...0x66: return byte - 0x61 + 10
            default: return nil
            }
        }
        var path: [UInt8] = []
        var bytes = Array(afterSize[afterSize.index(after: third)...])[...]
        while let byte = bytes.popFirst() {
            guard byte >= 0x20, byte != 0x7F else { return nil }
            guard byte == 0x5C else {
                path.append(byte)
                continue
            }
            switch bytes.popFirst() {
            case 0x5C: path.append(0x5C)
            case 0x78:
                guard let high = bytes.popFirst().flatMap(nibble), let low = bytes.popFirst().flatMap(nibble) else {
                    return nil
                }
                path.append(high << 4 | low)
            default: return nil
            }
        }
        guard !path.isEmpty, let text = String(validating: path, as: UTF8.self) else { return nil }
        return File(
            path: FolderName.canonical(text), size: size, sha256: String(decoding: digest, as: UTF8.self),
            kind: .external, mode: mode)
    }

    /// The manifest as JSON bytes, with its `checksum` filled in.
    public func encoded() -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .iso8601
        var copy = self
        copy.format = ManifestFormat(of: self)
        copy.checksum = ""
        // Encoding our own plain value types cannot fail.
        let blank = Array(try! encoder.encode(copy)) + [0x0A]
        guard let range = Self.checksumRange(in: blank) else { return blank }
        let digest = Array(SHA256.hash(data: blank).hex.utf8)
        return Array(blank[..<range.lowerBound]) + digest + Array(blank[range.lowerBound...])
    }

    /// `"checksum" : "` as the encoder writes it.
    private static let checksumKey = Array(#""checksum" : ""#.utf8)

    /// Where the checksum's value (empty or 64 hex digits) starts and ends in `bytes`.
    static func checksumRange(in bytes: [UInt8]) -> Range<Int>? {
        let key = checksumKey
        guard bytes.count >= key.count else { return nil }
        for start in 0...(bytes.count - key.count)
        where bytes[start] == key[0] && Array(bytes[start..<start + key.count]) == key {
            let from = start + key.count
            guard let end = bytes[from...].firstIndex(of: 0x22) else { return nil }
            return from..<end
        }
        return nil
    }

    /// Checks the manifest's checksum. Every manifest granary writes has one, so a missing or
    /// unreadable checksum is damage too (a flip in the key's own letters would hide it).
    static func verifyChecksum(_ bytes: [UInt8], source: String) throws(ManifestError) {
        guard let range = checksumRange(in: bytes), range.count == 64 else {
            throw .invalid(source: source, reason: "manifest is damaged: it has no readable \"checksum\"")
        }
        let recorded = String(decoding: bytes[range], as: UTF8.self)
        let blank = Array(bytes[..<range.lowerBound]) + Array(bytes[range.upperBound...])
        let actual = SHA256.hash(data: blank).hex
        guard recorded == actual else {
            throw .invalid(
                source: source,
                reason: "manifest is damaged: its checksum is \(recorded), its content hashes to \(actual)")
        }
    }

    /// Parses manifest bytes; `source` names the archive in errors.
    public static func decode(_ bytes: [UInt8], source: String) throws(ManifestError) -> Manifest {
        guard bytes.count <= sizeLimit else {
            throw .invalid(source: source, reason: "manifest is over \(sizeLimit) bytes")
        }
        // Look at the format first, so a newer manifest is reported as newer, not as invalid.
        struct Header: Decodable { var format: Int }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let data = Data(bytes)
        let header: Header
        do {
            header = try decoder.decode(Header.self, from: data)
        } catch {
            throw .invalid(source: source, reason: "manifest is not valid JSON or has no format version")
        }
        guard ManifestFormat(rawValue: header.format) != nil else {
            throw .unsupportedFormat(source: source, format: header.format)
        }
        try verifyChecksum(bytes, source: source)
        let manifest: Manifest
        do {
            manifest = try decoder.decode(Manifest.self, from: data).withCanonicalNames()
        } catch let DecodingError.keyNotFound(key, _) {
            throw .invalid(source: source, reason: "manifest lacks \"\(key.stringValue)\"")
        } catch let DecodingError.typeMismatch(_, context), let DecodingError.valueNotFound(_, context) {
            let key = context.codingPath.map(\.stringValue).joined(separator: ".")
            throw .invalid(source: source, reason: "manifest has a wrong value at \"\(key)\"")
        } catch {
            throw .invalid(source: source, reason: "manifest cannot be read: \(error)")
        }
        if let list = manifest.fileList {
            guard manifest.format >= .fileList, list.member == fileListName, list.count >= 0, list.size >= 0 else {
                throw .invalid(source: source, reason: "manifest has a wrong value at \"fileList\"")
            }
        }
        return manifest
    }
}

extension Manifest {
    /// The manifest with every name as granary makes it of the name's bytes
    /// (``FolderName/canonical(_:)``), as members' names are read: an archive written before
    /// names that are not in NFC were escaped, or by another tool, is matched by bytes.
    func withCanonicalNames() -> Manifest {
        var copy = self
        copy.stores = stores.map { store in
            var store = store
            store.name = FolderName.canonical(store.name)
            store.path = FolderName.canonical(store.path)
            store.externalDataPath = store.externalDataPath.map(FolderName.canonical)
            return store
        }
        copy.files = files.map { file in
            var file = file
            file.path = FolderName.canonical(file.path)
            return file
        }
        copy.folders = folders.map {
            Dictionary($0.map { (FolderName.canonical($0.key), $0.value) }, uniquingKeysWith: { first, _ in first })
        }
        return copy
    }
}

/// What an archive is, as its manifest records it.
public enum ArchiveKind: String, Codable, Sendable, CaseIterable {
    /// A regular backup: what a restore with no archive named, a restore as of a time, the latest verified, `check` and
    /// `prune`'s rules consider.
    case backup
    /// What a restore or reset replaced (`…-pre-restore`, `…-pre-reset`): for an undo.
    case safety
    /// What a retired user left.
    case final
}

/// The names of uids and gids on this host (for manifests and messages).
public enum AccountNames {
    /// The login name of `uid`, if the host has one.
    public static func user(_ uid: UInt32) -> String? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.pw_name
        else { return nil }
        return String(cString: name)
    }

    /// The uid of login name `name`, if the host has one.
    public static func uid(_ name: String) -> UInt32? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_uid
    }

    /// The primary group of `uid`, if the host knows the uid.
    public static func primaryGroup(of uid: UInt32) -> UInt32? {
        var entry = passwd()
        var result: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getpwuid_r(uid, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.pw_gid
    }

    /// Whether `uid` is in group `gid` (its primary group, or one it is a member of).
    public static func isMember(uid: UInt32, of gid: UInt32) -> Bool {
        guard let name = user(uid), let primary = primaryGroup(of: uid) else { return false }
        if primary == gid { return true }
        var count: Int32 = 64
        var groups = [gid_t](repeating: 0, count: Int(count))
        while getgrouplist(name, primary, &groups, &count) < 0 {
            groups = [gid_t](repeating: 0, count: Int(count))
        }
        return groups.prefix(Int(count)).contains(gid)
    }

    /// The uid an ownership record stands for on this host: the uid of its user name when this
    /// host has that name, else its number.
    public static func hostUID(_ record: Manifest.Ownership) -> UInt32 { record.user.flatMap(uid) ?? record.uid }

    /// The gid an ownership record stands for on this host: by its group name, else its number.
    public static func hostGID(_ record: Manifest.Ownership) -> UInt32 { record.group.flatMap(gid) ?? record.gid }

    /// The gid of group `name`, if the host has one.
    public static func gid(_ name: String) -> UInt32? {
        var entry = SwiftGlibc.group()
        var result: UnsafeMutablePointer<SwiftGlibc.group>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &result) == 0, result != nil else { return nil }
        return entry.gr_gid
    }

    /// The name of group `gid`, if the host has one.
    public static func group(_ gid: UInt32) -> String? {
        var entry = SwiftGlibc.group()
        var result: UnsafeMutablePointer<SwiftGlibc.group>?
        var buffer = [CChar](repeating: 0, count: 4096)
        guard getgrgid_r(gid, &entry, &buffer, buffer.count, &result) == 0, result != nil, let name = entry.gr_name
        else { return nil }
        return String(cString: name)
    }
}

/// The formats of `MANIFEST.json` granary has written, oldest first. Readers read every one of
/// them and refuse any other number: a newer one (they cannot know what it means) and one granary
/// never wrote (0, negative).
public enum ManifestFormat: Int, Codable, Sendable, Comparable, CaseIterable {
    /// Stores and files, every one listed in `MANIFEST.json`.
    case plain = 1
    /// More than ``Manifest/fileListThreshold`` external-data files: they are listed in the
    /// `MANIFEST.files` member (``Manifest/FileList``).
    case fileList = 2
    /// Written with `backup --delta`: page hashes, and for a delta its base (``DeltaInfo``).
    case delta = 3

    public static let oldest = ManifestFormat.allCases.first!
    public static let newest = ManifestFormat.allCases.last!

    /// The format `manifest` needs: the newest of the things it holds.
    public init(of manifest: Manifest) {
        if manifest.delta != nil {
            self = .delta
        } else if manifest.fileList != nil {
            self = .fileList
        } else {
            self = .plain
        }
    }

    public static func < (left: ManifestFormat, right: ManifestFormat) -> Bool { left.rawValue < right.rawValue }

    /// Why a manifest of format `number` cannot be read, after the manifest's name: `has format
    /// 99, newer than this granary, which reads formats 1–3`.
    public static func problem(_ number: Int) -> String {
        let known = "formats \(oldest.rawValue)–\(newest.rawValue)"
        if number > newest.rawValue { return "has format \(number), newer than this granary, which reads \(known)" }
        return "has format \(number), not a format granary ever wrote (it wrote and reads \(known))"
    }

    /// What to do about a manifest of format `number`, which this granary cannot read.
    public static func hint(_ number: Int) -> String {
        if number > newest.rawValue { return "use the granary version that wrote this archive, or a newer one" }
        return
            "granary did not write this manifest: the archive is damaged or another tool's; use another archive (granary list)"
    }
}

/// A manifest that cannot be used.
public enum ManifestError: GranaryError, Sendable {
    case invalid(source: String, reason: String)
    case unsupportedFormat(source: String, format: Int)
    case missing(source: String)
    /// Writing: `MANIFEST.json` would be over `Manifest.sizeLimit`.
    case tooLarge(user: String, size: Int, stores: Int, entities: Int)

    public var description: String {
        switch self {
        case .invalid(let source, let reason): return "\(source): \(reason)"
        case .unsupportedFormat(let source, let format):
            return "\(source): \(Manifest.memberName) \(ManifestFormat.problem(format))"
        case .missing(let source): return "\(source): the first member is not \(Manifest.memberName)"
        case .tooLarge(let user, let size, let stores, let entities):
            return
                "\(user): the archive's \(Manifest.memberName) would be \(ByteCountText.render(Int64(size))) for \(stores) store\(stores == 1 ? "" : "s") and \(entities) Core Data entities, over the \(ByteCountText.render(Int64(Manifest.sizeLimit))) granary reads; no archive was written"
        }
    }

}

/// The version of this build.
public enum GranaryVersion {
    public static let current = "0.1.0"
}
