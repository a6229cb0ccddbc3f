import Foundation
import GranaryTestSupport

/// Runs the built `granary` binaries as a user would, and captures what they print.
enum GranaryProcess {
    /// The folder holding the built products: `GRANARY_BIN_DIR`, else this package's `.build/debug`.
    static let binDirectory: String = {
        if let dir = ProcessInfo.processInfo.environment["GRANARY_BIN_DIR"], !dir.isEmpty { return dir }
        let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return package.appendingPathComponent(".build/debug").path
    }()

    /// The package's own folder (for files of the source tree such as examples/).
    static let packageDirectory: String = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    struct Result {
        let status: Int32
        let stdout: String
        let stderr: String
    }

    /// Runs `binDirectory/tool` with `arguments`; the environment is ours with `environment` on top
    /// and GRANARY_* variables removed unless given.
    @discardableResult
    static func run(
        _ arguments: [String], tool: String = "granary", environment: [String: String] = [:], stdin: String? = nil
    ) throws -> Result {
        try runExecutable(binDirectory + "/" + tool, arguments, environment: environment, stdin: stdin)
    }

    /// Runs any executable and waits for it.
    static func runExecutable(
        _ path: String, _ arguments: [String], environment: [String: String] = [:], stdin: String? = nil
    ) throws -> Result {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("GRANARY_") }
        env.merge(environment) { $1 }
        process.environment = env
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        let input = Pipe()
        process.standardInput = input
        try process.run()
        if let stdin { input.fileHandleForWriting.write(Data(stdin.utf8)) }
        try? input.fileHandleForWriting.close()
        // Read both pipes fully before waiting, so a chatty child cannot block on a full pipe.
        let group = DispatchGroup()
        nonisolated(unsafe) var errData = Data()
        group.enter()
        DispatchQueue.global().async {
            errData = err.fileHandleForReading.readAllRetryingInterrupts()
            group.leave()
        }
        let outData = out.fileHandleForReading.readAllRetryingInterrupts()
        group.wait()
        process.waitUntilExit()
        return Result(
            status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
            stderr: String(decoding: errData, as: UTF8.self))
    }
}
