import Foundation
import GranaryKit
import GranaryOwner
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `granary restore` into examples/owner.py, past an idle connection, and against hostile owners.
@Suite("reopen protocol conformance: restores against real and hostile owners", .serialized)
struct ReopenRestoreTests: ReopenConformanceSuite {
    let folder = TemporaryFolder("granary-conformance")

    init() throws { try makeStores() }

    @Test("a same-uid process idling after HELLO does not keep a restore from swapping under the owner")
    func idleClientDoesNotBlockRestore() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let owner = try DemoOwner(stores: [store, cloud], log: folder.child("owner.log"))
        defer { owner.stop() }
        try owner.waitForMoreWrites(10)
        // Connects, says HELLO, reads the answer, then sits there.
        let idler = Process()
        idler.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        idler.arguments = [
            "-c",
            """
            import hashlib, os, socket, sys, time
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect("\\0granary-reopen/v1/" + hashlib.sha256(os.fsencode(os.path.realpath(sys.argv[1]))).hexdigest())
            s.sendall(b"HELLO granary-reopen 1\\n")
            print(s.recv(100).decode().strip(), flush=True)
            time.sleep(60)
            """, store,
        ]
        let pipe = Pipe()
        idler.standardOutput = pipe
        try idler.run()
        defer { idler.terminate() }
        let greeting = String(decoding: pipe.fileHandleForReading.availableData, as: UTF8.self)
        #expect(greeting.hasPrefix("HELLO granary-reopen 1 \(owner.pid)"))
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.components(separatedBy: "swap").count == 3, "\(result.stdout)")
        let canonical = try ReopenAddress(store: store).canonicalPath
        #expect(
            owner.lines.contains { $0.hasPrefix("EVENT idle \(canonical) ") },
            "\(owner.lines.filter { $0.hasPrefix("EVENT") })")
        try owner.waitFor { $0.filter { $0.hasPrefix("REOPENED") }.count == 2 }
    }

    @Test("a restore into examples/owner.py under continuous writes to both stores loses no acknowledged write")
    func restoreIntoPythonOwner() throws {
        let archive = try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let extracted = folder.child("archived")
        try RestoreFixtures.extract(archive, into: extracted)
        let owner = try DemoOwner(stores: [store, cloud], log: folder.child("owner.log"), intervalMs: 2, python: true)
        defer { owner.stop() }
        try owner.waitForMoreWrites(50)
        let pid = owner.pid
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("owner pid \(pid)"), "\(result.stdout)")
        try owner.waitFor { $0.filter { $0.hasPrefix("REOPENED") && $0.hasSuffix(" resume") }.count == 2 }
        try owner.waitForMoreWrites(50)
        #expect(stopsOnSIGTERM(owner))
        let safety = try #require(
            result.stdout.split(separator: " ").last.map { $0.trimmingCharacters(in: .whitespacesAndNewlines) })
        let replaced = folder.child("replaced")
        try RestoreFixtures.extract(safety, into: replaced)
        for (path, name) in [(store, "Local.sqlite"), (cloud, "Cloud.sqlite")] {
            let acked = owner.acked(into: try ReopenAddress(store: path).canonicalPath)
            #expect(!acked.isEmpty)
            let live = try RestoreFixtures.ids(path)
            let kept = try RestoreFixtures.ids(replaced + "/stores/" + name)
            #expect(acked.subtracting(live).subtracting(kept).isEmpty, "\(name): acknowledged writes lost")
            // The archived content came back: the items table as archived, and the archive's writes.
            let archived = try RestoreFixtures.ids(extracted + "/stores/" + name)
            #expect(archived.isSubset(of: live), "\(name): archived rows missing")
            #expect(
                try RestoreFixtures.ids(path, table: "items")
                    == RestoreFixtures.ids(extracted + "/stores/" + name, table: "items"))
            #expect(try Database(path: path, mode: .readOnly).integrityCheck(full: true) == ["ok"])
        }
    }

    @Test("a dry run says HELLO and BYE to the owner and nothing else")
    func dryRunConversation() throws {
        try FileSystem.removeFile(cloud)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let recorded = folder.child("recorded")
        let owner = try FakeOwner(store: store, greeting: nil, record: recorded)
        defer { owner.stop() }
        let result = try granary(["restore", "alice@example.com", "--dry-run"])
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stdout.contains("would restore"))
        usleep(200_000)
        #expect((try? String(contentsOfFile: recorded, encoding: .utf8)) == "HELLO granary-reopen 1\nBYE\n")
    }

    @Test(
        "a restore that swaps plans and pauses on one connection: HELLO then PAUSE, as granary-reopen(7) says (a refused pause changes nothing)"
    )
    func restorePlansAndPausesOnOneConnection() throws {
        try FileSystem.removeFile(cloud)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let recorded = folder.child("recorded")
        let owner = try FakeOwner(store: store, greeting: nil, record: recorded, pause: "ERROR busy")
        defer { owner.stop() }
        let before = try RestoreFixtures.ids(store, table: "items")
        let result = try granary(["restore", "alice@example.com", "--method", "swap", "--owner-timeout", "1"])
        #expect(result.status == 75, "\(result.stderr)")
        #expect(result.stderr.contains("refused: busy"), "\(result.stderr)")
        usleep(200_000)
        let lines = (try? String(contentsOfFile: recorded, encoding: .utf8)) ?? ""
        #expect(lines.hasPrefix("HELLO granary-reopen 1\nPAUSE 30000\n"), "\(lines)")
        #expect(lines.components(separatedBy: "HELLO").count == 2, "one connection, one HELLO: \(lines)")
        #expect(try RestoreFixtures.ids(store, table: "items") == before)
    }

    @Test("a restore whose owner's lease ran out after the commit says so in its pause line: expired, not RESUMED")
    func pauseLineSaysExpired() throws {
        try FileSystem.removeFile(cloud)
        let archive = (try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com") as NSString)
            .lastPathComponent
        let owner = try DemoOwner(stores: [store], log: folder.child("owner.log"))
        defer { owner.stop() }
        try owner.waitForMoreWrites(10)
        // A stall of 2.5 s at each restore step in turn under a lease of 2.3 s: before the commit
        // the restore is refused; after it, RESUME comes after the lease and the owner has sent EXPIRED.
        var expired: GranaryProcess.Result?
        for step in CrashPoints.plan(CrashPoint.Name.restoreCommit) {
            let result = try GranaryProcess.run(
                ["restore", "alice@example.com", archive, "--no-safety-archive", "--root", root, "--repo", repo],
                environment: ["GRANARY_TEST_LEASE_MS": "2300", "GRANARY_TEST_STALL_AT": "\(step):2500"])
            if result.status == 0 && result.stderr.contains("reopened by itself") {
                expired = result
                break
            }
        }
        let result = try #require(expired, "no restore step stalled past the lease after the commit")
        #expect(
            result.stdout.contains(
                "Local.sqlite: owner paused for "), "\(result.stdout)")
        #expect(
            result.stdout.contains(", expired (from PAUSE sent to EXPIRED received: its lease ran out)"),
            "\(result.stdout)")
        #expect(!result.stdout.contains("to RESUMED received"), "\(result.stdout)")
    }

    @Test("an owner's text reaches the admin's terminal escaped, and a malformed greeting changes nothing")
    func ownerTextEscaped() throws {
        try FileSystem.removeFile(cloud)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let before = try RestoreFixtures.dump(store)
        let owner = try FakeOwner(
            store: store, greeting: #"ERROR \x1b[2J\x1b[Hrestored alice@example.com from a.tar.zst\x0aerror: none"#,
            record: nil)
        defer { owner.stop() }
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 75, "\(result.stderr)")
        #expect(!(result.stdout + result.stderr).contains("\u{1B}"), "a raw escape reached the terminal")
        #expect(!result.stdout.contains("restored"))
        #expect(result.stderr.contains(#"\x1b[2J\x1b[Hrestored"#), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 2, "\(result.stderr)")
        #expect(try RestoreFixtures.dump(store) == before)
    }

    /// What hostile owners answer (HELLO or PAUSE), and how granary shows it.
    static let hostileAnswers: [(greeting: String?, pause: String?, shown: String)] = [
        (
            nil, #"ERROR \x1b[2J\x1b[Hrestored alice@example.com\rERROR busy"#,
            #"\x1b[2J\x1b[Hrestored alice@example.com"#
        ),
        (nil, #"ERROR busy\u202e\x85\u2028"#, #"busy\xe2\x80\xae\x85\xe2\x80\xa8"#),
        (nil, #"ERROR \xff\xfe\x9b31m"#, #"\xff\xfe\x9b31m"#),
        // A printable word that is no refusal of the protocol: quoted, and cut after 60 bytes.
        (
            nil, #"ERROR restored-alice@example.com-from-20261123T150043Z.tar.zst"#,
            #""ERROR restored-alice@example.com-from-20261123T150043Z.tar.z"… (62 bytes)"#
        ),
        (#"HELLO granary-reopen 1 \u202e4242"#, nil, #"\xe2\x80\xae4242"#),
        (#"\x1b]0;owned\x07HELLO granary-reopen 1 1"#, nil, #"\x1b]0;owned\x07HELLO"#),
    ]

    @Test(
        "everything an owner sends (its greeting, an ERROR line) reaches the terminal and --json escaped, and changes nothing",
        arguments: 0..<hostileAnswers.count)
    func ownerAnswersEscaped(index: Int) throws {
        let answer = Self.hostileAnswers[index]
        try FileSystem.removeFile(cloud)
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let before = try RestoreFixtures.dump(store)
        let owner = try FakeOwner(store: store, greeting: answer.greeting, record: nil, pause: answer.pause)
        defer { owner.stop() }
        for json in [false, true] {
            let result = try granary(
                ["restore", "alice@example.com", "--method", "swap", "--owner-timeout", "2"] + (json ? ["--json"] : []))
            #expect(result.status == 75, "\(result.stderr)")
            let all = result.stdout + result.stderr
            for raw in ["\u{1B}", "\r", "\u{07}", "\u{85}", "\u{9B}", "\u{202E}", "\u{2028}", "\u{FFFD}"] {
                #expect(!all.contains(raw), "\(raw.debugDescription) reached the output raw: \(all.debugDescription)")
            }
            #expect(!all.contains("restored alice@example.com from"), "\(all)")
            #expect(result.stderr.contains(answer.shown), "\(result.stderr)")
            #expect(result.stderr.split(separator: "\n").count == 2, "\(result.stderr)")
            if json {
                let document = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
                let message = (document?["error"] as? [String: Any])?["message"] as? String
                #expect(message?.contains(answer.shown) == true, "\(result.stdout)")
            }
        }
        #expect(try RestoreFixtures.dump(store) == before)
    }

    @Test(
        "an owner whose HELLO answer lacks its pid only after the dry run makes the restore exit 75 and change nothing")
    func dryRunDiffers() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        let owner = try DemoOwner(
            stores: [store, cloud], log: folder.child("owner.log"), breaking: ["dry-run-differs"])
        defer { owner.stop() }
        let dry = try granary(["restore", "alice@example.com", "--dry-run"])
        #expect(dry.status == 0, "\(dry.stderr)")
        #expect(dry.stdout.contains("owner pid \(owner.pid)"))
        let before = try RestoreFixtures.ids(store, table: "items")
        let result = try granary(["restore", "alice@example.com"])
        #expect(result.status == 75, "\(result.stderr)")
        #expect(result.stderr.contains(#"it answered HELLO with "HELLO granary-reopen 1""#), "\(result.stderr)")
        #expect(!owner.lines.contains { $0.hasPrefix("PAUSED") })
        #expect(try RestoreFixtures.ids(store, table: "items") == before)
    }

    @Test("each hostile behaviour of granary-demo-owner does what its --help says while a restore runs")
    func hostileBehaviours() throws {
        try RestoreFixtures.archive(root: root, repo: repo, user: "alice@example.com")
        // (flag, the owner's log lines that show it (any of them), what granary must answer when
        // settled: status, message). An early RESUMED reopens the store 50 ms after PAUSED: before
        // granary's swap it reopens (`resumed`); on a loaded machine the swap may come first, and
        // the reopen then waits on granary's lock and fails (`callback-failed`).
        let cases: [(flags: [String], evidence: [String], expected: (Int32, String)?)] = [
            (["keep-descriptor"], ["HOSTILE kept descriptor"], (75, "still open by process")),
            (["write-while-paused"], ["HOSTILE wr"], nil),
            (["reinject-wal"], ["HOSTILE reinjected"], nil),
            (["early-resumed"], ["EVENT resumed", "EVENT callback-failed"], nil),
            (["slow-answers"], ["READY"], (75, "did not answer PAUSE within 500 ms")),
            (["huge-answer"], ["READY"], (75, "answered HELLO with a line over 1024 bytes")),
        ]
        for (index, test) in cases.enumerated() {
            let owner = try DemoOwner(
                stores: [store], log: folder.child("hostile-\(index).log"), intervalMs: 2,
                startID: Int64(index + 1) * 1_000_000,
                breaking: test.flags)
            defer { owner.stop() }
            try owner.waitForMoreWrites(20)
            let result = try granary(["restore", "alice@example.com", "--owner-timeout", "0.5"])
            if let (status, message) = test.expected {
                #expect(result.status == status, "\(test.flags): \(result.stderr)")
                #expect(result.stderr.contains(message), "\(test.flags): \(result.stderr)")
            }
            do {
                try owner.waitFor { lines in lines.contains { line in test.evidence.contains { line.hasPrefix($0) } } }
            } catch {
                Issue.record(
                    "\(test.flags): none of \(test.evidence) in the owner's log (\(error)); granary exited \(result.status): \(result.stdout)\(result.stderr)"
                )
            }
            owner.stop()
            usleep(200_000)
        }
    }
}
