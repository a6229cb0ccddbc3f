import Foundation
import GranaryKit
import Synchronization

/// Makes `location` an initialized repository, as `granary init LOCATION` does, and returns
/// `location`: what every test that backs up into a repository of its own calls first (no
/// command but `init` creates a repository).
///
/// A local folder is initialized in this process (``LocalRepository/initialize()``); a remote
/// one (`s3:…`, `rclone:…`) by running the built `granary init` with `environment` (the
/// remote's credentials and endpoint). Safe to call again, and cheap then: a computed `repo`
/// property of a fixture may call it each time it is read. Traps when the location cannot be
/// made a repository (a test's setup is wrong).
@discardableResult
public func initializedRepository(_ location: String, environment: [String: String] = [:]) -> String {
    if !Repositories.isRemote(location) {
        if FileSystem.isRegularFile(location + "/" + LocalRepository.markerName) { return location }
        do { _ = try LocalRepository(path: location).initialize() } catch {
            preconditionFailure("cannot initialize the test repository \(location): \(error)")
        }
        return location
    }
    let key =
        location + "\u{0}"
        + environment.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(
            separator: "\u{0}")
    if TestRepositories.initialized.withLock({ $0.contains(key) }) { return location }
    let process = Process()
    process.executableURL = URL(fileURLWithPath: TestRepositories.binDirectory + "/granary")
    process.arguments = ["init", location]
    var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("GRANARY_") }
    env.merge(environment) { $1 }
    process.environment = env
    let err = Pipe()
    process.standardError = err
    process.standardOutput = FileHandle.nullDevice
    do { try process.run() } catch { preconditionFailure("cannot run granary init: \(error)") }
    let message = String(decoding: err.fileHandleForReading.readAllRetryingInterrupts(), as: UTF8.self)
    process.waitUntilExit()
    precondition(process.terminationStatus == 0, "granary init \(location) failed: \(message)")
    TestRepositories.initialized.withLock { _ = $0.insert(key) }
    return location
}

enum TestRepositories {
    static let initialized = Mutex<Set<String>>([])

    /// The folder of the built products: `GRANARY_BIN_DIR`, else this package's `.build/debug`.
    static let binDirectory: String = {
        if let dir = ProcessInfo.processInfo.environment["GRANARY_BIN_DIR"], !dir.isEmpty { return dir }
        let package = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        return package.appendingPathComponent(".build/debug").path
    }()
}
