import Foundation
@_spi(Conversations) import GranaryOwner
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// The rules of granary-reopen(7) settled after an owner was written in C from the page alone
/// (issue 30, item 6): each fails with the behaviour the page left open.
extension ReopenProtocolTests {
    /// A raw client: HELLO answered, then lines as given.
    func rawClient(_ store: String) throws -> ReopenChannel {
        let channel = try #require(try ReopenChannel.connect(to: ReopenAddress(store: store)))
        channel.send("HELLO granary-reopen 1")
        guard case .line(let line) = channel.readLine(until: .now + .seconds(5)),
            case .hello? = ReopenAnswer.parse(line)
        else {
            Issue.record("no HELLO answer")
            return channel
        }
        return channel
    }

    @Test(
        "a client that closes the connection while the owner is pausing ends the pause at once: nothing is closed and the waiting transactions run long before the lease ends"
    )
    func goneWhilePausing() throws {
        let store = try makeStore(in: folder.child("gone-while-pausing"))
        let calls = Calls()
        let owner = GranaryOwner(onEvent: { calls.add($0.kind.rawValue) })
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        // A running transaction keeps the owner pausing.
        let running = DispatchSemaphore(value: 0)
        let finish = DispatchSemaphore(value: 0)
        Thread {
            _ = try? owner.withStore(store) {
                running.signal(); finish.wait()
            }
        }.start()
        running.wait()
        defer { finish.signal() }
        let channel = try rawClient(store)
        channel.send("PAUSE 60000")
        usleep(200_000)  // the owner reads PAUSE and is pausing
        let waited = DispatchSemaphore(value: 0)
        Thread {
            _ = try? owner.withStore(store) { calls.add("transaction") }; waited.signal()
        }.start()
        usleep(100_000)
        #expect(!calls.all.contains("transaction"), "a transaction ran while the owner was pausing")
        channel.close()
        // Before: it waited for the running transaction or the lease (60 s), whichever came first.
        #expect(waited.wait(timeout: .now() + 20) == .success, "the waiting transaction still waits")
        // The event is reported by the owner's connection thread, which may run after the released
        // transaction: wait for it rather than read it at once.
        for _ in 0..<500 where !calls.all.contains("peer-gone") { usleep(10_000) }
        #expect(!calls.all.contains("close"), "\(calls.all)")
        #expect(calls.all.contains("peer-gone"), "\(calls.all)")
        #expect(!owner.isPaused(store))
    }

    @Test("a PAUSE refused with ERROR busy after more than the idle timeout restarts the idle clock when answered")
    func refusedPauseRestartsIdleClock() throws {
        let store = try makeStore(in: folder.child("busy-idle"))
        let owner = GranaryOwner(onEvent: nil, idleTimeout: .seconds(1))
        try owner.register(store: store, close: {}, reopen: {})
        defer { owner.stop() }
        let running = DispatchSemaphore(value: 0)
        let finish = DispatchSemaphore(value: 0)
        Thread {
            _ = try? owner.withStore(store) {
                running.signal(); finish.wait()
            }
        }.start()
        running.wait()
        let channel = try rawClient(store)
        // The lease (1.5 s) outlasts the idle timeout (1 s): the answer comes after it.
        channel.send("PAUSE 1500")
        let busy = channel.readLine(until: .now + .seconds(10))
        finish.signal()
        #expect(busy == .line(Array("ERROR busy".utf8)))
        channel.send("RESUME")
        #expect(channel.readLine(until: .now + .seconds(5)) == .line(Array("RESUMED".utf8)))
        // And the clock still closes the connection once quiet.
        #expect(channel.readLine(until: .now + .seconds(10)) == .closed)
    }

