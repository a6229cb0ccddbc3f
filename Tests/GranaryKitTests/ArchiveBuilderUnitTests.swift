import Foundation
import GranaryKit
import GranaryTestSupport
import Testing

@Suite("archive builder parts: journal locations, entries' local files, free space")
struct ArchiveBuilderUnitTests {
    static func plan(_ repository: String) throws -> SwapJournal.Plan {
        let line =
            #"{"format":2,"label":"pre-restore","operation":"restore","repository":"# + repository
            + #","stores":[],"user":"bob@example.com"}"#
        return try JSONDecoder().decode(SwapJournal.Plan.self, from: Data(line.utf8))
    }

    @Test(
        "a journal written before holds the repository as a string: read as a local path or a remote location, and the check as quick"
    )
    func oldJournals() throws {
        #expect(try Self.plan(#""/srv/granary""#).repository == .local("/srv/granary"))
        #expect(try Self.plan(#""s3:bucket/prefix""#).repository == .remote("s3:bucket/prefix"))
        #expect(try Self.plan(#""s3:bucket/prefix""#).check == nil)
    }

    @Test("a journal records the repository typed, and reads it back")
    func typedLocations() throws {
        for location in [RepositoryLocation.local("/srv/granary"), .remote("rclone:remote:path")] {
            var plan = try Self.plan(#""/x""#)
            plan.repository = location
            plan.check = .full
            let bytes = try JSONEncoder().encode(plan)
            let text = String(decoding: bytes, as: UTF8.self)
            #expect(text.contains(#""local""#) || text.contains(#""remote""#), "\(text)")
            let back = try JSONDecoder().decode(SwapJournal.Plan.self, from: bytes)
            #expect(back.repository == location && back.check == .full)
        }
    }

    @Test("a local repository given by a relative path is recorded by its absolute real path")
    func absoluteLocal() throws {
        let folder = TemporaryFolder("granary-location")
        let previous = FileManager.default.currentDirectoryPath
        defer { FileManager.default.changeCurrentDirectoryPath(previous) }
        FileManager.default.changeCurrentDirectoryPath(folder.path)
        let location = RepositoryLocation(LocalRepository(path: "repo"))
        #expect(location == .local(LocalRepository.resolvedPath(folder.path) + "/repo"), "\(location)")
    }

    @Test("free space is the filesystem's, and never negative")
    func freeSpace() throws {
        let space = try #require(FreeSpace.of("/"))
        #expect(space.bytes >= 0)
        #expect(FreeSpace.of("/no/such/folder/granary") == nil)
    }

    @Test("an archive published into a local repository has a local file, and its display is its path")
    func localFile() throws {
        let folder = TemporaryFolder("granary-entry")
        let repository = LocalRepository(path: initializedRepository(folder.path + "/repo"))
        try repository.prepare()
        let user = try UserID("bob@example.com")
        let staging = try repository.stagingFolder(for: user)
        let file = staging + "/.pending"
        try Data("not really an archive".utf8).write(to: URL(fileURLWithPath: file))
        var moved = false
        let name = ArchiveName(
            created: Date(timeIntervalSince1970: 1_700_000_000), label: nil, host: "web-1", compression: .zstd)
        let entry = try repository.publish(file, user: user, name: name, moved: { moved = true })
        #expect(moved, "a rename in the user's folder consumes the file")
        #expect(entry.localFile == entry.path && FileSystem.isRegularFile(entry.localFile ?? ""))
        let listed = try #require(try repository.archives(of: user, host: nil).first)
        #expect(listed.localFile == entry.localFile)
    }
}
