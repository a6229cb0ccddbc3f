import Foundation
import Testing

@testable import GranaryKit

@Suite("completion candidates")
struct CompletionCandidatesTests {
    @Test("a user's archives are offered newest first; other files, other users' archives and bad ids are not")
    func archives() throws {
        let folder = TemporaryFolder()
        let repo = folder.path + "/repo"
        let names = ["20261122T101500Z.tar.zst", "20261121T090000Z-nightly.tar.zst", "20261122T101500Z_2.tar.gz"]
        try FileManager.default.createDirectory(atPath: repo + "/alice@example.com", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: repo + "/bob@example.com", withIntermediateDirectories: true)
        for name in names {
            FileManager.default.createFile(atPath: repo + "/alice@example.com/" + name, contents: Data())
        }
        FileManager.default.createFile(atPath: repo + "/alice@example.com/notes.txt", contents: Data())
        FileManager.default.createFile(
            atPath: repo + "/alice@example.com/.20261122T111500Z.tar.zst.tmp-1-abc", contents: Data())
        FileManager.default.createFile(atPath: repo + "/bob@example.com/20261120T000000Z.tar.zst", contents: Data())

        let offered = CompletionCandidates.archives(repository: repo, user: "alice@example.com")
        #expect(offered == names.sorted(by: >))
        #expect(
            CompletionCandidates.archives(repository: repo, user: "alice@example.com", prefix: "20261121") == [names[1]]
        )
        #expect(CompletionCandidates.archives(repository: repo, user: "..").isEmpty)
        #expect(CompletionCandidates.archives(repository: repo, user: "nobody@example.com").isEmpty)
    }

    @Test("users are the valid, visible sub-folders of the root")
    func users() throws {
        let folder = TemporaryFolder()
        for name in ["alice@example.com", "bob@example.com", ".granary", "-bad"] {
            try FileManager.default.createDirectory(atPath: folder.path + "/" + name, withIntermediateDirectories: true)
        }
        FileManager.default.createFile(atPath: folder.path + "/file.txt", contents: Data())
        #expect(CompletionCandidates.users(root: folder.path) == ["alice@example.com", "bob@example.com"])
        #expect(CompletionCandidates.users(root: folder.path, prefix: "b") == ["bob@example.com"])
        #expect(CompletionCandidates.users(root: folder.path + "/missing").isEmpty)
    }
}
