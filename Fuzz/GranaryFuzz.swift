import Foundation
import GranaryCLI
import GranaryKit

// libFuzzer entry point for `make fuzz` (never part of a normal build).
// GRANARY_FUZZ_TARGET=manifest feeds the bytes to the manifest parser; =archive writes them to
// a file and runs the whole archive verifier on it (the reader, the member checks, extraction
// into a private folder and the SQLite checks); =commandline splits them at NUL bytes into an
// argument vector and parses it as granary's command line (the command-line check,
// ArgumentParser, every command's argument checks), and escapes each argument for the
// terminal; =names splits them at NUL bytes into file names and user ids and checks the
// properties every name must keep (FolderName: bytes to string and back exactly, two names
// equal strings only when their bytes are, every string in NFC; TerminalText: no control,
// line break or bidirectional override reaches the terminal, a different name never shows
// the same; UserID: an id granary accepts is a plain name of one component; the JSON form
// carries the exact bytes); =paths splits them at NUL bytes into paths and gives each to every
// path-taking option and configuration key (checkPaths). Any crash, hang or sanitizer report is a bug: hostile bytes must
// only ever produce a thrown error.
let target = ProcessInfo.processInfo.environment["GRANARY_FUZZ_TARGET"] ?? "manifest"

/// libFuzzer calls this once before the first input: GranaryKit's process-wide installs
/// (ProcessSetup), as the granary executable makes them at start.
@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutableRawPointer?, _ argv: UnsafeMutableRawPointer?) -> CInt {
    ProcessSetup.install()
    return 0
}
let scratch: String = {
    let path = NSTemporaryDirectory() + "/granary-fuzz-\(getpid())"
    try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}()

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    switch target {
    case "commandline":
        let arguments = bytes.split(separator: 0, omittingEmptySubsequences: false).map {
            String(decoding: $0, as: UTF8.self)
        }
        for argument in arguments {
            let shown = TerminalText.escape(argument)
            precondition(
                !shown.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F || $0 == "\u{202E}" },
                "escape let a control through")
            _ = DurationText.duration(argument)
        }
        _ = GranaryMain.parseOnly(arguments)
    case "paths":
        checkPaths(
            bytes.split(separator: 0, omittingEmptySubsequences: false).prefix(4).map { FolderName.decode(Array($0)) })
    case "names":
        checkNames(bytes.split(separator: 0, omittingEmptySubsequences: false).map(Array.init))
    case "archive":
        let archive = scratch + "/20250101T000000Z.tar.zst"
        FileManager.default.createFile(atPath: archive, contents: Data(bytes))
        _ = try? ArchiveVerifier.verify(archive: archive, workFolder: scratch + "/work", check: .quick)
    default:
        _ = try? Manifest.decode(bytes, source: "fuzz")
    }
    return 0
}

