import GranaryKit
import TOMLKit

/// The one reading of a bounded duration setting, shared by every duration key of the
/// configuration file (`lock_timeout`, `owner_timeout`, `delta_max_age`, `[limits] time`,
/// `[remote] timeout`…) and every duration option (`--lock-timeout`, `--owner-timeout`).
///
/// The grammar is ``DurationText``'s: a number with a unit (`30s`, `2min`, `1h30min`, `7d`) or
/// plain seconds (`30`, `0.5`). In the file a bare TOML integer or float is plain seconds too, so
/// `delta_max_age = 3600.5` and `lock_timeout = 0.5` read alike.
enum DurationSetting {
    /// The examples every message about a duration setting gives.
    static let examples = "such as \"30s\", \"2min\" or \"7d\""

    /// Why a text is not a duration within the bounds, as a phrase for the one-line error.
    struct Problem: Error, Equatable {
        let message: String
    }

    /// The duration text a TOML value stands for: a string as written, an integer or a float as
    /// plain seconds; nil for any other type.
    static func text(of value: TOMLValueConvertible) -> String? {
        if let seconds = value.int { return String(seconds) }
        if let seconds = value.double { return String(seconds) }
        return value.string
    }

    /// The duration `text` stands for (to the millisecond), within `range`.
    static func parse(_ text: String, within range: ClosedRange<Duration>) -> Result<Duration, Problem> {
        guard let parsed = DurationText.duration(text) else {
            return .failure(Problem(message: "\"\(text)\": " + (DurationText.problem(text) ?? "more than 100 years")))
        }
        guard range.contains(parsed) else {
            return .failure(
                Problem(
                    message:
                        "must be a duration from \(DurationText.format(range.lowerBound)) to \(DurationText.format(range.upperBound)), \(examples); \"\(text)\" is not"
                ))
        }
        return .success(parsed)
    }
}
