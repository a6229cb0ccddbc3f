import ArgumentParser
import Foundation
import GranaryKit

extension Compression: ExpressibleByArgument {}
extension RestoreMethod: ExpressibleByArgument {}
extension CheckMode: ExpressibleByArgument {}

extension UserID {
    /// The users that command-line words name. Checked when the command runs, not while the
    /// line is parsed, so that an invalid id is reported in granary's words (`invalid user id
    /// '-rf': it starts with '-'`, with what an id is) rather than as a value ArgumentParser
    /// could not read.
    static func named(_ words: [String]) throws(UserError) -> [UserID] {
        try words.map { (word) throws(UserError) in try UserID(word) }
    }

    /// The user an optional command-line word names (`--user`).
    static func named(_ word: String?) throws(UserError) -> UserID? {
        try word.map { (word) throws(UserError) in try UserID(word) }
    }
}

/// The checks on option values that ArgumentParser does not make: durations and bounds.
///
/// Every numeric option is checked at parse time (or, where it combines with the
/// configuration file, right after the settings are read), before any work: a value out of
/// its bounds is a usage error (64) that names the option and its bounds.
enum ArgumentValues {
    /// A transform for a timeout option: a duration (`30s`, `2m`, `1m30s`, `500ms`) or plain
    /// seconds (`30`, `0.5`) within `range`. `nan`, `inf`, `1e300` and negative values are refused.
    static func timeout(within range: ClosedRange<Duration>) -> @Sendable (String) throws -> Duration {
        { text in
            switch DurationSetting.parse(text, within: range) {
            case .success(let duration): return duration
            case .failure(let problem): throw ValidationError(problem.message)
            }
        }
    }

    /// A transform for a retention span (`7d`, `6mo`, `1y`, `1d12h`; months as restic counts
    /// them), at least a second and at most 100 years.
    static func retention() -> @Sendable (String) throws -> TimeSpan {
        { text in
            guard let span = DurationText.span(text), span.seconds() <= Double(SettingLimits.longestDuration) else {
                throw ValidationError(DurationText.problem(text) ?? "must be at most 100 years")
            }
            guard span.seconds() >= 1 else { throw ValidationError("must be at least 1s") }
            return span
        }
    }

    /// A transform for a span of time in whole seconds (`30min`, `26h`, `7d`, `1d12h`, `86400`),
    /// at least `minimum` and at most 100 years.
    static func span(minimum: Int64) -> @Sendable (String) throws -> Int64 {
        { text in
            guard let seconds = DurationText.seconds(text) else {
                throw ValidationError(DurationText.problem(text) ?? "not a duration")
            }
            guard seconds >= minimum, seconds <= SettingLimits.longestDuration else {
                throw ValidationError(
                    "must be \(DurationText.format(seconds: minimum)) to \(DurationText.format(seconds: SettingLimits.longestDuration))"
                )
            }
            return seconds
        }
    }

    /// Throws a usage error when `value` is outside `range`.
    static func check(_ value: Int?, _ option: String, within range: ClosedRange<Int>) throws {
        guard let value, !range.contains(value) else { return }
        throw ValidationError(
            "\(option) \(value) is out of range: it must be \(range.lowerBound) to \(range.upperBound)")
    }

    /// Throws a usage error when `level` cannot be used with `compression`.
    static func check(level: Int?, compression: Compression) throws {
        guard let level, let problem = compression.problem(withLevel: level) else { return }
        throw ValidationError("--level: " + problem)
    }
}
