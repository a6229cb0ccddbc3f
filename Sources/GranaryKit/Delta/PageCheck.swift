import Foundation

/// The proportional check of a phase-2 delta (`check: pages` in its manifest): each page the
/// delta read (the pages `follow` saw change, page 1, the pages past the smallest size a commit
/// gave) parsed as what it is, as SQLite's file format describes pages
/// (<https://www.sqlite.org/fileformat2.html>, "B-tree Pages"), instead of `quick_check` reading
/// every page of the store.
///
/// A page whose type byte says b-tree (2, 5, 10 or 13; at offset 100 on page 1) is checked whole:
/// its header, the cell pointer array within the page and before the cell content area, each cell
/// within the usable size with the size its payload gives, no two cells and freeblocks sharing a
/// byte, the freeblock chain in ascending order and in bounds, the fragmented bytes the header
/// states equal to the bytes neither a cell nor a freeblock holds, and every child and first
/// overflow page number within the database's size (not 0, not page 1, not the lock-byte page).
/// Any other page (an overflow page, a freelist trunk or leaf) must begin with a page number
/// within the size (its next page: 0 or a page of the store).
///
/// What it does not see, unlike `quick_check`: a page referenced twice, or by none (its other end
/// is an unchanged page), a b-tree whose keys are out of order across pages, a row whose record
/// does not parse, the freelist's count, and a page whose type byte itself is damaged into a
/// non-b-tree value (it is then checked as an overflow page is). Those stay with the base's check,
/// the quick_check a chain still runs every few deltas (``DeltaPolicy/maxPagesChecks``) and
/// `verify`'s `integrity_check` of the rebuilt chain.
///
/// A page that once was a b-tree page and is now a freelist leaf keeps its old bytes, which SQLite
/// wrote whole: it still parses, and its page numbers were within the size, which only VACUUM or
/// auto_vacuum shrink (a store with auto_vacuum is checked the configured way instead:
/// ``applies(pageOne:pageCount:)``).
struct PageCheck {
    /// The manifest's `check` of a store checked this way.
    static let name = CheckMode.pagesCheck

    let pageSize: Int
    let usable: Int
    let pageCount: Int
    /// The first problem found (nil: none yet).
    private(set) var problem: String?
    /// Pages checked.
    private(set) var checked = 0

    /// Whether the check applies to a store whose page 1 is `pageOne` and that holds `pageCount`
    /// pages, or why not (the configured check then runs): auto_vacuum stores (pointer-map pages,
    /// and a file that shrinks under its freelist's stale pages), and stores of 2^24 pages or more
    /// (an overflow page's first byte is then not always 0, so a type byte alone no longer tells
    /// a b-tree page from one).
    static func applies(pageOne: UnsafeRawBufferPointer, pageCount: Int) -> String? {
        guard pageOne.count >= 100 else { return "page 1 is too short" }
        if big32(pageOne, 52) != 0 { return "the store uses auto_vacuum" }
        if pageCount >= 1 << 24 { return "the store has 2^24 pages or more" }
        return nil
    }

    /// The check of pages of `pageSize` bytes with `reserved` bytes at each page's end, in a store
    /// of `pageCount` pages.
    init(pageSize: Int, reserved: Int, pageCount: Int) {
        self.pageSize = pageSize
        self.usable = pageSize - reserved
        self.pageCount = pageCount
    }

    /// Checks page `index` (from 0) in `page` (`pageSize` bytes); keeps the first problem.
    mutating func check(page index: Int, _ page: UnsafeRawBufferPointer) {
        guard problem == nil else { return }
        checked += 1
        if let why = Self.problem(page: index, page, usable: usable, pageCount: pageCount) {
            problem = "page \(index + 1): \(why)"
        }
    }

