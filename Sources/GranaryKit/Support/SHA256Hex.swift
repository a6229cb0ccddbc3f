import Crypto

extension SHA256.Digest {
    /// Lower-case hex, as `sha256sum` prints it.
    public var hex: String {
        var text = ""
        text.reserveCapacity(64)
        for byte in self {
            text.append(Self.digits[Int(byte >> 4)])
            text.append(Self.digits[Int(byte & 0x0F)])
        }
        return text
    }

    private static let digits: [Character] = Array("0123456789abcdef")
}
