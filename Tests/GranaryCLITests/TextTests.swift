import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

@testable import GranaryCLI

@Suite("text output: escaping, durations, shell words")
struct TextTests {
    @Test(
        "a name with escapes, C0 and C1 controls, line separators and bidi overrides is printed escaped",
        arguments: [
            ("plain@example.com", "plain@example.com"),
            ("Caf\u{E9}.sqlite", "Caf\u{E9}.sqlite"),
            ("red\u{1B}[31m", "red\\e[31m"),
            ("cr\rlf\n", "cr\\rlf\\n"),
            ("tab\tbell\u{07}del\u{7F}", "tab\\tbell\\x07del\\x7f"),
            ("next\u{85}line", "next\\u{0085}line"),
            ("csi\u{9B}", "csi\\u{009b}"),
            ("ls\u{2028}ps\u{2029}", "ls\\u{2028}ps\\u{2029}"),
            ("evil\u{202E}gpj.exe", "evil\\u{202e}gpj.exe"),
            ("isolate\u{2066}x\u{2069}", "isolate\\u{2066}x\\u{2069}"),
            ("back\\slash", "back\\slash"),
            ("latin1 \u{10FFE9}t\u{10FFE9}", "latin1 \\xe9t\\xe9"),
            // A combining mark would join the escape's last letter (or what was printed before).
            ("e\u{1B}\u{301}", "e\\e\\u{0301}"),
            ("\u{301}x", "\\u{0301}x"),
            ("x\u{301}", "x\u{301}"),
        ])
    func escaping(raw: String, shown: String) {
        #expect(TerminalText.escape(raw).unicodeScalars.elementsEqual(shown.unicodeScalars))
    }

    @Test("two different names never look the same on screen: e ESC U+0301 is not e ESC é")
    func distinct() {
        // Names as GranaryKit makes them of bytes (FolderName: always in NFC).
        let names = [
            "e\u{1B}\u{301}", "e\u{1B}\u{E9}", "\u{1B}e\u{301}", "\u{1B}\u{E9}", "\u{301}", "\u{1100}\u{1B}\u{1161}",
            "\u{AC00}\u{1B}",
        ]
        .map { FolderName.decode(Array($0.utf8)) }
        let shown = names.map(TerminalText.escape)
        #expect(Set(shown).count == names.count, "\(shown)")
    }

    @Test("every span of a line is escaped, padded after escaping, and styled only in colour")
    func lines() {
        let name = "a\u{1B}b"
        let line: TextLine = "\(bold: name)  \(name, width: 6)|"
        #expect(line.rendered(color: false) == "a\\eb  a\\eb  |")
        #expect(line.rendered(color: true) == "\u{1B}[1ma\\eb\u{1B}[0m  a\\eb  |")
    }

    @Test(
        "durations: units, sums, milliseconds and plain seconds; nothing that is not a finite duration",
        arguments: [
            ("30s", 30_000), ("2min", 120_000), ("1min30s", 90_000), ("500ms", 500), ("0.5", 500), ("30", 30_000),
            ("1.5min", 90_000), ("1.5", 1500), ("172800", 172_800_000),
            ("1d12h", 129_600_000),
            ("2w", 1_209_600_000), ("0", 0), ("0s", 0),
        ])
    func durations(text: String, milliseconds: Int64) {
        #expect(DurationText.duration(text) == .milliseconds(milliseconds))
    }