    @Test("a client's ERROR with a reason the protocol does not have neither ends the conversation nor the pause")
    func clientErrorWithUnknownReason() throws {
        let store = try makeStore(in: folder.child("client-error-unknown"))
        let calls = Calls()
        let owner = GranaryOwner()
        try owner.register(store: store, close: { calls.add("close") }, reopen: { calls.add("reopen") })
        defer { owner.stop() }
        let channel = try rawClient(store)
        channel.send("ERROR nonsense")
        #expect(channel.readLine(until: .now + .seconds(5)) == .line(Array("ERROR unknown-command".utf8)))
        channel.send("PAUSE 30000")
        #expect(channel.readLine(until: .now + .seconds(5)) == .line(Array("PAUSED".utf8)))
        channel.send("ERROR nonsense")
        #expect(channel.readLine(until: .now + .seconds(5)) == .line(Array("ERROR unexpected-while-paused".utf8)))
        #expect(owner.isPaused(store))
        channel.send("ERROR busy")
        #expect(channel.readLine(until: .now + .seconds(5)) == .closed)
        for _ in 0..<300 where owner.isPaused(store) { usleep(10_000) }
        #expect(calls.all == ["close", "reopen"])
    }

    @Test("PAUSE with a tab or a second CR in its first word is an unknown command, not a bad lease")
    func firstWordByteForByte() throws {
        let store = try makeStore(in: folder.child("first-word"))
        let owner = GranaryOwner()
        try owner.register(store: store, close: {}, reopen: {})
        defer { owner.stop() }
        let channel = try rawClient(store)
        for (line, answer) in [
            ("PAUSE\t100", "ERROR unknown-command"), ("PAUSE\r\r", "ERROR unknown-command"),
            ("PAUSE 100\t", "ERROR bad-lease"), ("PAUSE 100\r\r", "ERROR bad-lease"),
        ] {
            channel.sendBytes(Array(line.utf8) + [0x0A])
            #expect(
                channel.readLine(until: .now + .seconds(5)) == .line(Array(answer.utf8)), "\(line.debugDescription)")
        }
    }

    @Test("an owner that speaks none of granary's versions is reported with the versions it speaks")
    func unsupportedVersionNamesVersions() throws {
        let store = try makeStore(in: folder.child("versions"))
        let script = """
            import hashlib, os, socket, sys
            name = "granary-reopen/v1/" + hashlib.sha256(os.fsencode(os.path.realpath(sys.argv[1]))).hexdigest()
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.bind("\\0" + name)
            s.listen(1)
            print("READY", flush=True)
            c, _ = s.accept()
            c.makefile("rb").readline()
            c.sendall(b"ERROR unsupported-version 2 3\\n")
            c.close()
            """
        let (process, pipe) = try python(script, arguments: [store], wait: false)
        defer { process.terminate() }
        _ = pipe.fileHandleForReading.availableData  // READY
        #expect {
            _ = try ReopenClient.connect(store: store, storeOwnerUID: getuid(), timeout: .seconds(5))
        } throws: { error in
            guard case ReopenError.refused(_, let reason) = error else { return false }
            return reason == "unsupported-version (it speaks versions 2, 3 of the reopen protocol, granary 1)"
                && "\(error)".contains("it speaks versions 2, 3")
        }
    }

    @Test("granary finds the owner of a store whose folder's name is not in Unicode's composed form (NFD)")
    func decomposedFolderName() throws {
        // "café" as macOS and some clients write it: e followed by a combining acute accent.
        let parent = folder.child("nfd")
        let store = try makeStore(in: parent + "/cafe\u{301}")
        let owner = GranaryOwner()
        try owner.register(store: store, close: {}, reopen: {})
        defer { owner.stop() }
        let opened = try Folder<UserOwned>.open(path: parent).folder("cafe\u{301}")
        // Before: the folder's path was read back as a string with its bytes escaped, and hashed
        // as that string's UTF-8: another socket name, and no owner found.
        let client = try #require(try Owners.connect(opened, "Local.sqlite", ownerUID: getuid(), timeout: .seconds(5)))
        #expect(client.ownerPID == getpid())
        client.close()
    }
}
