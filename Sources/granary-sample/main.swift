import Foundation
import GranaryKit

// granary-sample DIR [ROWS]: writes the built-in sample root into DIR (for `make demo` and the tests).
// granary-sample write STORE [--interval-ms N]: commits rows with sequential ids until killed,
//   printing "ID<TAB>MICROSECONDS" (the commit's latency) for each acknowledged commit.
// granary-sample big PATH SIZE_MB: a WAL store of about SIZE_MB MiB (for `make bench`).
Interruption.unblockSignals()
let arguments = CommandLine.arguments.dropFirst()
if arguments.first == "write" { SampleWriter.main(Array(arguments.dropFirst())) }
if arguments.first == "big" { SampleWriter.big(Array(arguments.dropFirst())) }
guard let target = arguments.first else {
    FileHandle.standardError.write(Data("usage: granary-sample DIR [ROWS]\n".utf8))
    exit(64)
}
if FileManager.default.fileExists(atPath: target),
    !((try? FileManager.default.contentsOfDirectory(atPath: target)) ?? []).isEmpty
{
    FileHandle.standardError.write(Data("granary-sample: \(target) is not empty; remove it first\n".utf8))
    exit(73)
}
do {
    try SampleData.generate(in: target, rows: arguments.dropFirst().first.flatMap { Int($0) } ?? 200)
} catch {
    FileHandle.standardError.write(Data("granary-sample: \(error)\n".utf8))
    exit(74)
}