    /// What is wrong with page `index` (from 0), or nil.
    static func problem(page index: Int, _ page: UnsafeRawBufferPointer, usable: Int, pageCount: Int) -> String? {
        let start = index == 0 ? 100 : 0
        let lockPage = 0x4000_0000 / page.count + 1
        func inRange(_ number: UInt32) -> Bool {
            number >= 2 && Int(number) <= pageCount && Int(number) != lockPage
        }
        if index == 0 {
            if usable < 480 { return "the usable size is \(usable) bytes" }
            let trunk = big32(page, 32)
            if trunk != 0 && !inRange(trunk) { return "the first freelist trunk page is \(trunk)" }
            if Int(big32(page, 36)) > pageCount { return "the freelist has \(big32(page, 36)) pages" }
        }
        let kind = page[start]
        guard [2, 5, 10, 13].contains(kind) else {
            // An overflow or freelist page: its first four bytes are the next page (or 0).
            let next = big32(page, 0)
            return next == 0 || inRange(next) ? nil : "not a b-tree page and its next page is \(next)"
        }
        let leaf = kind >= 10
        let table = kind == 5 || kind == 13
        let header = start + (leaf ? 8 : 12)
        let cells = Int(big16(page, start + 3))
        var content = Int(big16(page, start + 5))
        if content == 0 { content = 65536 }
        let fragmented = Int(page[start + 7])
        let pointers = header + 2 * cells
        guard pointers <= content, content <= usable else {
            return "\(cells) cells' pointers end at \(pointers), the cell content area begins at \(content)"
        }
        if !leaf {
            let right = big32(page, start + 8)
            guard inRange(right) else { return "right child \(right) is not a page of the store" }
        }
        // Every byte range of the content area a cell or a freeblock holds: sorted, no overlap.
        var ranges: [(Int, Int)] = []
        ranges.reserveCapacity(cells + 8)
        let maxLocal = table ? usable - 35 : (usable - 12) * 64 / 255 - 23
        let minLocal = (usable - 12) * 32 / 255 - 23
        for cell in 0..<cells {
            let at = Int(big16(page, header + 2 * cell))
            guard at >= content, at < usable else {
                return "cell \(cell) begins at \(at), outside the cell content area (\(content)–\(usable))"
            }
            var cursor = at
            if !leaf {
                guard cursor + 4 <= usable else { return "cell \(cell) runs past the page" }
                let child = big32(page, cursor)
                guard inRange(child) else { return "cell \(cell)'s child \(child) is not a page of the store" }
                cursor += 4
            }
            if table && !leaf {
                // An interior table cell: the child and a rowid.
                guard let (_, length) = varint(page, cursor, limit: usable) else {
                    return "cell \(cell) runs past the page"
                }
                cursor += length
            } else {
                guard let (payload, length) = varint(page, cursor, limit: usable) else {
                    return "cell \(cell) runs past the page"
                }
                cursor += length
                if table {
                    guard let (_, rowid) = varint(page, cursor, limit: usable) else {
                        return "cell \(cell) runs past the page"
                    }
                    cursor += rowid
                }
                guard payload >= 0, payload <= 0x7fff_ffff else { return "cell \(cell) claims \(payload) bytes" }
                let size = Int(payload)
                var local = size
                if size > maxLocal {
                    let surplus = minLocal + (size - minLocal) % (usable - 4)
                    local = surplus <= maxLocal ? surplus : minLocal
                }
                cursor += local
                if local < size {
                    guard cursor + 4 <= usable else { return "cell \(cell) runs past the page" }
                    let overflow = big32(page, cursor)
                    guard inRange(overflow) else {
                        return "cell \(cell)'s overflow page \(overflow) is not a page of the store"
                    }
                    cursor += 4
                }
            }
            // SQLite never makes a cell shorter than 4 bytes (a freed one becomes a freeblock).
            let end = max(cursor, at + 4)
            guard end <= usable else { return "cell \(cell) runs past the page (\(at)–\(end))" }
            ranges.append((at, end))
        }
        var free = Int(big16(page, start + 1))
        var previous = 0
        while free != 0 {
            guard free > previous, free >= content, free + 4 <= usable else {
                return "a freeblock at \(free) is out of order or outside the cell content area"
            }
            let size = Int(big16(page, free + 2))
            guard size >= 4, free + size <= usable else { return "the freeblock at \(free) has \(size) bytes" }
            ranges.append((free, free + size))
            previous = free + size
            let next = Int(big16(page, free))
            guard next == 0 || next > previous else { return "the freeblock at \(free) is followed by one at \(next)" }
            free = next
        }
        ranges.sort { $0.0 < $1.0 }
        var gaps = 0
        var at = content
        for (begin, end) in ranges {
            guard begin >= at else { return "two cells or freeblocks share byte \(begin)" }
            gaps += begin - at
            at = end
        }
        gaps += usable - at
        guard gaps == fragmented else { return "\(gaps) fragmented bytes, the header says \(fragmented)" }
        return nil
    }

    /// A SQLite varint at `at`, with its length, or nil when it runs past `limit`.
    private static func varint(_ page: UnsafeRawBufferPointer, _ at: Int, limit: Int) -> (Int64, Int)? {
        var value: UInt64 = 0
        for i in 0..<9 {
            guard at + i < limit else { return nil }
            let byte = page[at + i]
            if i == 8 { return (Int64(bitPattern: value << 8 | UInt64(byte)), 9) }
            value = value << 7 | UInt64(byte & 0x7f)
            if byte & 0x80 == 0 { return (Int64(bitPattern: value), i + 1) }
        }
        return nil
    }

    static func big16(_ page: UnsafeRawBufferPointer, _ at: Int) -> UInt16 {
        UInt16(page[at]) << 8 | UInt16(page[at + 1])
    }

    static func big32(_ page: UnsafeRawBufferPointer, _ at: Int) -> UInt32 {
        UInt32(page[at]) << 24 | UInt32(page[at + 1]) << 16 | UInt32(page[at + 2]) << 8 | UInt32(page[at + 3])
    }
}
