/// What tests set and read of a ``PageRecorder``: which thread hashes, and counts of what each
/// thread did. Every way gives the same hashes (PageRecorderTests compares them); a backup
/// leaves the knobs as they are (``WriterHashing/whenBehind``).
extension PageRecorder {
    /// Which thread hashes a batch of whole pages (``send()``). Set before the copy starts.
    enum WriterHashing {
        /// The snapshot's thread when the hashing thread is behind (what a backup does).
        case whenBehind
        /// Tests (each way gives the same hashes): always the snapshot's thread, never, or every
        /// other batch (hashes given and not given mixed in one queue).
        case always, never, everyOther
    }

    struct Knobs {
        var writerHashes = WriterHashing.whenBehind
        /// Batches handed on so far.
        var batches = 0
        /// Pages the snapshot's thread hashed.
        var hashedByWriter = 0
        /// Pages `finish` read back from the snapshot.
        var reread = 0
    }

    var writerHashes: WriterHashing {
        get { knobs.writerHashes }
        set { knobs.writerHashes = newValue }
    }
    /// Pages hashed as they were written, and pages read back by `finish` (tests).
    var hashed: Int { core.hashed }
    var reread: Int { knobs.reread }
    /// Pages the snapshot's thread hashed (tests, once the copy is over; ``usedGivenHashes``
    /// counts those the hashing thread took).
    var hashedByWriter: Int { knobs.hashedByWriter }
    var usedGivenHashes: Int { core.usedGiven }
}
