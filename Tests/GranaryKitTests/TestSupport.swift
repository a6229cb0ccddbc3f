import Foundation
import GranaryKit

/// A private folder for one test, removed when the value goes away.
final class TemporaryFolder {
    let path: String

    init(_ name: String = "granary-test") {
        var template = Array((NSTemporaryDirectory() + "/\(name).XXXXXX").utf8CString)
        let created = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(created != nil, "mkdtemp failed")
        path = String(cString: template)
    }

    deinit { FileSystem.removeTree(path) }

    func child(_ name: String) -> String { path + "/" + name }
}
