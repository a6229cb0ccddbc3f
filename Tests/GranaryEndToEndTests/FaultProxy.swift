import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A TCP proxy on a loopback port between rclone and the S3 server, that breaks things on
/// request: it cuts connections once a number of bytes went up (an upload) or down (a download),
/// holds every answer back for a while, answers every request with an HTTP error, or calls back
/// (to kill the server) in the middle of an upload, stalls requests (accepted, nothing passed on,
/// until the mode changes), or slows every connection to a rate. Only 127.0.0.1 on both sides; it stops with
/// the value.
final class FaultProxy: @unchecked Sendable {
    enum Mode: Sendable {
        /// Bytes pass untouched.
        case pass
        /// A connection is cut once it has carried this many bytes towards the server.
        case cutUpload(after: Int)
        /// A connection is cut once it has carried this many bytes towards the client.
        case cutDownload(after: Int)
        /// Every chunk from the server is held back this long.
        case delay(milliseconds: Int)
        /// Every request gets this HTTP status (500, 503) and the connection is closed.
        case status(Int)
        /// Once a connection has carried this many bytes towards the server, `action` runs (once).
        case callback(after: Int, action: @Sendable () -> Void)
        /// The server's answer to a PUT (the object stored) is dropped and the connection cut, for
        /// the first `count` PUTs (`Int.max`: every one): an upload whose answer is lost.
        case dropPutAnswers(count: Int)
        /// A request whose head holds `matching` (every request: nil) is held, nothing passed on
        /// either way, for as long as this is the mode; then it goes on.
        case stall(matching: String?)
        /// Every connection carries at most this many bytes a second each way.
        case slow(bytesPerSecond: Int)
        /// The first PUT whose head holds `matching` is held (nothing passed on either way) for as
        /// long as this is the mode; every other request passes: one upload stuck while the
        /// next ones land.
        case holdFirstPut(matching: String)
    }

    /// Requests held by ``Mode/stall(matching:)`` so far.
    var stalledRequests: Int { lock.withLock { _stalled } }
    private var _stalled = 0

    let port: Int
    private let upstream: Int
    private let listener: Int32
    private let lock = NSLock()
    private var _mode: Mode = .pass
    private var stopped = false
    private var fired = false
    private var putAnswersDropped = 0

    /// PUT answers dropped so far (``Mode/dropPutAnswers(count:)``).
    var droppedPutAnswers: Int { lock.withLock { putAnswersDropped } }

    var mode: Mode {
        get { lock.withLock { _mode } }
        set {
            lock.withLock {
                _mode = newValue; fired = false
            }
        }
    }

    /// Connections that ended (each rclone run's, once it exited).
    var finished: Int { lock.withLock { _finished } }
    private var _finished = 0

