import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An object downloaded by `rclone cat`, read front to back from a pipe: nothing of it is kept
/// but the buffer being read, so verify and restore stream a remote archive through the verifier
/// into their folder with no second local copy.
///
/// When reading ends (whatever the reader made of the bytes), ``finish()`` says whether the
/// transfer itself failed: rclone's exit status, or fewer bytes than the listing promised (a
/// connection cut, an object that vanished). The caller reports that failure, not what the
/// verifier made of a truncated stream: a cut download is a 74/75, never a damaged archive.
///
/// A download that stops early on a temporary failure (a cut connection, a timeout, a 5xx) is
/// resumed where it stopped (`rclone cat --offset`), after a growing pause, as often as the
/// remote limits allow (``RemoteLimits``): the reader sees one unbroken stream.
public final class RepositoryStream: ArchiveByteStream, @unchecked Sendable {
    private var process: RcloneProcess
    /// Starts the download again from an offset (nil: it cannot be resumed).
    private let resume: (@Sendable (Int64) throws(RepositoryError) -> RcloneProcess)?
    /// Further tries left for a resumed download.
    private var triesLeft: Int
    /// Downloads resumed so far.
    public private(set) var resumed = 0
    private let location: String
    /// The bytes the stream must deliver.
    public let expected: Int64
    /// The bytes delivered so far.
    public private(set) var delivered: Int64 = 0
    private var readFailed: Int32?
    private var stopped = false
    private var outcome: RepositoryError??

    init(
        process: RcloneProcess, location: String, expected: Int64, tries: Int = 1,
        resume: (@Sendable (Int64) throws(RepositoryError) -> RcloneProcess)? = nil
    ) {
        self.process = process
        self.location = location
        self.expected = expected
        self.resume = resume
        triesLeft = max(0, tries - 1)
    }

    func read(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        while true {
            let n = Glibc.read(process.output, buffer.baseAddress, buffer.count)
            if n < 0 && errno == EINTR { continue }
            if n < 0 {
                readFailed = errno
                return -1
            }
            if n == 0 && delivered < expected && !stopped && outcome == nil && resumeAfterFailure() { continue }
            delivered += Int64(n)
            return n
        }
    }

    /// The download ended short: when its failure is temporary and tries are left, starts it again
    /// where it stopped (true); else false, the failure left for ``finish()``.
    private func resumeAfterFailure() -> Bool {
        guard let resume, triesLeft > 0 else { return false }
        let status = process.wait()
        if status != 0 {
            let failure = RcloneRepository.failure(
                status: status, diagnostics: process.diagnostics(), location: location)
            guard case .transport(_, _, true) = failure else {
                outcome = .some(failure)
                return false
            }
        } else if delivered == 0 {
            return false
        }
        triesLeft -= 1
        resumed += 1
        let pause = RemoteLimits.backoff(try: resumed)
        usleep(UInt32(min(pause.timeInterval, 60) * 1_000_000))
        do {
            let next = try resume(delivered)
            process.terminate()
            process = next
            return true
        } catch {
            outcome = .some(error)
            return false
        }
    }

    /// The reader has what it needed (a manifest at the head): rclone is stopped, and its
    /// outcome does not matter.
    public func stop() {
        stopped = true
        process.terminate()
    }

    /// Reads what is left, waits for rclone, and returns the transfer's failure, if any.
    public func finish() -> RepositoryError? {
        if stopped { return nil }
        if let outcome { return outcome }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        defer { buffer.deallocate() }
        while read(into: buffer) > 0 {}
        let status = process.wait()
        var failure: RepositoryError?
        if status != 0 {
            failure = RcloneRepository.failure(status: status, diagnostics: process.diagnostics(), location: location)
        } else if let code = readFailed {
            failure = .transport(
                location: location, detail: "reading the download failed: \(String(cString: strerror(code)))",
                temporary: false)
        } else if delivered < expected {
            failure =
                delivered == 0
                ? .missing(location: location, detail: "the object is no longer there")
                : .transport(
                    location: location, detail: "the download ended after \(delivered) of \(expected) bytes",
                    temporary: true)
        }
        outcome = .some(failure)
        return failure
    }
}
