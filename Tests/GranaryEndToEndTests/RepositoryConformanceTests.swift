import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

#if canImport(Glibc)
    import Glibc
#endif

/// Every backend of ``Repository`` keeps the protocol alike: the local folder, `s3:` (on moto,
/// on loopback) and `rclone:` (a remote of type local in a configuration file the test writes).
/// The same test runs on each, through the protocol only, so a new backend is one more case here,
/// not a copy of a suite. Remote cases run where moto and rclone are installed (`make moto`).
@Suite("every repository backend keeps the Repository protocol alike: local, s3 (moto), rclone (a local remote)")
struct RepositoryConformanceTests {
    enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case local, s3, rclone
        var testDescription: String { rawValue }
    }

    /// The backends this machine can run: the local one always, the remote ones with moto and rclone.
    static var backends: [Backend] { S3Server.available ? Backend.allCases : [.local] }

    /// One server for the suite (each test has its own bucket).
    static let server: S3Server? =
        S3Server.available
        ? try? S3Server(log: NSTemporaryDirectory() + "/granary-moto-conformance-\(getpid()).log") : nil

    /// A repository of `backend` no one has prepared yet, in a place of its own.
    struct Place {
        let folder: TemporaryFolder
        let repository: any Repository
        /// Another value of the same repository (another process's view of it).
        let reopen: () throws -> any Repository
        /// A finished local file holding `bytes`, outside the repository (as a backup's upload is).
        func file(_ bytes: [UInt8], _ name: String = UUID().uuidString) throws -> String {
            let path = folder.child("files/" + name)
            try FileSystem.makeDirectory(folder.child("files"))
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            return path
        }
    }

    /// `remembering`: the repository value remembers its listings (``Repository/rememberListings()``).
    static func place(_ backend: Backend, remembering: Bool = false) throws -> Place {
        let place = try unremembered(backend)
        if remembering { place.repository.rememberListings() }
        return place
    }

    static func unremembered(_ backend: Backend) throws -> Place {
        let folder = TemporaryFolder("granary-conformance-\(backend.rawValue)")
        var context = RunContext()
        context.host = "conformance"
        switch backend {
        case .local:
            let open = { try Repositories.open(folder.child("repo"), context: context) }
            return Place(folder: folder, repository: try open(), reopen: open)
        case .s3:
            let server = try #require(server, "moto did not start")
            let bucket = "c" + String(UInt32.random(in: 0...UInt32.max), radix: 16)
            try server.makeBucket(bucket)
            var environment = server.environment()
            environment["AWS_CA_BUNDLE"] = ""
            let open = { try Repositories.open("s3:" + bucket + "/repo", context: context, environment: environment) }
            return Place(folder: folder, repository: try open(), reopen: open)
        case .rclone:
            let config = folder.child("rclone.conf")
            try "[disk]\ntype = local\n".write(toFile: config, atomically: true, encoding: .utf8)
            chmod(config, 0o600)
            try FileSystem.makeDirectory(folder.child("remote"))
            let environment = ["RCLONE_CONFIG": config, "HOME": folder.path]
            let open = {
                try Repositories.open(
                    "rclone:disk:" + folder.child("remote/repo"), context: context, environment: environment)
            }
            return Place(folder: folder, repository: try open(), reopen: open)
        }
    }

    /// Every byte of `source`, read front to back.
    static func bytes(_ source: ArchiveSource) throws -> [UInt8] {
        switch source {
        case .file(let path): return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
        case .stream(let stream):
            var result: [UInt8] = []
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 16, alignment: 16)
            defer { buffer.deallocate() }
            while true {
                let n = stream.read(into: buffer)
                if n <= 0 { break }
                result += buffer[0..<n]
            }
            if let failure = stream.finish() { throw failure }
            return result
        }
    }

    static func payload(_ count: Int, seed: UInt8) -> [UInt8] {
        (0..<count).map { UInt8(truncatingIfNeeded: $0 * 7) &+ seed }
    }

    @Test(
        "a repository exists once initialized, and not before (preparing does not make one); initializing twice is no error",
        arguments: backends)
    func prepare(backend: Backend) throws {
        let place = try Self.place(backend)
        #expect(try !place.repository.exists())
        #expect(throws: RepositoryError.self) { try place.repository.requireExisting() }
        #expect(throws: RepositoryError.self) { try place.repository.prepare() }
        #expect(try !place.repository.exists())
        #expect(try place.repository.initialize())
        #expect(try !place.repository.initialize())
        try place.repository.prepare()
        #expect(try place.repository.exists())
        try place.repository.requireExisting()
        #expect(try place.repository.folders().isEmpty)
    }

    @Test(
        "objects(under:) lists every object beneath a folder at any depth by its path below it; nothing for a folder that is not there; copy streams one into a file",
        arguments: backends)
    func objectsUnder(backend: Backend) throws {
        let place = try Self.place(backend)
        let repository = place.repository
        _ = try repository.initialize()
        try repository.prepare()
        let deep = Self.payload(70_000, seed: 4)
        #expect(try repository.write("alice@example.com/follow/h1/B1/0000000001-a.seg", from: place.file(deep)))
        #expect(try repository.write("alice@example.com/follow/h1/B1/0000000002-b.seg", from: place.file([1, 2, 3])))
        #expect(try repository.write("alice@example.com/follow/h2/B2/0000000001-c.seg", from: place.file([4])))
        #expect(try repository.write("alice@example.com/beside.tar", from: place.file([5])))
        let listed = try repository.objects(under: "alice@example.com/follow")
            .filter { !$0.name.split(separator: "/").contains { $0.hasPrefix(".") } }
        #expect(
            Dictionary(uniqueKeysWithValues: listed.map { ($0.name, $0.size) }) == [
                "h1/B1/0000000001-a.seg": 70_000, "h1/B1/0000000002-b.seg": 3, "h2/B2/0000000001-c.seg": 1,
            ], "\(listed)")
        #expect(try repository.objects(under: "bob@example.com/follow").isEmpty)
        let (fd, path) = try FileSystem.createTemporaryFile(in: place.folder.path, for: "copy")
        defer { close(fd) }
        try repository.copy("alice@example.com/follow/h1/B1/0000000001-a.seg", size: 70_000, into: fd, path: path)
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == deep)
        try repository.deleteSmall("alice@example.com/follow/h1/B1/0000000002-b.seg")
        #expect(
            try repository.objects(under: "alice@example.com/follow").map(\.name).filter { !$0.contains("/.") }.sorted()
                == ["h1/B1/0000000001-a.seg", "h2/B2/0000000001-c.seg"])
    }

    @Test(
        "write publishes an object whole and once: listed with its size, read back whole and by its head; a taken name is refused and keeps its bytes",
        arguments: backends)
    func writeListRead(backend: Backend) throws {
        let place = try Self.place(backend)
        let repository = place.repository
        _ = try repository.initialize()
        try repository.prepare()
        let first = Self.payload(300_000, seed: 1)
        #expect(try repository.write("alice@example.com/one.tar", from: place.file(first)))
        #expect(try !repository.write("alice@example.com/one.tar", from: place.file(Self.payload(10, seed: 2))))
        #expect(try repository.write("bob@example.com/two.tar", from: place.file(Self.payload(5, seed: 3))))
        #expect(try repository.folders() == ["alice@example.com", "bob@example.com"])
        let listed = try repository.objects(in: "alice@example.com").filter { !$0.name.hasPrefix(".") }
        #expect(listed.map(\.name) == ["one.tar"] && listed.first?.size == 300_000, "\(listed)")
        #expect(try Self.bytes(repository.read("alice@example.com/one.tar", size: 300_000, head: nil)) == first)
        let head = try Self.bytes(repository.read("alice@example.com/one.tar", size: 300_000, head: 1000))
        #expect(head.count >= 1000 && Array(head.prefix(1000)) == Array(first.prefix(1000)))
    }

    @Test(
        "settle and publish: the same bytes settle a publish whose answer was lost, other bytes are nameTaken and overwrite nothing",
        arguments: backends)
    func settleAndPublish(backend: Backend) throws {
        let place = try Self.place(backend)
        let repository = place.repository
        _ = try repository.initialize()
        try repository.prepare()
        let bytes = Self.payload(70_000, seed: 4)
        let file = try place.file(bytes)
        #expect(try !repository.settle("alice@example.com/a.tar", from: file))
        try repository.publishObject("alice@example.com/a.tar", from: file)
        #expect(try repository.settle("alice@example.com/a.tar", from: file))
        // The same publish again (a retry after a lost answer) succeeds without a second object.
        try repository.publishObject("alice@example.com/a.tar", from: place.file(bytes))
        let other = try place.file(Self.payload(70_000, seed: 5))
        #expect(try !repository.settle("alice@example.com/a.tar", from: other))
        #expect {
            try repository.publishObject("alice@example.com/a.tar", from: other)
        } throws: { error in
            guard case RepositoryError.nameTaken = error else { return false }
            return true
        }
        #expect(try Self.bytes(repository.read("alice@example.com/a.tar", size: 70_000, head: nil)) == bytes)
        #expect(try repository.objects(in: "alice@example.com").filter { !$0.name.hasPrefix(".") }.count == 1)
    }

    @Test(
        "rename gives an object a free name in its folder, never over another: false and nothing changed when taken",
        arguments: backends)
    func rename(backend: Backend) throws {
        let place = try Self.place(backend)
        let repository = place.repository
        _ = try repository.initialize()
        try repository.prepare()
        let a = Self.payload(1000, seed: 6), b = Self.payload(2000, seed: 7)
        #expect(try repository.write("alice@example.com/a.tar", from: place.file(a)))
        #expect(try repository.write("alice@example.com/b.tar", from: place.file(b)))
        #expect(try !repository.rename("alice@example.com/a.tar", to: "alice@example.com/b.tar"))
        #expect(try Self.bytes(repository.read("alice@example.com/b.tar", size: 2000, head: nil)) == b)
        #expect(try Self.bytes(repository.read("alice@example.com/a.tar", size: 1000, head: nil)) == a)
        #expect(try repository.rename("alice@example.com/a.tar", to: "alice@example.com/c.tar"))
        let names = try repository.objects(in: "alice@example.com").map(\.name).filter { !$0.hasPrefix(".") }.sorted()
        #expect(names == ["b.tar", "c.tar"])
        #expect(try Self.bytes(repository.read("alice@example.com/c.tar", size: 1000, head: nil)) == a)
    }

    @Test(
        "sidecars and small objects: written, replaced, read back and listed by folder; delete takes an object with its sidecar; a missing one is no error",
        arguments: backends)
    func sidecarsSmallDelete(backend: Backend) throws {
        try Self.sidecarsSmallDelete(try Self.place(backend))
    }

    @Test(
        "with its listings remembered (backup, check, prune…), a repository value sees its own writes, replacements and deletes at once: the sidecars and small objects case again",
        arguments: backends)
    func rememberedSeesItsOwn(backend: Backend) throws {
        try Self.sidecarsSmallDelete(try Self.place(backend, remembering: true))
    }

    @Test(
        "a remembered listing or folder's records is given again for a moment, never after the value's own write or delete; another value's change shows once the moment is over; a value that does not remember asks each time",
        arguments: backends.filter { $0 != .local })
    func rememberedListings(backend: Backend) throws {
        let place = try Self.place(backend, remembering: true)
        let repository = place.repository
        _ = try repository.initialize()
        let other = try place.reopen()
        let folder = "alice@example.com"
        func names(_ repository: any Repository) throws -> [String] {
            try repository.objects(in: folder).map(\.name).filter { !$0.hasPrefix(".") }.sorted()
        }
        func record(_ archive: String, _ text: String) -> [UInt8] {
            Array(#"{"archive":"\#(archive)","text":"\#(text)"}"#.utf8)
        }
        #expect(try repository.write(folder + "/a.tar", from: place.file(Self.payload(10, seed: 1))))
        try repository.writeSidecar(record("a.tar", "first"), of: folder + "/a.tar")
        // (Taken before the answers are: each is remembered from its own start, no earlier. A
        // user lock taken anywhere in this process meanwhile, by another test running beside
        // this one, forgets every answer too: UserLock.acquisitions.)
        let remembered = ContinuousClock.now
        let locks = UserLock.acquisitions
        #expect(try names(repository) == ["a.tar"], "its own write, seen at once")
        #expect(repository.readSidecars(in: folder) == ["a.tar": record("a.tar", "first")])
        // Another process writes: within the moment, the remembered answers.
        #expect(try other.write(folder + "/b.tar", from: place.file(Self.payload(10, seed: 2))))
        try other.writeSidecar(record("a.tar", "second"), of: folder + "/a.tar")
        #expect(try names(other) == ["a.tar", "b.tar"], "a value that does not remember asks each time")
        let listed = try names(repository)
        let records = repository.readSidecars(in: folder)
        if ContinuousClock.now - remembered < ListingMemo.lifetime && UserLock.acquisitions == locks {
            #expect(listed == ["a.tar"], "remembered for a moment")
            #expect(records == ["a.tar": record("a.tar", "first")], "remembered for a moment")
        }
        // After the moment, asked again.
        Thread.sleep(forTimeInterval: ListingMemo.lifetime.timeInterval + 0.1)
        #expect(try names(repository) == ["a.tar", "b.tar"])
        #expect(repository.readSidecars(in: folder) == ["a.tar": record("a.tar", "second")])
        // Its own delete (and write) forget every answer at once.
        try repository.delete(folder + "/b.tar")
        #expect(try names(repository) == ["a.tar"])
        #expect(try repository.write(folder + "/c.tar", from: place.file(Self.payload(10, seed: 3))))
        #expect(try names(repository) == ["a.tar", "c.tar"])
        try repository.writeSidecar(record("c.tar", "third"), of: folder + "/c.tar")
        #expect(
            repository.readSidecars(in: folder) == [
                "a.tar": record("a.tar", "second"), "c.tar": record("c.tar", "third"),
            ])

        // A user lock taken since an answer: whoever held the lock before may have written (a
        // backup's delta, which a prune after the lock must see), so the answer is asked again.
        let root = Root(path: place.folder.child("root"))
        try FileSystem.makeDirectory(root.path, mode: 0o755)
        let beforeLock = ContinuousClock.now
        let locksBefore = UserLock.acquisitions
        #expect(try names(repository) == ["a.tar", "c.tar"])
        #expect(try other.write(folder + "/d.tar", from: place.file(Self.payload(10, seed: 4))))
        if ContinuousClock.now - beforeLock < ListingMemo.lifetime && UserLock.acquisitions == locksBefore {
            #expect(try names(repository) == ["a.tar", "c.tar"], "remembered, no lock taken")
        }
        try UserLock.acquire(root: root, user: UserID("alice@example.com"), timeout: .zero).release()
        #expect(try names(repository) == ["a.tar", "c.tar", "d.tar"], "asked again after a user lock")
    }

    static func sidecarsSmallDelete(_ place: Place) throws {
        let repository = place.repository
        _ = try repository.initialize()
        try repository.prepare()
        #expect(try repository.write("alice@example.com/a.tar", from: place.file(Self.payload(100, seed: 8))))
        #expect(try repository.write("alice@example.com/b.tar", from: place.file(Self.payload(100, seed: 9))))
        // A sidecar is a verification record: a JSON object that names its archive.
        func record(_ archive: String, _ text: String) -> [UInt8] {
            Array(#"{"archive":"\#(archive)","text":"\#(text)"}"#.utf8)
        }
        #expect(repository.readSidecar(of: "alice@example.com/a.tar") == nil)
        try repository.writeSidecar(record("a.tar", "first"), of: "alice@example.com/a.tar")
        try repository.writeSidecar(record("a.tar", "second"), of: "alice@example.com/a.tar")
        try repository.writeSidecar(record("b.tar", "other"), of: "alice@example.com/b.tar")
        #expect(repository.readSidecar(of: "alice@example.com/a.tar") == record("a.tar", "second"))
        #expect(
            repository.readSidecars(in: "alice@example.com") == [
                "a.tar": record("a.tar", "second"), "b.tar": record("b.tar", "other"),
            ])

        #expect(try repository.readSmall("alice@example.com/.a.tar.host=x") == nil)
        try repository.writeSmall(Array("one".utf8), to: "alice@example.com/.a.tar.host=x")
        try repository.writeSmall(Array("two".utf8), to: "alice@example.com/.a.tar.host=x")
        #expect(try repository.readSmall("alice@example.com/.a.tar.host=x") == Array("two".utf8))
        try repository.deleteSmall("alice@example.com/.a.tar.host=x")
        try repository.deleteSmall("alice@example.com/.a.tar.host=x")
        #expect(try repository.readSmall("alice@example.com/.a.tar.host=x") == nil)

        try repository.delete("alice@example.com/a.tar")
        try repository.delete("alice@example.com/a.tar")
        #expect(repository.readSidecar(of: "alice@example.com/a.tar") == nil)
        let left = try repository.objects(in: "alice@example.com").map(\.name).sorted()
        #expect(!left.contains("a.tar") && left.contains("b.tar") && !left.contains { $0.contains("a.tar") }, "\(left)")
        #expect(repository.readSidecars(in: "alice@example.com") == ["b.tar": record("b.tar", "other")])
    }

    @Test("the registry picks each backend by its scheme, and nothing else", arguments: backends)
    func registry(backend: Backend) throws {
        let place = try Self.place(backend)
        let location = place.repository.location
        #expect(Repositories.isRemote(location) == (backend != .local))
        #expect(RepositoryBackends.backend(of: location)?.scheme == (backend == .local ? nil : backend.rawValue + ":"))
        #expect(place.repository.isLocal == (backend == .local))
    }
}
