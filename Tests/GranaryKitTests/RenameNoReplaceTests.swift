import Foundation
import GranaryTestSupport
import Testing

@testable import GranaryKit

/// `FileSystem.renameNoReplace`, which publishes segments and archives in a local repository:
/// the file moves under its new name, and a name already there is never replaced.
@Suite("FileSystem.renameNoReplace")
struct RenameNoReplaceTests {
    @Test("moves a file to a free name: the old name is gone, the bytes and the inode are the same")
    func moves() throws {
        let folder = TemporaryFolder()
        let from = folder.child("segment.tmp")
        let to = folder.child("0000000001.seg")
        try Data("frames".utf8).write(to: URL(fileURLWithPath: from))
        let inode = try #require(FileSystem.status(from)).st_ino
        try FileSystem.renameNoReplace(from, to: to)
        #expect(FileSystem.status(from) == nil)
        #expect(try #require(FileSystem.status(to)).st_ino == inode)
        #expect(try Data(contentsOf: URL(fileURLWithPath: to)) == Data("frames".utf8))
    }

    @Test("refuses a name that is taken (a file, a link, a folder): both are left as they were")
    func refusesTaken() throws {
        let folder = TemporaryFolder()
        let from = folder.child("segment.tmp")
        try Data("new".utf8).write(to: URL(fileURLWithPath: from))
        let file = folder.child("file.seg")
        try Data("old".utf8).write(to: URL(fileURLWithPath: file))
        let link = folder.child("link.seg")
        #expect(symlink(folder.child("nowhere"), link) == 0)
        let taken = folder.child("folder.seg")
        #expect(mkdir(taken, 0o700) == 0)
        for target in [file, link, taken] {
            #expect(throws: FileSystemError.self) { try FileSystem.renameNoReplace(from, to: target) }
            #expect(try Data(contentsOf: URL(fileURLWithPath: from)) == Data("new".utf8))
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: file)) == Data("old".utf8))
        #expect(try #require(FileSystem.status(link)).st_mode & S_IFMT == S_IFLNK)
        #expect(try #require(FileSystem.status(taken)).st_mode & S_IFMT == S_IFDIR)
        let error = try #require(throws: FileSystemError.self) { try FileSystem.renameNoReplace(from, to: file) }
        #expect(error.code == EEXIST)
    }
}