    init(upstream: Int) throws {
        self.upstream = upstream
        port = try S3Server.freePort()
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var yes: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
        var address = Self.loopback(port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(listener, 64) == 0 else { throw S3ServerError.noPort }
        Thread.detachNewThread { [self] in acceptLoop() }
    }

    deinit { stop() }

    /// Stops accepting. Once only: a test's `defer` and the deinit both call it, and a second
    /// `close` of the listener's number closes whatever the process opened under it since (a
    /// pipe or socket of Foundation's `Process`: the next child's run failed with EBADF, or its
    /// exit was never noticed and the test hung).
    func stop() {
        let first = lock.withLock { () -> Bool in
            defer { stopped = true }
            return !stopped
        }
        guard first else { return }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    static func loopback(_ port: Int) -> sockaddr_in {
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return address
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            if client < 0 {
                if lock.withLock({ stopped }) { return }
                if errno == EINTR { continue }
                return
            }
            Thread.detachNewThread { [self] in serve(client) }
        }
    }

    private func serve(_ client: Int32) {
        let mode = self.mode
        if case .status(let code) = mode {
            answer(client, status: code)
            return
        }
        let server = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = Self.loopback(upstream)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(server, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else {
            close(server)
            close(client)
            return
        }
        let done = DispatchGroup()
        done.enter()
        let method = RequestMethod()
        Thread.detachNewThread { [self] in
            pump(from: client, to: server, upward: true, method: method)
            done.leave()
        }
        pump(from: server, to: client, upward: false, method: method)
        done.wait()
        close(server)
        close(client)
        lock.withLock { _finished += 1 }
    }

    /// Reads the request head, answers `status`, closes.
    private func answer(_ client: Int32, status: Int) {
        var head: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !head.suffix(4).elementsEqual([13, 10, 13, 10]) && head.count < 64 * 1024 {
            let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, 1, 0) }
            if n <= 0 { break }
            head.append(buffer[0])
        }
        let reason = status == 503 ? "Service Unavailable" : status == 500 ? "Internal Server Error" : "Error"
        let body =
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>\(status == 503 ? "SlowDown" : "InternalError")</Code><Message>\(reason)</Message></Error>"
        let response =
            "HTTP/1.1 \(status) \(reason)\r\nContent-Type: application/xml\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
        _ = response.withCString { send(client, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
        shutdown(client, Int32(SHUT_RDWR))
        close(client)
    }

    /// The method of the request a connection carries now (a connection is reused for several).
    final class RequestMethod: @unchecked Sendable {
        private let lock = NSLock()
        private var _isPut = false
        var isPut: Bool {
            get { lock.withLock { _isPut } }
            set { lock.withLock { _isPut = newValue } }
        }
    }

    private func pump(from source: Int32, to target: Int32, upward: Bool, method: RequestMethod) {
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var carried = 0
        while true {
            var chunk = buffer.count
            if case .slow(let rate) = mode { chunk = max(1, min(chunk, rate / 10)) }
            let n = buffer.withUnsafeMutableBytes { recv(source, $0.baseAddress, chunk, 0) }
            if n <= 0 { break }
            carried += n
            if upward {
                // A request head starts with its method (the bodies of PUTs rarely do).
                for verb in ["PUT ", "GET ", "HEAD ", "POST ", "DELETE "] where buffer.starts(with: Array(verb.utf8)) {
                    method.isPut = verb == "PUT "
                }
            }
            if case .dropPutAnswers(let count) = mode, !upward, method.isPut {
                let drop = lock.withLock { () -> Bool in
                    guard putAnswersDropped < count else { return false }
                    putAnswersDropped += 1
                    return true
                }
                if drop {
                    shutdown(source, Int32(SHUT_RDWR))
                    shutdown(target, Int32(SHUT_RDWR))
                    return
                }
            }
            if upward, case .stall(let matching) = mode,
                matching.map({ String(decoding: buffer[0..<n], as: UTF8.self).contains($0) }) ?? true
            {
                lock.withLock { _stalled += 1 }
                while case .stall = mode, !lock.withLock({ stopped }) { usleep(20_000) }
            }
            if upward, case .holdFirstPut(let matching) = mode, buffer.starts(with: Array("PUT ".utf8)),
                String(decoding: buffer[0..<n], as: UTF8.self).contains(matching),
                lock.withLock({ () -> Bool in
                    defer { fired = true }
                    return !fired
                })
            {
                lock.withLock { _stalled += 1 }
                while case .holdFirstPut = mode, !lock.withLock({ stopped }) { usleep(20_000) }
            }
            switch mode {
            case .slow(let rate):
                usleep(UInt32(min(Double(n) / Double(max(rate, 1)), 10) * 1_000_000))
            case .cutUpload(let after) where upward && carried > after,
                .cutDownload(let after) where !upward && carried > after:
                // Part of the chunk goes through, then the connection is gone.
                let part = max(0, n - (carried - after))
                _ = buffer.withUnsafeBytes { send(target, $0.baseAddress, part, Int32(MSG_NOSIGNAL)) }
                shutdown(source, Int32(SHUT_RDWR))
                shutdown(target, Int32(SHUT_RDWR))
                return
            case .delay(let ms) where !upward:
                usleep(UInt32(ms) * 1000)
            case .callback(let after, let action) where upward && carried > after:
                let first = lock.withLock { () -> Bool in
                    defer { fired = true }
                    return !fired
                }
                if first { action() }
            default: break
            }
            var sent = 0
            while sent < n {
                let m = buffer.withUnsafeBytes { send(target, $0.baseAddress! + sent, n - sent, Int32(MSG_NOSIGNAL)) }
                if m <= 0 { break }
                sent += m
            }
            if sent < n { break }
        }
        shutdown(target, Int32(SHUT_WR))
        shutdown(source, Int32(SHUT_RD))
    }
}