    @Test("m is refused with both readings named; months and years count the calendar back, as restic's --keep-within")
    func calendarSpans() throws {
        #expect(DurationText.problem("6m")?.contains("min for minutes, or mo for months") == true)
        #expect(DurationText.problem("1h30m")?.contains("min for minutes") == true)
        #expect(DurationText.span("1y6mo") == TimeSpan(months: 18))
        #expect(DurationText.span("1y") == TimeSpan(months: 12))
        #expect(DurationText.span("6mo2d") == TimeSpan(months: 6, milliseconds: 172_800_000))
        #expect(TimeSpan(months: 18).description == "1y6mo" && TimeSpan(seconds: 90).description == "1min30s")
        // As Go's AddDate (restic): 2026-03-31 minus one month is 02-31, that is 03-03; minus
        // six months 2025-09-31, that is 10-01; minus a year 2025-03-31; 1y2d3h as restic's.
        let end = try #require(ISO8601DateFormatter().date(from: "2026-03-31T12:00:00Z"))
        #expect(TimeSpan(months: 1).start(before: end) == ISO8601DateFormatter().date(from: "2026-03-03T12:00:00Z"))
        #expect(TimeSpan(months: 12).start(before: end) == ISO8601DateFormatter().date(from: "2025-03-31T12:00:00Z"))
        #expect(TimeSpan(months: 6).start(before: end) == ISO8601DateFormatter().date(from: "2025-10-01T12:00:00Z"))
        #expect(
            DurationText.span("1y2d3h")?.start(before: end) == ISO8601DateFormatter().date(from: "2025-03-29T09:00:00Z")
        )
    }

    @Test(
        "not durations",
        arguments: [
            "", "nan", "inf", "-inf", "1e300", "-1", "-5s", "1.5.2", ".", "10x", "s", "99999999999999999999s", "5 s",
            "1e3", "0x10", "2m", "1m30s", "6m", "1.5mo", "1M",
        ])
    func notDurations(text: String) {
        #expect(DurationText.duration(text) == nil)
    }

    @Test(
        "durations are shown the way they are written",
        arguments: [
            (Duration.seconds(60), "1min"), (.seconds(172_800), "2d"), (.seconds(90), "1min30s"),
            (.milliseconds(500), "500ms"),
            (.milliseconds(1500), "1s500ms"), (.zero, "0s"), (.seconds(694_800), "8d1h"), (.seconds(2_592_000), "30d"),
        ])
    func formatting(duration: Duration, text: String) {
        // (months and years: see calendarSpans)
        #expect(DurationText.format(duration) == text)
        #expect(DurationText.duration(text) == duration)
    }

    @Test(
        "a word typed on a shell line is read back without expanding anything",
        arguments: [
            ("alice", "alice"), ("'a b'", "a b"), ("a\\ b", "a b"), ("\"a\\\"b\"", "a\"b"), ("'$(x)'", "$(x)"),
            ("$(x)", "$(x)"),
            ("'unfinished", "unfinished"), ("\"a\\nb\"", "a\\nb"),
        ])
    func dequote(typed: String, meant: String) {
        #expect(ShellWord.dequote(typed) == meant)
    }

    @Test("a name is quoted for a shell hint only when it needs it")
    func quote() {
        #expect(ShellWord.quote("alice@example.com") == "alice@example.com")
        #expect(ShellWord.quote("a b") == "'a b'")
        #expect(ShellWord.quote("it's") == "'it'\\''s'")
        #expect(ShellWord.quote("$(reboot)") == "'$(reboot)'")
    }

    @Test(
        "a word with a byte that is not UTF-8, a control character or a bidi override is quoted as $'…' and bash reads back the same bytes",
        arguments: [
            [0x2F, 0x74, 0x6D, 0x70, 0x2F, 0xFF, 0x61] as [UInt8], Array("a\nb c".utf8), Array("it's\u{1B}[31m".utf8),
            Array("x\u{202E}y\\z".utf8), [0x61, 0x0A, 0x27, 0x5C, 0xC3, 0xA9],
        ])
    func quoteBytes(bytes: [UInt8]) throws {
        let word = FolderName.decode(bytes)
        let quoted = ShellWord.quote(word)
        #expect(quoted.hasPrefix("$'"), "\(quoted)")
        #expect(!quoted.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F || $0.value == 0x202E })
        let bash = Process()
        bash.executableURL = URL(fileURLWithPath: "/bin/bash")
        bash.arguments = ["-c", "printf %s " + quoted]
        let pipe = Pipe()
        bash.standardOutput = pipe
        try bash.run()
        let printed = pipe.fileHandleForReading.readAllRetryingInterrupts()
        bash.waitUntilExit()
        #expect(Array(printed) == bytes, "\(quoted)")
    }

    @Test("a mistyped command is matched to the closest one; an unrelated word to none")
    func closest() {
        #expect(CommandLineWords.closest(to: "bakup", in: Granary.commandNames) == "backup")
        #expect(CommandLineWords.closest(to: "restor", in: Granary.commandNames) == "restore")
        #expect(CommandLineWords.closest(to: "lsit", in: Granary.commandNames) == "list")
        #expect(CommandLineWords.closest(to: "xyzzy", in: Granary.commandNames) == nil)
    }

    @Test("every JSON document has format 1 and keeps a nil optional as null")
    func documents() throws {
        struct Sample: Encodable {
            @Null var missing: String?
            let present = 1
        }
        let text = Console.encode(JSONDocument(result: Sample(missing: nil)))
        let object = try JSONSerialization.jsonObject(with: Data(text.utf8)) as! [String: Any]
        #expect(object["format"] as? Int == 1)
        #expect(object.keys.contains("missing") && object["missing"] is NSNull)
        #expect(object["present"] as? Int == 1)
    }
}
