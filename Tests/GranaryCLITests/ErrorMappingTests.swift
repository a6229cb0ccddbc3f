import Foundation
import Testing

/// Every error type of the core has an exit status and a hint in the command line
/// (Sources/GranaryCLI/Output/ExitStatuses.swift): an error type without one exits 74 with no
/// hint, whatever it is about. Swift cannot list a protocol's conforming types at run time, so
/// the sources are read: every type declared (or extended) as a `GranaryError` in GranaryKit and
/// GranaryCLI must be extended as, or declared, a `CommandLineError`.
@Suite("every core error type has an exit status and a hint")
struct ErrorMappingTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources")

    /// The Swift sources under `folder`, read.
    static func texts(_ folder: String) throws -> [(file: String, text: String)] {
        let base = sources.appendingPathComponent(folder)
        let files = FileManager.default.enumerator(atPath: base.path)?.compactMap { $0 as? String } ?? []
        return try files.filter { $0.hasSuffix(".swift") }.sorted().map {
            ($0, try String(contentsOf: base.appendingPathComponent($0), encoding: .utf8))
        }
    }

    /// The types whose declaration or extension in `text` lists `conformance` among what they
    /// inherit (the last component of a nested name: `extension A.B` gives `B`).
    static func types(in text: String, conformingTo conformance: String) -> Set<String> {
        // `struct|enum|class|actor|extension NAME<…>: inherited… {` (the clause may span lines;
        // comments are dropped first so that a `{` in one does not end it).
        let code = text.split(separator: "\n", omittingEmptySubsequences: false)
            .map { line -> Substring in
                guard let comment = line.range(of: "//") else { return line }
                return line[..<comment.lowerBound]
            }
            .joined(separator: "\n")
        let pattern = #"\b(?:struct|enum|class|actor|extension)\s+([A-Za-z_][\w.]*)\s*(?:<[^>{]*>)?\s*:([^{]*)\{"#
        let regex = try! NSRegularExpression(pattern: pattern)
        var found: Set<String> = []
        let range = NSRange(code.startIndex..., in: code)
        for match in regex.matches(in: code, range: range) {
            guard let name = Range(match.range(at: 1), in: code), let clause = Range(match.range(at: 2), in: code)
            else { continue }
            let inherited = code[clause].components(separatedBy: CharacterSet(charactersIn: ",&\n "))
                .map { $0.trimmingCharacters(in: .whitespaces) }
            // `where` clauses and `any P` in the clause are not conformances.
            let listed = inherited.prefix { $0 != "where" }
            if listed.contains(conformance) {
                found.insert(String(code[name].split(separator: ".").last ?? code[name][...]))
            }
        }
        return found
    }

    @Test("the source reader finds conformances: nested, multi-line, by extension; not in comments")
    func readerFindsConformances() {
        let text = """
            public enum Plain: GranaryError, Sendable { case a }
            struct Outer {
                public struct Nested:
                    Sendable, GranaryError
                {
                }
            }
            extension Foreign.Kind: GranaryError {}
            // struct Commented: GranaryError {
            struct Uses { var error: (any GranaryError)? }
            struct Generic<T>: Equatable, GranaryError where T: Equatable {}
            """
        #expect(Self.types(in: text, conformingTo: "GranaryError") == ["Plain", "Nested", "Kind", "Generic"])
    }

    @Test("a GranaryError type without a CommandLineError mapping is found")
    func unmappedIsFound() {
        let core = "public struct NewError: GranaryError, Sendable { }\npublic enum Old: GranaryError {}"
        let cli = "extension Old: CommandLineError { var status: ExitStatus { .usage } }"
        let unmapped = Self.types(in: core, conformingTo: "GranaryError")
            .subtracting(Self.types(in: cli, conformingTo: "CommandLineError"))
        #expect(unmapped == ["NewError"])
    }

    @Test("every GranaryError of GranaryKit and GranaryCLI has an exit status and a hint (CommandLineError)")
    func everyErrorMapped() throws {
        var errors: [String: String] = [:]
        for folder in ["GranaryKit", "GranaryCLI"] {
            for (file, text) in try Self.texts(folder) {
                for type in Self.types(in: text, conformingTo: "GranaryError") { errors[type] = folder + "/" + file }
            }
        }
        var mapped: Set<String> = []
        for (_, text) in try Self.texts("GranaryCLI") {
            mapped.formUnion(Self.types(in: text, conformingTo: "CommandLineError"))
        }
        // Enough found that the reader is reading the real sources (23 in GranaryKit on 2026-11-25).
        #expect(errors.count >= 25, "only \(errors.keys.sorted()) found: the source reader is broken")
        let unmapped = errors.filter { !mapped.contains($0.key) }.map { "\($0.key) (\($0.value))" }.sorted()
        #expect(
            unmapped.isEmpty,
            "error types with no exit status or hint (add `extension NAME: CommandLineError` to Sources/GranaryCLI/Output/ExitStatuses.swift): \(unmapped)"
        )
    }
}
