import Foundation

/// An archive's file name: `<UTC stamp>[_<n>][-<label>].<host><.tar.zst|.tar.gz|.tar.xz|.tar>`.
///
/// An archive's identity is its name, and nothing beside it: the user's folder it is in, the
/// moment it was taken, its label and the host that took it.
///
/// - The stamp is `YYYYMMDDTHHMMSS.ffffffZ` (UTC, to the microsecond). A run allocates it under
///   the user's lock, strictly after the newest archive this host has of the user
///   (``Repository/nextStamp(for:host:after:)``), so that the names of one user and host never
///   collide, whatever their labels, and their order is the order they were taken in.
/// - `_<n>` (n ≥ 2) marks an archive that `prune` wrote by merging a run of deltas: it takes the
///   time of the archive it replaces and sorts right after it.
/// - The host (``Hosts/isValid(_:)``: letters, digits, `.`, `_`, `-`) ends the name, so a listing
///   knows every archive's host from its name alone, and two hosts' names never collide.
///
/// Names written before hosts were part of the name (`YYYYMMDDTHHMMSSZ[_n][-label]`, whole
/// seconds, no host) are still read: their host is the one their marker named (``Hosts``), or
/// none. ``Repository/convertLegacyArchives(of:)`` gives them this host's name, keeping their
/// stamp: the converted name is the legacy name with `.<host>` added, so that a delta's base,
/// recorded by its legacy name, is still found (``isNamed(_:)``).
public struct ArchiveName: Sendable, Hashable, Comparable, CustomStringConvertible {
    /// Microseconds since 1970 (UTC).
    public let micros: Int64
    /// Whether the stamp holds microseconds (every name written now); false for a legacy
    /// whole-second stamp.
    public let precise: Bool
    public let sequence: Int
    public let label: String?
    /// The host in the name; nil for a legacy name.
    public let host: String?
    public let compression: Compression

    /// The moment the archive was taken.
    public var created: Date { Date(timeIntervalSince1970: Double(micros) / 1_000_000) }

    public init(
        created: Date, sequence: Int = 1, label: String? = nil, host: String? = nil, compression: Compression,
        precise: Bool = true
    ) {
        self.init(
            micros: ArchiveName.micros(created), sequence: sequence, label: label, host: host,
            compression: compression, precise: precise)
    }

    public init(
        micros: Int64, sequence: Int = 1, label: String? = nil, host: String? = nil, compression: Compression,
        precise: Bool = true
    ) {
        // A legacy stamp holds whole seconds.
        self.micros = precise ? micros : (micros - ((micros % 1_000_000) + 1_000_000) % 1_000_000)
        self.precise = precise
        self.sequence = sequence
        self.label = label
        self.host = host
        self.compression = compression
    }

