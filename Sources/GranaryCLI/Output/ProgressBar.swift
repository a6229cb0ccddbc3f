import Foundation
import GranaryKit

/// A one-line progress bar on standard error: bytes, rate, ETA.
final class ProgressBar: BackupProgress, @unchecked Sendable {
    private let console: Console
    private let lock = NSLock()
    /// The phase being drawn and when it began: its rate and ETA are its own.
    private var drawing = ""
    private var started = Date()
    private var lastDraw = Date.distantPast

    init(_ console: Console) { self.console = console }

    func update(user: String, phase: String, done: Int64, total: Int64) {
        lock.lock()
        defer { lock.unlock() }
        let now = Date()
        if drawing != user + "\u{0}" + phase {
            drawing = user + "\u{0}" + phase
            started = now
        }
        guard now.timeIntervalSince(lastDraw) > 0.2 || done == total else { return }
        lastDraw = now
        let elapsed = max(now.timeIntervalSince(started), 0.001)
        let rate = Double(done) / elapsed
        let eta = rate > 0 ? Double(total - done) / rate : 0
        let percent = total > 0 ? Int(Double(done) * 100 / Double(total)) : 100
        let width = 20
        let filled = max(0, min(width, percent * width / 100))
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        let line: TextLine =
            "\(user) \(phase) [\(bar)] \(Format.bytes(done))/\(Format.bytes(total)) \(Format.bytes(Int64(rate)))/s ETA \(Int(min(eta, 1e9)))s"
        console.draw("\r" + line.rendered(color: false) + "\u{1B}[K")
    }

    func clear() {
        console.draw("\r\u{1B}[K")
    }
}
