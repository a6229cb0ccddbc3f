/// A set of page indexes (from 0), one bit per page up to the largest inserted, with its count:
/// the recorder's known pages and the change log's changed pages.
struct PageBits {
    private var words: [UInt64] = []
    private(set) var count = 0

    func contains(_ page: Int) -> Bool {
        let word = page >> 6
        return page >= 0 && word < words.count && words[word] & (1 << UInt64(page & 63)) != 0
    }

    mutating func insert(_ page: Int) {
        let word = page >> 6
        if word >= words.count { words.append(contentsOf: repeatElement(0, count: word - words.count + 1)) }
        let bit: UInt64 = 1 << UInt64(page & 63)
        if words[word] & bit == 0 {
            words[word] |= bit
            count += 1
        }
    }

    /// Inserts the pages from `first` through `last`, a word at a time.
    mutating func insert(from first: Int, through last: Int) {
        guard first >= 0, first <= last else { return }
        let lastWord = last >> 6
        if lastWord >= words.count { words.append(contentsOf: repeatElement(0, count: lastWord - words.count + 1)) }
        var page = first
        while page <= last {
            let bit = page & 63
            let span = min(64 - bit, last - page + 1)
            let mask: UInt64 = span == 64 ? ~0 : ((1 << UInt64(span)) - 1) << UInt64(bit)
            count += (mask & ~words[page >> 6]).nonzeroBitCount
            words[page >> 6] |= mask
            page += span
        }
    }

    mutating func remove(_ page: Int) {
        guard contains(page) else { return }
        words[page >> 6] &= ~(1 << UInt64(page & 63))
        count -= 1
    }

    /// Removes the pages from `first` through `last` (every page from `first` when nil).
    mutating func remove(from first: Int, through last: Int? = nil) {
        var page = max(first, 0)
        let end = min(last ?? Int.max, words.count * 64 - 1)
        while page <= end {
            if page & 63 == 0 && words[page >> 6] == 0 && page + 63 <= end {
                page += 64
                continue
            }
            remove(page)
            page += 1
        }
    }

    /// Calls `body` with each page in the set, in increasing order.
    func forEach(_ body: (Int) -> Void) {
        for (index, word) in words.enumerated() where word != 0 {
            var bits = word
            while bits != 0 {
                let bit = bits.trailingZeroBitCount
                body(index << 6 | bit)
                bits &= bits - 1
            }
        }
    }
}
