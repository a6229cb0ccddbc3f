import CLinux
import Foundation
import GranaryKit
@_spi(Conversations) import GranaryOwner
import GranaryTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The reopen protocol between GranaryOwner and ReopenClient, and with a client and an owner
/// written in Python from the man page's rules (socket name = SHA-256 of the realpath).
@Suite("reopen protocol", .serialized)
struct ReopenProtocolTests {
    let folder = TemporaryFolder("granary-reopen")

    /// Counts callbacks from the owner's thread.
    final class Calls: @unchecked Sendable {
        private let lock = NSLock()
        private var names: [String] = []
        func add(_ name: String) { lock.lock(); names.append(name); lock.unlock() }
        var all: [String] { lock.lock(); defer { lock.unlock() }; return names }
    }

    func makeStore(in directory: String) throws -> String {
        try FileSystem.makeDirectory(directory)
        let path = directory + "/Local.sqlite"
        try SampleData.makeItemsStore(path, rows: 3, walOnlyTail: 0)
        return path
    }

    /// Runs /usr/bin/python3 (optionally as `nobody` through setpriv) and returns its output.
    func python(_ script: String, arguments: [String], asNobody: Bool = false, wait: Bool = true) throws -> (
        Process, Pipe
    ) {
        let process = Process()
        let pipe = Pipe()
        if asNobody {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments =
                ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script] + arguments
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
            process.arguments = ["-c", script] + arguments
        }
        process.standardOutput = pipe
        try process.run()
        if wait { process.waitUntilExit() }
        return (process, pipe)
    }

    /// A client written from granary-reopen(7): name, HELLO, PAUSE, RESUME.
    static let pythonClient = """
        import hashlib, os, socket, sys
        name = "granary-reopen/v1/" + hashlib.sha256(os.fsencode(os.path.realpath(sys.argv[1]))).hexdigest()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("\\0" + name)
        f = s.makefile("rw", newline="\\n")
        for line in ["HELLO granary-reopen 1", "PAUSE 5000", "RESUME"]:
            f.write(line + "\\n"); f.flush()
            reply = f.readline().strip()
            print(reply, flush=True)
            if reply.startswith("ERROR") or not reply: break
        """

    @Test("an owner of a store whose path is over 108 bytes is found, paused and resumed")
    func longPath() throws {
        var directory = folder.path
        while directory.utf8.count < 150 { directory += "/a-rather-long-folder-name" }
        let store = try makeStore(in: directory)
        #expect(store.utf8.count > 108)
        let calls = Calls()
        let owner = GranaryOwner()
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        #expect(client.ownerPID == getpid())
        try client.pause(lease: .seconds(10), timeout: .seconds(5))
        #expect(owner.isPaused(store))
        #expect(calls.all == ["close"])
        try client.resume(timeout: .seconds(5))
        #expect(!owner.isPaused(store))
        #expect(calls.all == ["close", "reopen"])
        client.close()
    }

    /// What the transaction of ``transactionsWait()`` saw when it ran.
    final class Seen: @unchecked Sendable {
        private let lock = NSLock()
        private var value: (paused: Bool, calls: [String])?
        func set(paused: Bool, calls: [String]) { lock.lock(); value = (paused, calls); lock.unlock() }
        var get: (paused: Bool, calls: [String])? { lock.lock(); defer { lock.unlock() }; return value }
    }

    /// Waits until thread `tid` of this process sleeps in the kernel in a futex call (a lock's or
    /// a condition's wait): `/proc/self/task/TID/syscall` starts with that call's number.
    static func waitUntilAsleepInFutex(_ tid: Int32, within limit: Duration) -> Bool {
        #if arch(x86_64)
            let futex = "202 "
        #elseif arch(arm64)
            let futex = "98 "
        #endif
        let deadline = ContinuousClock.now + limit
        while ContinuousClock.now < deadline {
            let text = try? String(contentsOfFile: "/proc/self/task/\(tid)/syscall", encoding: .utf8)
            if text?.hasPrefix(futex) == true { return true }
            sched_yield()
        }
        return false
    }

    @Test("transactions wait while the store is paused and run after the resume")
    func transactionsWait() throws {
        let store = try makeStore(in: folder.child("wait"))
        let calls = Calls()
        let owner = GranaryOwner()
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        try client.pause(lease: .seconds(10), timeout: .seconds(5))
        #expect(calls.all == ["close"])
        let seen = Seen()
        let atTheDoor = DispatchSemaphore(value: 0)
        let ran = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var tid: Int32 = 0
        let thread = Thread {
            tid = granary_gettid()
            atTheDoor.signal()
            _ = try? owner.withStore(store) {
                seen.set(paused: owner.isPaused(store), calls: calls.all)
                calls.add("transaction")
            }
            ran.signal()
        }
        thread.start()
        // The events, not a guess of how long they take: the transaction's thread has reached
        // withStore and sleeps there (nothing else it does blocks), the store still paused.
        #expect(atTheDoor.wait(timeout: .now() + 5) == .success)
        #expect(Self.waitUntilAsleepInFutex(tid, within: .seconds(5)), "the transaction never waited")
        #expect(calls.all == ["close"], "the transaction ran while the store was paused")
        try client.resume(timeout: .seconds(5))
        #expect(ran.wait(timeout: .now() + 5) == .success, "the transaction did not run after the resume")
        #expect(calls.all == ["close", "reopen", "transaction"])
        let when = try #require(seen.get)
        #expect(!when.paused && when.calls == ["close", "reopen"], "the transaction ran before the reopen: \(when)")
    }

    @Test("a pause whose lease runs out ends with the owner reopening by itself")
    func leaseExpires() throws {
        let store = try makeStore(in: folder.child("lease"))
        let calls = Calls()
        let owner = GranaryOwner(onEvent: { calls.add($0.kind.rawValue) })
        try owner.register(store: store, close: {}, reopen: {})
        defer { owner.stop() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        try client.pause(lease: .milliseconds(300), timeout: .seconds(5))
        for _ in 0..<300 where !calls.all.contains("lease-expired") { usleep(10_000) }
        #expect(calls.all == ["paused", "lease-expired"])
        #expect(!owner.isPaused(store))
    }

    @Test("an owner whose lease ran out waits for granary's commit lock before reopening")
    func leaseExpiryWaitsForCommitLock() throws {
        let store = try makeStore(in: folder.child("commit-lock"))
        let calls = Calls()
        let owner = GranaryOwner()
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        try client.pause(lease: .milliseconds(100), timeout: .seconds(5))
        let lock = try #require(CommitLock(store: store))
        usleep(400_000)
        #expect(calls.all == ["close"], "the owner reopened while the commit lock was held")
        lock.release()
        for _ in 0..<300 where calls.all.count < 2 { usleep(10_000) }
        #expect(calls.all == ["close", "reopen"])
    }

    @Test("a pause that running transactions outlast is refused with ERROR busy and nothing is closed")
    func busyOwnerRefuses() throws {
        let store = try makeStore(in: folder.child("busy"))
        let calls = Calls()
        let owner = GranaryOwner()
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        let long = Thread { _ = try? owner.withStore(store) { usleep(800_000) } }
        long.start()
        usleep(50_000)
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        #expect {
            try client.pause(lease: .milliseconds(200), timeout: .seconds(5))
        } throws: { error in
            guard case ReopenError.refused(_, let reason) = error else { return false }
            return reason == "busy"
        }
        #expect(calls.all.isEmpty)
        #expect(try owner.withStore(store) { 42 } == 42)
    }

    @Test("a nested withStore on the same thread does not deadlock against a pause")
    func nestedWithStore() throws {
        let store = try makeStore(in: folder.child("nested"))
        let calls = Calls()
        let owner = GranaryOwner()
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        let thread = Thread {
            _ = try? owner.withStore(store) {
                usleep(200_000)  // the pause arrives meanwhile
                _ = try? owner.withStore(store) { calls.add("inner") }
            }
        }
        thread.start()
        usleep(50_000)
        try client.pause(lease: .seconds(5), timeout: .seconds(5))
        #expect(calls.all == ["inner", "close"])
        try client.resume(timeout: .seconds(5))
    }

    @Test("an unregistered store is no longer served")
    func unregister() throws {
        let store = try makeStore(in: folder.child("unregister"))
        let owner = GranaryOwner()
        try owner.register(store: store, close: {}, reopen: {})
        owner.unregister(store: store)
        usleep(300_000)  // the listening thread notices within 100 ms
        #expect(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(1)) == nil)
    }

    @Test("a second owner of the same store is refused")
    func secondOwner() throws {
        let store = try makeStore(in: folder.child("twice"))
        let first = GranaryOwner()
        try first.register(store: store, close: {}, reopen: {})
        defer { first.stop() }
        #expect(throws: ReopenError.self) { try GranaryOwner().register(store: store, close: {}, reopen: {}) }
    }

    @Test("a client written in Python from the spec alone pauses and resumes the owner")
    func pythonClient() throws {
        let store = try makeStore(in: folder.child("python"))
        let calls = Calls()
        let owner = GranaryOwner()
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        let (_, pipe) = try python(Self.pythonClient, arguments: [store])
        let output = String(decoding: pipe.fileHandleForReading.readAllRetryingInterrupts(), as: UTF8.self)
        #expect(output == "HELLO granary-reopen 1 \(getpid())\nPAUSED\nRESUMED\n")
        #expect(calls.all == ["close", "reopen"])
    }

    @Test("a client of another uid cannot pause the owner")
    func otherUIDCannotPause() throws {
        try #require(getuid() == 0, "needs root to run a client as nobody")
        let store = try makeStore(in: folder.child("nobody"))
        let calls = Calls()
        let owner = GranaryOwner()
        try owner.register(store: store, close: { calls.add("close") }, reopen: {})
        defer { owner.stop() }
        // The store's canonical path is computed here; nobody cannot resolve a path under our 0700 folder.
        let canonical = try ReopenAddress(store: store).canonicalPath
        let (_, pipe) = try python(Self.pythonClient, arguments: [canonical], asNobody: true)
        let output = String(decoding: pipe.fileHandleForReading.readAllRetryingInterrupts(), as: UTF8.self)
        #expect(output == "ERROR permission-denied\n")
        #expect(calls.all.isEmpty)
    }

    @Test("granary refuses to talk to an owner whose uid is neither the store's nor root")
    func untrustedOwner() throws {
        try #require(getuid() == 0, "needs root to run an owner as nobody")
        let store = try makeStore(in: folder.child("impostor"))
        let name = try ReopenAddress(store: store).name
        let script = """
            import socket, sys, time
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind("\\0" + sys.argv[1]); s.listen(1)
            print("listening", flush=True)
            c, _ = s.accept(); time.sleep(2)
            """
        let (process, pipe) = try python(script, arguments: [name], asNobody: true, wait: false)
        defer { process.terminate() }
        _ = pipe.fileHandleForReading.availableData
        #expect {
            _ = try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(2))
        } throws: { error in
            guard case ReopenError.untrustedPeer(_, _, let uid, _) = error else { return false }
            return uid == 65534
        }
    }

    /// A fake owner written in Python: it binds the store's socket and answers each line it
    /// receives with the next of `answers` (raw bytes, `\n` added; `-` for silence), printing
    /// every line it received.
    static let scriptedOwner = """
        import socket, sys, time
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind("\\0" + sys.argv[1]); s.listen(1)
        print("listening", flush=True)
        answers = [bytes(a, "latin-1").decode("unicode_escape").encode("latin-1") for a in sys.argv[2:]]
        c, _ = s.accept()
        f = c.makefile("rb")
        for answer in answers:
            line = f.readline()
            if not line: break
            if answer != b"-": c.sendall(answer + b"\\n")
        time.sleep(3)
        """

    /// Starts the scripted owner for `store` and waits until it listens.
    func scripted(_ store: String, _ answers: [String]) throws -> Process {
        let name = try ReopenAddress(store: store).name
        let (process, pipe) = try python(Self.scriptedOwner, arguments: [name] + answers, wait: false)
        _ = pipe.fileHandleForReading.availableData
        return process
    }

    func refusal(_ error: any Error) -> String? {
        guard case ReopenError.refused(_, let reason) = error else { return nil }
        return reason
    }

    func violation(_ error: any Error) -> String? {
        guard case ReopenError.protocolViolation(_, let detail) = error else { return nil }
        return detail
    }

    @Test(
        "granary refuses a HELLO answer without a pid, with an extra word, or with control bytes, and quotes it escaped"
    )
    func malformedGreetings() throws {
        let cases: [(answer: String, quoted: String)] = [
            ("HELLO granary-reopen 1", #""HELLO granary-reopen 1""#),
            ("HELLO granary-reopen 1 4242 restored", #""HELLO granary-reopen 1 4242 restored""#),
            ("HELLO granary-reopen 2 4242", #""HELLO granary-reopen 2 4242""#),
            (#"ERROR \x1b[2J\x1b[Hrestored alice"#, #""ERROR \x1b[2J\x1b[Hrestored alice""#),
        ]
        for (index, test) in cases.enumerated() {
            let store = try makeStore(in: folder.child("greeting-\(index)"))
            let owner = try scripted(store, [test.answer])
            defer { owner.terminate() }
            do {
                _ = try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5))
                Issue.record("\(test.answer) was accepted")
            } catch {
                let text = "\(error)"
                #expect(
                    text.contains(test.quoted) || violation(error)?.contains("HELLO granary-reopen 2") == true,
                    "\(text)")
                #expect(
                    !text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F },
                    "raw control bytes in \(text)")
                #expect(violation(error) != nil, "\(error)")
            }
        }
    }

    @Test("an ERROR answer is a refusal that names only a reason of the protocol")
    func refusedHello() throws {
        let store = try makeStore(in: folder.child("refused"))
        let owner = try scripted(store, ["ERROR busy"])
        defer { owner.terminate() }
        #expect {
            _ = try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5))
        } throws: { refusal($0) == "busy" }
    }

    @Test("BYE while paused ends the pause: the owner reopens and closes the connection without a word")
    func byeWhilePaused() throws {
        let store = try makeStore(in: folder.child("bye"))
        let calls = Calls()
        let owner = GranaryOwner(onEvent: { calls.add($0.kind.rawValue) })
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        try client.pause(lease: .seconds(30), timeout: .seconds(5))
        client.close()
        for _ in 0..<300 where owner.isPaused(store) { usleep(10_000) }
        #expect(!owner.isPaused(store))
        // The event follows the reopen on the owner's connection thread: wait for it.
        for _ in 0..<300 where !calls.all.contains("peer-gone") { usleep(10_000) }
        #expect(calls.all == ["close", "paused", "reopen", "peer-gone"])
    }

    @Test("a connection quiet after HELLO is closed after the idle timeout, and the next client is served")
    func idleConnectionDropped() throws {
        let store = try makeStore(in: folder.child("idle"))
        let calls = Calls()
        let owner = GranaryOwner(
            onEvent: { calls.add($0.kind.rawValue) }, idleTimeout: .milliseconds(300))
        try owner.register(store: store, close: {}, reopen: {})
        defer { owner.stop() }
        let idler = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        // The next client waits in the queue until the idler is dropped.
        let next = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        #expect(calls.all == ["idle"])
        try next.pause(lease: .seconds(5), timeout: .seconds(5))
        try next.resume(timeout: .seconds(5))
        #expect(throws: ReopenError.self) { try idler.pause(lease: .seconds(5), timeout: .seconds(1)) }
    }

    @Test(
        "a close that leaves a descriptor of the store open is refused with ERROR close-failed and the store reopened")
    func descriptorLeftOpen() throws {
        let store = try makeStore(in: folder.child("descriptor"))
        let calls = Calls()
        let kept = Kept()
        let owner = GranaryOwner(onEvent: { calls.add($0.kind.rawValue) })
        // Like a binding whose close leaves a zombie connection behind.
        try owner.register(store: store, close: { kept.fd = open(store, O_RDONLY) }, reopen: { calls.add("reopen") })
        defer { owner.stop(); close(kept.fd) }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        #expect {
            try client.pause(lease: .seconds(10), timeout: .seconds(5))
        } throws: { refusal($0) == "close-failed" }
        #expect(calls.all == ["callback-failed", "reopen"])
        #expect(!owner.isPaused(store))
    }

    final class Kept: @unchecked Sendable { var fd: Int32 = -1 }

    @Test(
        "the lease covers both finishing the running transactions and the pause, so no transaction waits longer than it"
    )
    func leaseIncludesDraining() throws {
        let store = try makeStore(in: folder.child("drain"))
        let calls = Calls()
        let owner = GranaryOwner(onEvent: { calls.add($0.kind.rawValue) })
        try owner.register(store: store, close: {}, reopen: {})
        defer { owner.stop() }
        let long = Thread { _ = try? owner.withStore(store) { usleep(1_000_000) } }
        long.start()
        usleep(50_000)
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        let start = ContinuousClock.now
        try client.pause(lease: .milliseconds(1500), timeout: .seconds(5))
        for _ in 0..<500 where !calls.all.contains("lease-expired") { usleep(10_000) }
        // Counted from PAUSED instead, the lease would end 1 s + 1.5 s after PAUSE.
        #expect(calls.all == ["paused", "lease-expired"])
        #expect(ContinuousClock.now - start < .milliseconds(2300))
    }

    @Test("a transaction over two stores taken with withStores never makes the pause of either busy")
    func transactionOverTwoStores() throws {
        let first = try makeStore(in: folder.child("two-a"))
        let second = try makeStore(in: folder.child("two-b"))
        let owner = GranaryOwner()
        try owner.register(store: first, close: {}, reopen: {})
        try owner.register(store: second, close: {}, reopen: {})
        defer { owner.stop() }
        let running = Running()
        let worker = Thread {
            while running.value {
                _ = try? owner.withStores([second, first]) { usleep(5_000) }
            }
        }
        worker.start()
        defer { running.value = false }
        usleep(50_000)
        for _ in 0..<5 {
            let a = try #require(try ReopenClient.connect(store: first, storeOwnerUID: getuid(), timeout: .seconds(5)))
            let b = try #require(try ReopenClient.connect(store: second, storeOwnerUID: getuid(), timeout: .seconds(5)))
            try a.pause(lease: .seconds(2), timeout: .seconds(5))
            try b.pause(lease: .seconds(2), timeout: .seconds(5))
            #expect(owner.isPaused(first) && owner.isPaused(second))
            _ = try b.endPause(timeout: .seconds(5))
            _ = try a.endPause(timeout: .seconds(5))
            a.close()
            b.close()
        }
    }

    final class Running: @unchecked Sendable {
        private let lock = NSLock()
        private var flag = true
        var value: Bool {
            get { lock.lock(); defer { lock.unlock() }; return flag }
            set { lock.lock(); flag = newValue; lock.unlock() }
        }
    }

    /// An owner that breaks the protocol on purpose, built on GranaryOwner's lower-level
    /// conversation API: it answers HELLO, pauses on PAUSE and resumes on RESUME, each answer
    /// `answerDelay` late; with `resumedUnasked` it reopens and sends RESUMED 50 ms after PAUSED.
    static func misbehaving(answerDelay: Duration = .zero, resumedUnasked: Bool = false) -> GranaryOwner {
        GranaryOwner(idleTimeout: ReopenProtocol.idleTimeout) { session in
            let channel = session.channel
            func answer(_ answer: ReopenAnswer) {
                Thread.sleep(
                    forTimeInterval: Double(answerDelay.components.seconds) + Double(answerDelay.components.attoseconds)
                        / 1e18)
                channel.send(answer.line)
            }
            var paused = false
            while case .line(let line) = channel.readLine(until: .now + session.idleTimeout, stop: session.stop) {
                switch ReopenRequest.parse(line) {
                case .success(.hello):
                    answer(.hello(version: ReopenProtocol.version, pid: getpid()))
                case .success(.pause(let ms)) where !paused:
                    guard session.drain(until: .now + .milliseconds(ms)) == .drained else { return }
                    try? session.closeStore()
                    session.enterPaused()
                    paused = true
                    answer(.paused)
                    if resumedUnasked {
                        usleep(50_000)
                        session.reopen(.resumed)
                        paused = false
                        channel.send(ReopenAnswer.resumed.line)
                    }
                case .success(.resume):
                    if paused { session.reopen(.resumed) }
                    paused = false
                    answer(.resumed)
                default:
                    if paused { session.reopen(.peerGone) }
                    return
                }
            }
            if paused { session.reopen(.peerGone) }
        }
    }

    @Test("an owner that sends RESUMED before RESUME is caught before the commit and when resuming")
    func earlyResumed() throws {
        let store = try makeStore(in: folder.child("early"))
        let owner = Self.misbehaving(resumedUnasked: true)
        try owner.register(store: store, close: {}, reopen: {})
        defer { owner.stop() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        try client.pause(lease: .seconds(10), timeout: .seconds(5))
        usleep(200_000)
        #expect { try client.confirmPaused() } throws: { violation($0)?.contains(#""RESUMED" unasked"#) == true }
        let again = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        try again.pause(lease: .seconds(10), timeout: .seconds(5))
        usleep(200_000)
        #expect { _ = try again.endPause(timeout: .seconds(5)) } throws: {
            violation($0)?.contains("before RESUME") == true
        }
    }

    @Test("endPause reports a pause that ended on time, late, by the lease's end, and with no answer")
    func pauseEndings() throws {
        let store = try makeStore(in: folder.child("endings"))
        do {
            let owner = GranaryOwner()
            try owner.register(store: store, close: {}, reopen: {})
            defer { owner.stop() }
            let client = try #require(
                try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
            try client.pause(lease: .seconds(10), timeout: .seconds(5))
            let report = try client.endPause(timeout: .seconds(5))
            #expect(report.ending == .resumed)
            #expect(report.pause >= report.acknowledgement && report.pause >= report.reopening)
            #expect(client.lastPause == report)
            // The lease ran out before RESUME: EXPIRED, and the owner reopened by itself.
            try client.pause(lease: .milliseconds(200), timeout: .seconds(5))
            usleep(500_000)
            #expect(try client.endPause(timeout: .seconds(5)).ending == .expired)
        }
        usleep(300_000)  // the stopped owner's listening thread closes its socket within 100 ms
        do {
            // Every answer 300 ms late; on time means within 100 ms.
            let owner = Self.misbehaving(answerDelay: .milliseconds(300))
            try owner.register(store: store, close: {}, reopen: {})
            defer { owner.stop() }
            let client = try #require(
                try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
            try client.pause(lease: .seconds(10), timeout: .seconds(5))
            let report = try client.endPause(timeout: .milliseconds(100))
            #expect(report.ending == .late)
            #expect(report.reopening >= .milliseconds(300))
            client.close()
        }
        usleep(300_000)
        let silent = try scripted(store, ["HELLO granary-reopen 1 4242", "PAUSED", "-"])
        defer { silent.terminate() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        try client.pause(lease: .milliseconds(300), timeout: .seconds(5))
        #expect(try client.endPause(timeout: .milliseconds(100)).ending == .unanswered)
    }

    @Test(
        "endPauses sends RESUME to every owner at once: a silent owner keeps no other paused, each pause is its own, and the silent one is waited for past its lease"
    )
    func endPausesTogether() throws {
        let quick = try makeStore(in: folder.child("together-quick"))
        let mute = try makeStore(in: folder.child("together-mute"))
        let owner = GranaryOwner()
        try owner.register(store: quick, close: {}, reopen: {})
        defer { owner.stop() }
        let silent = try scripted(mute, ["HELLO granary-reopen 1 4242", "PAUSED", "-"])
        defer { silent.terminate() }
        let first = try #require(try ReopenClient.connect(store: mute, storeOwnerUID: getuid(), timeout: .seconds(5)))
        let second = try #require(
            try ReopenClient.connect(store: quick, storeOwnerUID: getuid(), timeout: .seconds(5)))
        try first.pause(lease: .milliseconds(1500), timeout: .seconds(5))
        try second.pause(lease: .seconds(10), timeout: .seconds(5))
        let results = ReopenClient.endPauses([first, second], timeout: .milliseconds(200))
        let silentPause = try results[0].get()
        let quickPause = try results[1].get()
        #expect(quickPause.ending == .resumed)
        #expect(quickPause.reopening < .milliseconds(200), "\(quickPause.reopening)")
        #expect(silentPause.ending == .unanswered)
        // Waited until the lease's end plus one owner timeout, for an EXPIRED that never came.
        #expect(silentPause.ended >= silentPause.pauseSent + .milliseconds(1700))
        #expect(quickPause.ended < silentPause.ended)
    }

    @Test("a client quiet for half the idle timeout says HELLO again before PAUSE")
    func reconnectBeforePause() throws {
        let store = try makeStore(in: folder.child("reconnect"))
        // An owner that drops quiet connections after 1 s (a conforming one waits 10 s).
        let owner = GranaryOwner(idleTimeout: .seconds(1))
        try owner.register(store: store, close: {}, reopen: {})
        defer { owner.stop() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        usleep(5_100_000)
        try client.pause(lease: .seconds(5), timeout: .seconds(5))
        #expect(owner.isPaused(store))
        #expect(try client.endPause(timeout: .seconds(5)).ending == .resumed)
    }
}
