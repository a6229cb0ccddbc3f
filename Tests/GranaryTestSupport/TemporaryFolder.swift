import Foundation
import GranaryKit

/// A private folder for one test, removed when the value goes away.
public final class TemporaryFolder {
    public let path: String

    public init(_ name: String = "granary-test") {
        var template = Array((NSTemporaryDirectory() + "/\(name).XXXXXX").utf8CString)
        let created = template.withUnsafeMutableBufferPointer { mkdtemp($0.baseAddress!) }
        precondition(created != nil, "mkdtemp failed")
        path = String(cString: template)
    }

    deinit { FileSystem.removeTree(path) }

    public func child(_ name: String) -> String { path + "/" + name }
}
