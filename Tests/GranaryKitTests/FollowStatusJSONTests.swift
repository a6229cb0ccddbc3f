import Foundation
import GranaryKit
import Testing

/// `follow`'s state file, written by hand (``FollowStatus/json()``): the very bytes Foundation's
/// `JSONEncoder` (`.sortedKeys`) writes, and what `JSONDecoder` reads back, for users and texts
/// of every kind (every control character, quotes, backslashes, slashes, non-ASCII, fields nil
/// or set, negative and large numbers).
@Suite("follow: the state file's JSON")
struct FollowStatusJSONTests {
    func encoded(_ status: FollowStatus) throws -> [UInt8] {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return [UInt8](try encoder.encode(status))
    }

    func status(users: Int, texts: [String]) -> FollowStatus {
        var status = FollowStatus(host: "host/" + (texts.first ?? ""))
        status.updated = 1_764_500_000_123_456
        for index in 0..<users {
            var user = FollowStatus.User()
            let text = texts.isEmpty ? "" : texts[index % texts.count]
            if index % 3 != 0 { user.generation = "20261130T220324.689026Z.vm.tar.zst" + text }
            user.sequence = index * 7919
            if index % 2 == 0 { user.shippedThrough = Int64.max - Int64(index) }
            if index % 5 != 1 { user.steadySince = -Int64(index) }
            if index % 4 == 1 { user.lastShipped = Int64(index) << 40 }
            if index % 6 == 2 { user.paused = "following paused: /home/u\(index)/a.db: " + text }
            status.users["u\(index)" + (index % 7 == 3 ? text : "")] = user
        }
        return status
    }

    @Test("the bytes JSONEncoder writes, and JSONDecoder reads them back as they were")
    func sameBytes() throws {
        let controls = String(decoding: (0..<0x20).map { UInt8($0) } + [0x7F], as: UTF8.self)
        let texts = [
            "", "plain", #"a "quoted" \ back\slash"#, "slash/es//", controls, "é ü ß", "雪", "😀 emoji",
            "tab\tnew\nline\r\u{0C}\u{08}", "\u{2028}\u{2029}", "key with spaces",
        ]
        for users in [0, 1, 2, 13, 200] {
            let status = status(users: users, texts: texts)
            let mine = status.json()
            #expect(
                mine == (try encoded(status)), "\(users) users: \(String(decoding: mine.prefix(400), as: UTF8.self))")
            #expect(try JSONDecoder().decode(FollowStatus.self, from: Data(mine)) == status)
        }
        for text in texts {
            var status = FollowStatus(host: text)
            status.users[text] = FollowStatus.User()
            status.users[text + "x"] = FollowStatus.User()
            #expect(status.json() == (try encoded(status)), "\(Array(text.utf8))")
        }
    }

    @Test("written to a local repository, the file reads back as the state")
    func writtenAndRead() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("granary-status-\(getpid())").path
        try? FileManager.default.removeItem(atPath: folder)
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: folder) }
        var status = status(users: 50, texts: ["x", #"q"/\"#])
        status.host = "vm"
        try status.write(repository: folder)
        #expect(FollowStatus.read(repository: folder, host: status.host) == status)
    }
}
