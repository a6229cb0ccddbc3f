import Foundation
import GranaryKit
import GranaryOwner
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// man 7 granary-reopen against real owners: `granary-reopen-check` against granary-demo-owner
/// and against examples/owner.py, and its usage.
@Suite("reopen protocol conformance", .serialized)
struct ReopenConformanceTests: ReopenConformanceSuite {
    let folder = TemporaryFolder("granary-conformance")

    init() throws { try makeStores() }

    @Test("granary-reopen-check passes every check against granary-demo-owner serving two stores")
    func demoOwnerConforms() throws {
        let owner = try DemoOwner(stores: [store, cloud], log: folder.child("owner.log"))
        defer { owner.stop() }
        let result = try check([store, cloud])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        let verdicts = verdicts(result.stdout)
        #expect(verdicts.count == 23 && verdicts.values.allSatisfy { $0 == "pass" }, "\(result.stdout)")
        #expect(result.stdout.contains("23 checks: 23 passed, 0 failed, 0 skipped"))
        #expect(owner.process.isRunning)
    }

    @Test(
        "granary-reopen-check passes every check against examples/owner.py serving two stores, which stops cleanly on SIGTERM"
    )
    func pythonOwnerConforms() throws {
        let owner = try DemoOwner(stores: [store, cloud], log: folder.child("owner.log"), python: true)
        defer { owner.stop() }
        let result = try check([store, cloud])
        #expect(result.status == 0, "\(result.stdout)\(result.stderr)")
        #expect(result.stdout.contains("23 checks: 23 passed, 0 failed, 0 skipped"), "\(result.stdout)")
        #expect(stopsOnSIGTERM(owner))
    }

    @Test("granary-reopen-check exits 66 for a missing store, 1 when nobody serves the store, 64 for an unknown check")
    func checkerUsage() throws {
        #expect(try check([folder.child("missing.sqlite")]).status == 66)
        let unowned = try check(["--check", "handshake", store])
        #expect(unowned.status == 1)
        #expect(unowned.stdout.contains("nobody serves the reopen protocol"), "\(unowned.stdout)")
        #expect(try check(["--check", "nonsense", store]).status == 64)
        let list = try check(["--list"])
        #expect(list.status == 0 && list.stdout.split(separator: "\n").count == 23)
    }

    @Test("granary-demo-owner --help prints its usage and the rules it can break, and opens nothing")
    func demoOwnerHelp() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: GranaryProcess.binDirectory + "/granary-demo-owner")
        process.arguments = ["--help"]
        process.currentDirectoryURL = URL(fileURLWithPath: folder.path)
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        let output = String(decoding: pipe.fileHandleForReading.readAllRetryingInterrupts(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0)
        #expect(output.contains("USAGE: granary-demo-owner"))
        for broken in ReopenBrokenRuleTests.brokenRules { #expect(output.contains(broken.rule)) }
        for hostile in ["write-while-paused", "reinject-wal", "dry-run-differs", "slow-answers", "huge-answer"] {
            #expect(output.contains(hostile))
        }
        #expect(FileSystem.contents(of: folder.path).sorted() == ["root"])
    }
}

/// What the conformance suites share (`ReopenConformanceTests`, `ReopenBrokenRuleTests`,
/// `ReopenRestoreTests`): alice's two stores, the checker and granary. Three suites, not one, so
/// that `make test` runs them in three test processes at once (each stays serialized).
protocol ReopenConformanceSuite {
    var folder: TemporaryFolder { get }
}

extension ReopenConformanceSuite {
    var root: String { folder.child("root") }
    var repo: String { initializedRepository(folder.child("repo")) }
    var user: String { root + "/alice@example.com" }
    var store: String { user + "/Local.sqlite" }
    var cloud: String { user + "/Cloud.sqlite" }

    /// Alice's two stores, each with uncheckpointed WAL frames.
    func makeStores() throws {
        try FileSystem.makeDirectory(user)
        try SampleData.makeItemsStore(store, rows: 50, walOnlyTail: 5)
        try SampleData.makeItemsStore(cloud, rows: 20, walOnlyTail: 3)
    }

    func check(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments, tool: "granary-reopen-check")
    }

    func granary(_ arguments: [String]) throws -> GranaryProcess.Result {
        try GranaryProcess.run(arguments + ["--root", root, "--repo", repo])
    }

    /// The check lines of the checker's output, by name: "pass", "FAIL" or "skip".
    func verdicts(_ output: String) -> [String: String] {
        var verdicts: [String: String] = [:]
        for line in output.split(separator: "\n") {
            let words = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
            if words.count >= 2, ["pass", "FAIL", "skip"].contains(words[0]) {
                verdicts[String(words[1])] = String(words[0])
            }
        }
        return verdicts
    }

    /// Sends SIGTERM; true when the owner exits 0 within 10 s with STOPPED as its last line.
    func stopsOnSIGTERM(_ owner: DemoOwner) -> Bool {
        kill(owner.pid, SIGTERM)
        for _ in 0..<1000 where owner.process.isRunning { usleep(10_000) }
        guard !owner.process.isRunning else { return false }
        return owner.process.terminationReason == .exit && owner.process.terminationStatus == 0
            && owner.lines.last == "STOPPED"
    }
}

/// A fake owner in Python bound to a store's socket: it answers HELLO with `greeting` (raw, with
/// `\xNN` escapes; nil: a correct one) and records every line it receives into `record`.
final class FakeOwner {
    let process = Process()

    /// `greeting` answers HELLO (by default a valid answer), `pause` answers PAUSE (by default
    /// nothing); both are written with escapes: `\xHH` is that byte, `\u202e` its UTF-8.
    init(store: String, greeting: String?, record: String?, pause: String? = nil) throws {
        let name = try ReopenAddress(store: store).name
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [
            "-c",
            """
            import os, socket, sys
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind("\\0" + sys.argv[1]); s.listen(1)
            print("listening", flush=True)
            def raw(text):
                if not text: return None
                text = text.encode("latin-1", "backslashreplace").decode("unicode_escape")
                return b"".join(bytes([ord(c)]) if ord(c) < 256 else c.encode("utf-8") for c in text)
            greeting = raw(sys.argv[2])
            record = open(sys.argv[3], "a") if sys.argv[3] else None
            pause = raw(sys.argv[4])
            while True:
                c, _ = s.accept()
                f = c.makefile("rb")
                for line in f:
                    if record: record.write(line.decode()); record.flush()
                    if line.startswith(b"HELLO"):
                        c.sendall((greeting or b"HELLO granary-reopen 1 %d" % os.getpid()) + b"\\n")
                    if line.startswith(b"PAUSE") and pause:
                        c.sendall(pause + b"\\n")
                c.close()
            """, name, greeting ?? "", record ?? "", pause ?? "",
        ]
        let pipe = Pipe()
        process.standardOutput = pipe
        try process.run()
        _ = pipe.fileHandleForReading.availableData
    }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}
