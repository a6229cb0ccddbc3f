import Foundation
import GranaryKit
import GranaryOwner
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
    func python(_ script: String, arguments: [String], asNobody: Bool = false, wait: Bool = true) throws -> (Process, Pipe) {
        let process = Process()
        let pipe = Pipe()
        if asNobody {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setpriv")
            process.arguments = ["--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c", script] + arguments
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

    @Test("transactions wait while the store is paused and run after the resume")
    func transactionsWait() throws {
        let store = try makeStore(in: folder.child("wait"))
        let calls = Calls()
        let owner = GranaryOwner()
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        let client = try #require(try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5)))
        try client.pause(lease: .seconds(10), timeout: .seconds(5))
        let thread = Thread { _ = try? owner.withStore(store) { calls.add("transaction") } }
        thread.start()
        usleep(200_000)
        #expect(calls.all == ["close"])
        try client.resume(timeout: .seconds(5))
        for _ in 0..<100 where calls.all.count < 3 { usleep(10_000) }
        #expect(calls.all == ["close", "reopen", "transaction"])
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
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
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
        let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
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
}
