import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What can go wrong between granary and a store's owner.
public enum ReopenError: Error, Sendable, CustomStringConvertible {
    /// The store's path cannot be resolved.
    case storeNotFound(path: String, code: Int32)
    /// The socket could not be created, bound or connected for a reason other than "nobody listens".
    case socket(operation: String, store: String, code: Int32)
    /// Another process already serves this store.
    case alreadyOwned(store: String)
    /// The peer is not who it must be (SO_PEERCRED).
    case untrustedPeer(store: String, pid: Int32, uid: UInt32, expected: UInt32)
    /// The owner refused (an `ERROR` line).
    case refused(store: String, reason: String)
    /// The owner did not answer in time.
    case timedOut(store: String, waitingFor: String, after: Duration)
    /// Whoever holds the store's socket accepted no connection in time (its backlog stayed full).
    case unreachable(store: String, after: Duration)
    /// The owner closed the connection or answered something the protocol does not allow.
    case protocolViolation(store: String, detail: String)

    public var description: String {
        switch self {
        case .storeNotFound(let path, let code): return "cannot resolve \(path): \(String(cString: strerror(code)))"
        case .socket(let operation, let store, let code):
            return "cannot \(operation) the reopen socket of \(store): \(String(cString: strerror(code)))"
        case .alreadyOwned(let store): return "another process already owns \(store) (its reopen socket is taken)"
        case .untrustedPeer(let store, let pid, let uid, let expected):
            return
                "the owner of \(store) (pid \(pid)) runs as uid \(uid), not the store's owner uid \(expected) or root; refusing to talk to it"
        case .refused(let store, let reason): return "the owner of \(store) refused: \(reason)"
        case .timedOut(let store, let what, let after):
            return "the owner of \(store) did not answer \(what) within \(after.milliseconds) ms; nothing was changed"
        case .unreachable(let store, let after):
            return
                "the reopen socket of \(store) accepted no connection within \(after.milliseconds) ms (whoever holds it does not answer)"
        case .protocolViolation(let store, let detail):
            return "the owner of \(store) broke the reopen protocol: \(detail)"
        }
    }
}
