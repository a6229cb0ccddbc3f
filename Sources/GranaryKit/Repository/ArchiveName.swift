import Foundation

/// An archive's file name: `<UTC stamp>[_<n>][-<label>]<.tar.zst|.tar.gz|.tar.xz|.tar>`.
///
/// The stamp is `YYYYMMDDTHHMMSSZ`, so names sort by time. A second archive of the same
/// user in the same second gets `_2`, `_3`, … after the stamp. Labels are lower-case
/// letters, digits and `-` (for example `pre-restore`).
public struct ArchiveName: Sendable, Hashable, Comparable, CustomStringConvertible {
    public let created: Date
    public let sequence: Int
    public let label: String?
    public let compression: Compression

    public init(created: Date, sequence: Int = 1, label: String? = nil, compression: Compression) {
        // Names hold whole seconds.
        self.created = Date(timeIntervalSince1970: created.timeIntervalSince1970.rounded(.down))
        self.sequence = sequence
        self.label = label
        self.compression = compression
    }

    /// Parses a file name; `nil` when it is not an archive name of ours.
    public init?(fileName: String) {
        guard let compression = Compression(fileName: fileName) else { return nil }
        var stem = Substring(fileName.dropLast(compression.fileExtension.count))
        guard stem.count >= 16, let created = ArchiveName.parseStamp(String(stem.prefix(16))) else { return nil }
        stem = stem.dropFirst(16)
        var sequence = 1
        if stem.hasPrefix("_") {
            let digits = stem.dropFirst().prefix { $0.isASCII && $0.isNumber }
            guard let n = Int(digits), n >= 2 else { return nil }
            sequence = n
            stem = stem.dropFirst(1 + digits.count)
        }
        var label: String?
        if stem.hasPrefix("-") {
            let text = String(stem.dropFirst())
            guard ArchiveName.isValidLabel(text) else { return nil }
            label = text
        } else if !stem.isEmpty {
            return nil
        }
        self.init(created: created, sequence: sequence, label: label, compression: compression)
    }

    public var fileName: String {
        var name = ArchiveName.stamp(created)
        if sequence > 1 { name += "_\(sequence)" }
        if let label { name += "-" + label }
        return name + compression.fileExtension
    }

    public var description: String { fileName }

    /// The label of a safety archive written by a restore.
    public static let preRestoreLabel = "pre-restore"
    /// The label of a safety archive written by a reset.
    public static let preResetLabel = "pre-reset"
    /// The label of a retired user's final archive.
    public static let finalLabel = "final"
    /// Labels granary gives its own archives, which a backup's own label may not be.
    public static let reservedLabels: Set<String> = [preRestoreLabel, preResetLabel, finalLabel]

    /// What the archive is, by its label: safety and final archives carry reserved labels, which a
    /// regular backup cannot take (the manifest's `kind` says the same).
    public var kind: ArchiveKind {
        switch label {
        case ArchiveName.preRestoreLabel, ArchiveName.preResetLabel: return .safety
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

    /// `YYYYMMDDTHHMMSSZ` in UTC.
    public static func stamp(_ date: Date) -> String {
        let c = utcCalendar.dateComponents([.year, .month, .day, .hour, .minute, .second], from: date)
        func pad(_ v: Int?, _ width: Int) -> String {
            let s = String(v ?? 0)
            return String(repeating: "0", count: max(0, width - s.count)) + s
        }
        return pad(c.year, 4) + pad(c.month, 2) + pad(c.day, 2) + "T" + pad(c.hour, 2) + pad(c.minute, 2)
            + pad(c.second, 2) + "Z"
    }

    /// Parses `YYYYMMDDTHHMMSSZ`.
    public static func parseStamp(_ text: String) -> Date? {
        let chars = Array(text.utf8)
        guard chars.count == 16, chars[8] == UInt8(ascii: "T"), chars[15] == UInt8(ascii: "Z") else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for i in range {
                guard (48...57).contains(chars[i]) else { return nil }
                value = value * 10 + Int(chars[i] - 48)
            }
            return value
        }
        guard let y = number(0..<4), let mo = number(4..<6), let d = number(6..<8), let h = number(9..<11),
            let mi = number(11..<13), let s = number(13..<15), (1...12).contains(mo), (1...31).contains(d),
            h < 24, mi < 60, s < 61
        else { return nil }
        let components = DateComponents(year: y, month: mo, day: d, hour: h, minute: mi, second: s)
        return utcCalendar.date(from: components)
    }

    static let utcCalendar: Calendar = {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = TimeZone(identifier: "UTC")!
        return calendar
    }()

    public static func < (lhs: ArchiveName, rhs: ArchiveName) -> Bool {
        (lhs.created, lhs.sequence, lhs.label ?? "") < (rhs.created, rhs.sequence, rhs.label ?? "")
    }
}
