import Foundation
import GranaryKit

// Sources/GranaryKit/Repository/Hosts.swift
extension InvalidHost: CommandLineError {
    var status: ExitStatus { .usage }
    var hint: String? { "pass --host NAME (or set host = \"NAME\") with a name such as web-1" }
}

// Sources/GranaryKit/Backup/BackupRun.swift
extension MirrorSkipped: CommandLineError {
    var status: ExitStatus { isTemporary ? .temporaryFailure : .ioError }
    var hint: String? { "granary sync sends it once the mirror answers" }
}

// Sources/GranaryKit/Repository/MirrorSync.swift
extension MirrorAbandoned: CommandLineError {
    var status: ExitStatus { isTemporary ? .temporaryFailure : .ioError }
    var hint: String? { "granary sync syncs them once the mirror answers" }
}

// Sources/GranaryKit/Isolation/UserWorkers.swift
extension MirrorFailedEarlier: CommandLineError {
    var status: ExitStatus { isTemporary ? .temporaryFailure : .ioError }
    var hint: String? { "granary sync sends it once the mirror answers" }
}

// Sources/GranaryKit/Delta/PageFiles.swift
extension DeltaError: CommandLineError {
    var status: ExitStatus { .dataError }
    var hint: String? { "granary verify --chain names the damaged archive; granary backup --full starts a new chain" }
}

// Sources/GranaryKit/Delta/DeltaChains.swift
extension NewestUnrestorable: CommandLineError {
    /// The user's newest state cannot be restored from either place: a fault of the data.
    var status: ExitStatus { .dataError }
    var hint: String? {
        "granary backup \(ShellWord.quote(user.rawValue)) writes a new full (a chain that is not whole gets one), then granary sync sends it"
    }
}

extension ChainGap: CommandLineError {
    /// A broken chain is a data error: the delta could not be restored where it would go.
    var status: ExitStatus { .dataError }
    var hint: String? {
        "granary verify --chain \(ShellWord.quote(user.rawValue + "/" + archive)) names the broken link; granary backup --full \(ShellWord.quote(user.rawValue)) starts a new chain"
    }
}
