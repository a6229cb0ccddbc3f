import Foundation
import GranaryCLI
import GranaryKit

// libFuzzer entry point for `make fuzz` (never part of a normal build).
// GRANARY_FUZZ_TARGET=manifest feeds the bytes to the manifest parser; =archive writes them to
// a file and runs the whole archive verifier on it (the reader, the member checks, extraction
// into a private folder and the SQLite checks); =commandline splits them at NUL bytes into an
// argument vector and parses it as granary's command line (the command-line check,
// ArgumentParser, every command's argument checks), and escapes each argument for the
// terminal. Any crash, hang or sanitizer report is a bug: hostile bytes must only ever produce
// a thrown error.
let target = ProcessInfo.processInfo.environment["GRANARY_FUZZ_TARGET"] ?? "manifest"
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
        let arguments = bytes.split(separator: 0, omittingEmptySubsequences: false).map { String(decoding: $0, as: UTF8.self) }
        for argument in arguments {
            let shown = TerminalText.escape(argument)
            precondition(!shown.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F || $0 == "\u{202E}" }, "escape let a control through")
            _ = DurationText.duration(argument)
        }
        _ = GranaryMain.parseOnly(arguments)
    case "archive":
        let archive = scratch + "/20250101T000000Z.tar.zst"
        FileManager.default.createFile(atPath: archive, contents: Data(bytes))
        _ = try? ArchiveVerifier.verify(archive: archive, workFolder: scratch + "/work", check: .quick)
    default:
        _ = try? Manifest.decode(bytes, source: "fuzz")
    }
    return 0
}

// SwiftPM links an executable target's entry point as `<module>_main`; hand control to
// libFuzzer's driver from there (libFuzzer's own `main` is then not needed).
@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>, Int) -> CInt
) -> CInt

@_cdecl("granary_fuzz_main")
public func granaryFuzzMain(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    var count = argc
    var arguments = argv
    return LLVMFuzzerRunDriver(&count, &arguments) { data, size in fuzzOne(data, size) }
}
