//! A seeded, deterministic random source and the encodings the corpus formats are
//! built from (alphabets, base64, CRC32), so the corpus is the same on every run.

/// SplitMix64: small, seedable, and good enough to draw token characters.
pub(crate) struct Rng(u64);

pub(crate) const UPPER: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
pub(crate) const LOWER: &str = "abcdefghijklmnopqrstuvwxyz";
pub(crate) const DIGITS: &str = "0123456789";
pub(crate) const HEX: &str = "0123456789abcdef";
pub(crate) const HEX_UPPER: &str = "0123456789ABCDEF";
pub(crate) const BASE32: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
const BASE64: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

impl Rng {
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    pub(crate) fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    /// `n` characters drawn from `alphabet`.
    pub(crate) fn chars(&mut self, alphabet: &str, n: usize) -> String {
        let alphabet = alphabet.as_bytes();
        (0..n)
            .map(|_| alphabet[self.below(alphabet.len())] as char)
            .collect()
    }

    /// Base62 (`[A-Za-z0-9]`).
    pub(crate) fn alnum(&mut self, n: usize) -> String {
        self.chars(&format!("{UPPER}{LOWER}{DIGITS}"), n)
    }

    pub(crate) fn lower_alnum(&mut self, n: usize) -> String {
        self.chars(&format!("{LOWER}{DIGITS}"), n)
    }

    pub(crate) fn upper_alnum(&mut self, n: usize) -> String {
        self.chars(&format!("{UPPER}{DIGITS}"), n)
    }

    pub(crate) fn hex(&mut self, n: usize) -> String {
        self.chars(HEX, n)
    }

    /// `[A-Za-z]`.
    pub(crate) fn letters(&mut self, n: usize) -> String {
        self.chars(&format!("{UPPER}{LOWER}"), n)
    }

    /// `[a-z0-9_-]`.
    pub(crate) fn lower_ext_short(&mut self, n: usize) -> String {
        self.chars(&format!("{LOWER}{DIGITS}_-"), n)
    }

    /// `[a-z0-9=_-]`.
    pub(crate) fn lower_ext(&mut self, n: usize) -> String {
        self.chars(&format!("{LOWER}{DIGITS}=_-"), n)
    }

    /// A number of characters between `low` and `high`, inclusive.
    pub(crate) fn between(&mut self, low: usize, high: usize) -> usize {
        low + self.below(high - low + 1)
    }

    pub(crate) fn digits(&mut self, n: usize) -> String {
        let first = self.chars("123456789", 1);
        first + &self.chars(DIGITS, n - 1)
    }

    /// Standard base64 alphabet characters (no padding).
    pub(crate) fn b64(&mut self, n: usize) -> String {
        self.chars(std::str::from_utf8(BASE64).unwrap(), n)
    }

    /// URL-safe base64 alphabet characters (`-` and `_`).
    pub(crate) fn b64url(&mut self, n: usize) -> String {
        self.chars(&format!("{UPPER}{LOWER}{DIGITS}-_"), n)
    }

    /// Random bytes, base64-encoded with padding (a key of `bytes` bytes).
    pub(crate) fn b64_bytes(&mut self, bytes: usize) -> String {
        let raw: Vec<u8> = (0..bytes).map(|_| self.next_u64() as u8).collect();
        base64(&raw, true)
    }

    /// A version-4 UUID, lowercase.
    pub(crate) fn uuid(&mut self) -> String {
        let h = self.hex(32);
        let variant = self.chars("89ab", 1);
        format!(
            "{}-{}-4{}-{}{}-{}",
            &h[..8],
            &h[8..12],
            &h[13..16],
            variant,
            &h[17..20],
            &h[20..32]
        )
    }

    /// PEM body lines of 64 base64 characters that start with `head`.
    pub(crate) fn pem_body(&mut self, head: &str, chars: usize, newline: &str) -> String {
        let mut body = head.to_owned();
        body.push_str(&self.b64(chars.saturating_sub(head.len())));
        let lines: Vec<String> = body
            .as_bytes()
            .chunks(64)
            .map(|chunk| String::from_utf8(chunk.to_vec()).unwrap())
            .collect();
        let pad = ["", "=", "=="][self.below(3)];
        format!("{}{pad}", lines.join(newline))
    }
}

/// RFC 4648 base64, with `=` padding when `padded`.
pub(crate) fn base64(bytes: &[u8], padded: bool) -> String {
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n =
            chunk.iter().fold(0u32, |acc, &b| (acc << 8) | u32::from(b)) << (8 * (3 - chunk.len()));
        for i in 0..=chunk.len() {
            out.push(BASE64[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
        if padded {
            out.push_str(&"=".repeat(3 - chunk.len()));
        }
    }
    out
}

/// Base64url without padding, as JWTs and several token formats use it.
pub(crate) fn base64url(bytes: &[u8]) -> String {
    base64(bytes, false).replace('+', "-").replace('/', "_")
}

/// CRC-32 (IEEE 802.3), the checksum GitHub and npm tokens end with.
pub(crate) fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = 0xFFFF_FFFFu32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// `value` in base62, left-padded with `0` to `width`.
pub(crate) fn base62(mut value: u64, width: usize) -> String {
    const DIGITS62: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    while value > 0 {
        out.push(DIGITS62[(value % 62) as usize]);
        value /= 62;
    }
    while out.len() < width {
        out.push(b'0');
    }
    out.reverse();
    String::from_utf8(out).unwrap()
}