    /// `date` in whole microseconds since 1970 (to the nearest: a stamp read back gives itself).
    public static func micros(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1_000_000).rounded())
    }

    /// Parses a file name; `nil` when it is not an archive name of ours.
    public init?(fileName: String) {
        guard let compression = Compression(fileName: fileName) else { return nil }
        var stem = Substring(fileName.dropLast(compression.fileExtension.count))
        let precise = stem.count >= 23 && stem.utf8.dropFirst(15).first == UInt8(ascii: ".")
        let width = precise ? 23 : 16
        guard stem.count >= width, let micros = ArchiveName.parseMicros(String(stem.prefix(width))) else { return nil }
        stem = stem.dropFirst(width)
        var sequence = 1
        if stem.hasPrefix("_") {
            let digits = stem.dropFirst().prefix { $0.isASCII && $0.isNumber }
            guard digits.count <= 6, let n = Int(digits), n >= 2 else { return nil }
            sequence = n
            stem = stem.dropFirst(1 + digits.count)
        }
        var label: String?
        if stem.hasPrefix("-") {
            let text = stem.dropFirst().prefix { $0 != "." }
            guard ArchiveName.isValidLabel(String(text)) else { return nil }
            label = String(text)
            stem = stem.dropFirst(1 + text.count)
        }
        var host: String?
        if stem.hasPrefix(".") {
            let text = String(stem.dropFirst())
            guard HostName.isValid(text) else { return nil }
            host = text
        } else if !stem.isEmpty {
            return nil
        }
        // Every name written now holds its host; a precise stamp without one is no name of ours.
        if precise && host == nil { return nil }
        self.init(
            micros: micros, sequence: sequence, label: label, host: host, compression: compression, precise: precise)
    }

    public var fileName: String {
        var name = legacyStem
        if let host { name += "." + host }
        return name + compression.fileExtension
    }

    /// The name without its host: for a converted legacy archive, the name it had before.
    var legacyStem: String {
        var name = ArchiveName.stamp(micros: micros, precise: precise)
        if sequence > 1 { name += "_\(sequence)" }
        if let label { name += "-" + label }
        return name
    }

    /// The name it had before its host was put in it (a converted legacy name), or its own.
    public var legacyFileName: String { legacyStem + compression.fileExtension }

    /// Whether `reference` (a delta's base, a merge's list, a deletion record's line) names this
    /// archive: its name, or for a legacy archive converted since, the name it had then.
    public func isNamed(_ reference: String) -> Bool {
        reference == fileName || (!precise && host != nil && reference == legacyFileName)
    }

    /// This name with another host (a legacy name converted to `host`'s).
    public func withHost(_ host: String) -> ArchiveName {
        ArchiveName(
            micros: micros, sequence: sequence, label: label, host: host, compression: compression, precise: precise)
    }

    /// This name with another sequence (a merged archive in its place).
    public func withSequence(_ sequence: Int) -> ArchiveName {
        ArchiveName(
            micros: micros, sequence: sequence, label: label, host: host, compression: compression, precise: precise)
    }

    public var description: String { fileName }

    /// What in `manifest` contradicts this name (host, label, time to the second), or nil when
    /// they agree. An archive whose name and manifest disagree is refused by every command that
    /// reads it: an older archive put under a newer name, or another host's under this one's,
    /// would otherwise restore as what its name says.
    public func disagreement(with manifest: Manifest) -> String? {
        var problems: [String] = []
        if let host, manifest.host != host {
            problems.append("its name says host \(host), its manifest \(manifest.host.debugDescription)")
        }
        if label != manifest.label {
            problems.append(
                "its name says label \(label.map { "\"\($0)\"" } ?? "none"), its manifest \(manifest.label.map { "\"\($0)\"" } ?? "none")"
            )
        }
        let taken = ArchiveName.micros(manifest.created)
        if abs(taken - micros) >= 1_000_000 {
            problems.append(
                "its name says it was taken at \(ArchiveName.stamp(micros: micros, precise: false)), its manifest at \(ArchiveName.stamp(micros: taken, precise: false))"
            )
        }
        return problems.isEmpty ? nil : problems.joined(separator: "; ")
    }

    /// The label of a safety archive written by a restore.
    public static let preRestoreLabel = "pre-restore"
    /// The label of a safety archive written by a reset.
    public static let preResetLabel = "pre-reset"
    /// The label of a retired user's final archive.
    public static let finalLabel = "final"
    /// Labels granary gives its own archives, which a backup's own label may not be.
    public static let reservedLabels: Set<String> = [
        preRestoreLabel, preResetLabel, finalLabel, preRestoreLabel + "-delta", preResetLabel + "-delta",
    ]

    /// What the archive is, by its label: safety and final archives carry reserved labels, which a
    /// regular backup cannot take (the manifest's `kind` says the same).
    public var kind: ArchiveKind {
        switch label {
        // (A safety archive written as a delta on the newest backup: `pre-restore-delta`.)
        case ArchiveName.preRestoreLabel, ArchiveName.preResetLabel, ArchiveName.preRestoreLabel + "-delta",
            ArchiveName.preResetLabel + "-delta":
            return .safety
        case ArchiveName.finalLabel: return .final
        default: return .backup
        }
    }

    /// Labels: 1 to 64 of `a-z 0-9 -`, starting with a letter or digit.
    public static func isValidLabel(_ text: String) -> Bool {
        guard !text.isEmpty, text.utf8.count <= 64, let first = text.unicodeScalars.first,
            first != "-"
        else { return false }
        return text.unicodeScalars.allSatisfy { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "-" }
    }

    /// `YYYYMMDDTHHMMSSZ` in UTC (whole seconds).
    public static func stamp(_ date: Date) -> String { stamp(micros: micros(date), precise: false) }

    /// `YYYYMMDDTHHMMSS.ffffffZ` (precise) or `YYYYMMDDTHHMMSSZ` in UTC.
    public static func stamp(micros: Int64, precise: Bool) -> String {
        let seconds = micros >= 0 ? micros / 1_000_000 : (micros - 999_999) / 1_000_000
        let fraction = micros - seconds * 1_000_000
        let c = CivilTime.components(seconds: seconds)
        func pad(_ v: Int, _ width: Int) -> String {
            let s = String(v)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        var text =
            pad(c.year, 4) + pad(c.month, 2) + pad(c.day, 2) + "T" + pad(c.hour, 2) + pad(c.minute, 2)
            + pad(c.second, 2)
        if precise { text += "." + pad(Int(fraction), 6) }
        return text + "Z"
    }

    /// Parses `YYYYMMDDTHHMMSSZ` into a date.
    public static func parseStamp(_ text: String) -> Date? {
        guard text.utf8.count == 16, let micros = parseMicros(text) else { return nil }
        return Date(timeIntervalSince1970: Double(micros / 1_000_000))
    }

    /// Parses `YYYYMMDDTHHMMSSZ` or `YYYYMMDDTHHMMSS.ffffffZ` (UTC) into microseconds since 1970;
    /// nil for anything else, a date the calendar does not have included.
    public static func parseMicros(_ text: String) -> Int64? {
        let chars = Array(text.utf8)
        guard chars.count == 16 || chars.count == 23, chars[8] == UInt8(ascii: "T"),
            chars[chars.count - 1] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for i in range {
                guard (48...57).contains(chars[i]) else { return nil }
                value = value * 10 + Int(chars[i] - 48)
            }
            return value
        }
        var fraction = 0
        if chars.count == 23 {
            guard chars[15] == UInt8(ascii: "."), let f = number(16..<22) else { return nil }
            fraction = f
        }
        // A day the month does not have (20260230T…) is no stamp, never another day.
        guard let y = number(0..<4), let mo = number(4..<6), let d = number(6..<8), let h = number(9..<11),
            let mi = number(11..<13), let s = number(13..<15),
            let seconds = CivilTime.seconds(year: y, month: mo, day: d, hour: h, minute: mi, second: s)
        else { return nil }
        return seconds * 1_000_000 + Int64(fraction)
    }

    /// The order archives were taken in: by stamp, a merged archive right after the one it
    /// replaces; within a legacy second (whose names did not record the order) by label, as
    /// before; then by host (a listing of every host's archives).
    public static func < (lhs: ArchiveName, rhs: ArchiveName) -> Bool {
        (lhs.micros, lhs.sequence, lhs.label ?? "", lhs.host ?? "", lhs.compression.fileExtension, lhs.precise ? 1 : 0)
            < (
                rhs.micros, rhs.sequence, rhs.label ?? "", rhs.host ?? "", rhs.compression.fileExtension,
                rhs.precise ? 1 : 0
            )
    }
}