/// Every path-taking option and configuration key with hostile paths
/// (`GRANARY_FUZZ_TARGET=paths`): the text operations on paths keep their properties, and
/// parsing and resolving the places a command line or a configuration file names (the
/// checks and lookups a command makes before its work) ends in an exit status, never a trap.
/// Runs in the scratch folder, so relative paths land there.
func checkPaths(_ paths: [String]) {
    if FileManager.default.currentDirectoryPath != scratch {
        _ = FileManager.default.changeCurrentDirectoryPath(scratch)
    }
    for path in paths {
        let parent = PathText.parent(path), last = PathText.lastComponent(path)
        precondition(parent.utf8.count <= path.utf8.count && last.utf8.count <= path.utf8.count)
        if !path.contains("/") { precondition(parent.isEmpty && last == path, "a path of one part has a parent") }
        let normal = PathText.normalized(path)
        precondition(PathText.normalized(normal) == normal, "normalizing twice changed a path")
        _ = PathText.tildeProblem(path)
        // The configuration keys that take a place.
        let quoted =
            "\""
            + path.unicodeScalars.map { scalar -> String in
                switch scalar {
                case "\"": return "\\\""
                case "\\": return "\\\\"
                case _ where scalar.value < 0x20 || scalar.value == 0x7F: return String(format: "\\u%04X", scalar.value)
                // Every other non-ASCII scalar escaped too: the TOML is always valid, so what is
                // fuzzed is the keys' values, not TOML's own syntax.
                case _ where scalar.value > 0x7E: return String(format: "\\U%08X", scalar.value)
                default: return String(scalar)
                }
            }.joined() + "\""
        for text in ["root = \(quoted)\n", "repo = \(quoted)\n", "[[mirror]]\nrepo = \(quoted)\n"] {
            _ = try? ConfigFile.parse(text, path: "fuzz.toml")
        }
    }
    // Every option that takes a path, in the places a command reads it.
    let first = paths.first ?? "", second = paths.dropFirst().first ?? first
    for arguments in [
        ["list", "--repo", first], ["check", "--repo", first, "--root", second], ["users", "--root", first],
        ["users", "--root", second, "--repo", first], ["config", "--config", first],
        ["restore", "u@example.com", "--dry-run", "--to", first, "--repo", second],
        ["sync", "--repo", second, "--mirror", first, "--dry-run"],
        ["backup", "--all", "--root", first, "--repo", second],
    ] {
        _ = GranaryMain.resolveOnly(arguments)
    }
}

/// The properties of names (`GRANARY_FUZZ_TARGET=names`); a failed one stops the run with
/// the input saved.
func checkNames(_ names: [[UInt8]]) {
    let strings = names.map(FolderName.decode)
    for (bytes, string) in zip(names, strings) {
        precondition(FolderName.encode(string) == bytes, "decode then encode changed a name")
        precondition(
            FolderName.canonical(string).unicodeScalars.elementsEqual(string.unicodeScalars),
            "a decoded name is not canonical")
        precondition(
            string.unicodeScalars.elementsEqual(string.precomposedStringWithCanonicalMapping.unicodeScalars),
            "a decoded name is not in NFC")
        // On screen: nothing that moves the cursor, ends a line or turns text around; and the
        // escaping itself is reversible enough that two different names never look the same.
        let shown = TerminalText.escape(string)
        precondition(!shown.unicodeScalars.contains { TerminalText.needsEscape($0) }, "escape let a control through")
        // A user id granary accepts is one plain component, and its folder's name is its bytes.
        if let id = try? UserID(string) {
            precondition(
                !id.rawValue.contains("/") && id.rawValue != "." && id.rawValue != ".." && !id.rawValue.hasPrefix("-"))
            precondition(
                FolderName.encode(id.rawValue) == Array(id.rawValue.utf8), "an id's folder name is not its text")
            precondition(FolderName.encode(id.rawValue).count <= 255)
        }
        // JSON: the exact bytes, as text or as base64.
        if let base64 = JSONName.base64(string) {
            precondition(Data(base64Encoded: base64).map(Array.init) == bytes, "the base64 of a name is not its bytes")
        } else {
            precondition(Array(JSONName.text(string).utf8) == bytes, "a name given as text is not its bytes")
        }
    }
    for i in names.indices {
        for j in names.indices where i < j {
            precondition(
                (strings[i] == strings[j]) == (names[i] == names[j]),
                "two names are equal strings only when their bytes are")
            precondition(
                (TerminalText.escape(strings[i]) == TerminalText.escape(strings[j])) == (names[i] == names[j])
                    || names[i].contains(0x5C)
                    || names[j].contains(0x5C), "two different names look the same on screen")
        }
    }
}

// SwiftPM links an executable target's entry point as `<module>_main`; hand control to
// libFuzzer's driver from there (libFuzzer's own `main` is then not needed).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

@_cdecl("granary_fuzz_main")
public func granaryFuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in fuzzOne(data, size) }
}
