//! HTTP/1.1 response framing, pure: a response head parsed from bytes (its status, how
//! its body is delimited, whether the connection may carry another request) and the
//! decoder of the chunked transfer coding. No I/O: [`super`] feeds them what it reads.
//!
//! The head is parsed by `httparse` (the parser hyper uses). What this module adds is
//! the framing rules of RFC 9112 §6, strictly: a body whose length cannot be known for
//! certain — conflicting `Content-Length`s, a transfer coding other than a final
//! `chunked` — is a malformed answer, never a guess; a connection whose framing was
//! anything but exact (a body that ends at the close, `Transfer-Encoding` beside
//! `Content-Length`, `Connection: close`, HTTP/1.0) is never used again.

/// Most bytes a response head may take (status line and headers).
pub(crate) const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most header fields a response head may hold.
pub(crate) const MAX_HEADERS: usize = 100;
/// Most bytes of a chunk-size line (the size and its extensions).
const MAX_CHUNK_LINE: usize = 4 * 1024;
/// Most bytes of the trailer section after the last chunk.
const MAX_TRAILER_BYTES: usize = 16 * 1024;

/// How a response body is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Framing {
    /// No body: `204`, `304`, `101`.
    Empty,
    /// Exactly this many bytes (`Content-Length`).
    Length(u64),
    /// The chunked transfer coding.
    Chunked,
    /// Everything until the server closes the connection.
    UntilClose,
}

/// A parsed response head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Head {
    pub(crate) code: u16,
    pub(crate) framing: Framing,
    /// The connection may carry the next request once this body is read whole.
    pub(crate) reusable: bool,
    /// Bytes the head took: the body starts there.
    pub(crate) len: usize,
}

impl Head {
    /// An interim `1xx` answer (`100 Continue`, `103 Early Hints`): the final answer
    /// follows on the same connection. `101` is final: it ends HTTP on the connection.
    pub(crate) fn is_interim(&self) -> bool {
        (100..200).contains(&self.code) && self.code != 101
    }

    /// The body's declared length, when it has one.
    pub(crate) fn content_length(&self) -> Option<u64> {
        match self.framing {
            Framing::Length(length) => Some(length),
            Framing::Empty => Some(0),
            Framing::Chunked | Framing::UntilClose => None,
        }
    }
}

/// Why a response head cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadError {
    /// Not an HTTP/1.x response head, or its framing is ambiguous.
    Malformed,
    /// More than [`MAX_HEAD_BYTES`] or [`MAX_HEADERS`].
    TooLarge,
}

/// Parses the response head at the start of `bytes`; `Ok(None)` when it is not complete
/// yet (read more and call again).
pub(crate) fn parse_head(bytes: &[u8]) -> Result<Option<Head>, HeadError> {
    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut fields);
    let len = match response.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) if bytes.len() > MAX_HEAD_BYTES => {
            return Err(HeadError::TooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(_) => return Err(HeadError::Malformed),
    };
    if len > MAX_HEAD_BYTES {
        return Err(HeadError::TooLarge);
    }
    let code = response.code.ok_or(HeadError::Malformed)?;
    let http11 = response.version == Some(1);

    let mut length: Option<u64> = None;
    let mut codings = false;
    let mut chunked_last = false;
    let mut close = false;
    for field in response.headers.iter() {
        let name = field.name;
        let value = trim(field.value);
        if name.eq_ignore_ascii_case("content-length") {
            // A list of equal values is one length (RFC 9110 §8.6); any other is not.
            for part in value.split(|&b| b == b',') {
                let parsed = parse_length(trim(part)).ok_or(HeadError::Malformed)?;
                if length.is_some_and(|seen| seen != parsed) {
                    return Err(HeadError::Malformed);
                }
                length = Some(parsed);
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            for coding in value.split(|&b| b == b',').map(trim) {
                if coding.is_empty() {
                    continue;
                }
                if chunked_last {
                    // A coding after `chunked`: the body's end cannot be known.
                    return Err(HeadError::Malformed);
                }
                codings = true;
                chunked_last = coding.eq_ignore_ascii_case(b"chunked");
            }
        } else if name.eq_ignore_ascii_case("connection") {
            close |= value
                .split(|&b| b == b',')
                .any(|token| trim(token).eq_ignore_ascii_case(b"close"));
        }
    }

    let framing = if code == 204 || code == 304 || (100..200).contains(&code) {
        Framing::Empty
    } else if codings {
        // ctxd asks for no coding (no `Accept-Encoding`), so only `chunked` can be
        // undone; a body in any other coding could never be read as JSON.
        if !chunked_last {
            return Err(HeadError::Malformed);
        }
        Framing::Chunked
    } else if let Some(length) = length {
        Framing::Length(length)
    } else {
        Framing::UntilClose
    };
    let reusable = http11
        && !close
        && code != 101
        && framing != Framing::UntilClose
        && !(codings && length.is_some());
    Ok(Some(Head {
        code,
        framing,
        reusable,
        len,
    }))
}

fn trim(bytes: &[u8]) -> &[u8] {
    let start = bytes
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(bytes.len());
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |i| i + 1);
    &bytes[start..end]
}

/// Decimal digits only, no sign, no overflow.
fn parse_length(text: &[u8]) -> Option<u64> {
    if text.is_empty() || text.len() > 19 || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    text.iter().try_fold(0u64, |n, &d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

/// The chunked coding is broken: a bad size line, a missing CRLF, or a line or trailer
/// section over its bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkError;

/// Where the decoder is in the chunked coding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Hex digits of a chunk size.
    Size { value: u64, digits: usize },
    /// After the size: extensions (ignored) up to the CR.
    Extension { value: u64 },
    /// The LF of a size line.
    SizeLf { value: u64 },
    /// Data bytes of the current chunk.
    Data { remaining: u64 },
    /// The CR after a chunk's data.
    DataCr,
    /// The LF after a chunk's data.
    DataLf,
    /// The start of a trailer line (or of the final empty line).
    TrailerStart,
    /// Inside a trailer field line, up to its CR.
    TrailerLine,
    /// The LF that ends a trailer field line.
    TrailerLf,
    /// The LF of the final empty line.
    EndLf,
    /// The body is complete.
    Done,
}

/// Undoes the chunked transfer coding, fed any split of the bytes.
#[derive(Debug, Clone)]
pub(crate) struct ChunkedDecoder {
    state: State,
    /// Bytes of the current size line.
    line: usize,
    /// Bytes of the trailer section.
    trailer: usize,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        ChunkedDecoder {
            state: State::Size {
                value: 0,
                digits: 0,
            },
            line: 0,
            trailer: 0,
        }
    }
}

impl ChunkedDecoder {
    /// The last chunk and the trailer section have been read.
    pub(crate) fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decodes from `input`, appending chunk data to `out`. Returns how many bytes of
    /// `input` it took: all of them, unless the body ended inside `input` (what follows
    /// belongs to the connection's next answer).
    pub(crate) fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, ChunkError> {
        let mut at = 0;
        while at < input.len() {
            let byte = input[at];
            self.state = match self.state {
                State::Size { value, digits } => {
                    self.line += 1;
                    if let Some(digit) = hex(byte) {
                        if digits == 16 {
                            return Err(ChunkError);
                        }
                        State::Size {
                            value: value << 4 | u64::from(digit),
                            digits: digits + 1,
                        }
                    } else if digits == 0 {
                        return Err(ChunkError);
                    } else if byte == b'\r' {
                        State::SizeLf { value }
                    } else if byte == b';' || byte == b' ' || byte == b'\t' {
                        State::Extension { value }
                    } else {
                        return Err(ChunkError);
                    }
                }
                State::Extension { value } => {
                    self.line += 1;
                    if self.line > MAX_CHUNK_LINE {
                        return Err(ChunkError);
                    }
                    match byte {
                        b'\r' => State::SizeLf { value },
                        b'\n' => return Err(ChunkError),
                        _ => State::Extension { value },
                    }
                }
                State::SizeLf { value } => {
                    if byte != b'\n' {
                        return Err(ChunkError);
                    }
                    self.line = 0;
                    if value == 0 {
                        State::TrailerStart
                    } else {
                        State::Data { remaining: value }
                    }
                }
                State::Data { remaining } => {
                    let available = (input.len() - at) as u64;
                    let take = remaining.min(available) as usize;
                    out.extend_from_slice(&input[at..at + take]);
                    at += take;
                    let remaining = remaining - take as u64;
                    self.state = if remaining == 0 {
                        State::DataCr
                    } else {
                        State::Data { remaining }
                    };
                    continue;
                }
                State::DataCr if byte == b'\r' => State::DataLf,
                State::DataLf if byte == b'\n' => State::Size {
                    value: 0,
                    digits: 0,
                },
                State::DataCr | State::DataLf => return Err(ChunkError),
                State::TrailerStart | State::TrailerLine => {
                    self.trailer += 1;
                    if self.trailer > MAX_TRAILER_BYTES {
                        return Err(ChunkError);
                    }
                    match (self.state, byte) {
                        (State::TrailerStart, b'\r') => State::EndLf,
                        (_, b'\r') => State::TrailerLf,
                        (_, b'\n') => return Err(ChunkError),
                        _ => State::TrailerLine,
                    }
                }
                State::TrailerLf if byte == b'\n' => State::TrailerStart,
                State::EndLf if byte == b'\n' => {
                    self.state = State::Done;
                    return Ok(at + 1);
                }
                State::TrailerLf | State::EndLf => return Err(ChunkError),
                State::Done => return Ok(at),
            };
            at += 1;
        }
        Ok(at)
    }
}

fn hex(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn head(text: &str) -> Result<Option<Head>, HeadError> {
        parse_head(text.as_bytes())
    }

    fn complete(text: &str) -> Head {
        head(text)
            .unwrap_or_else(|e| panic!("{text:?}: {e:?}"))
            .unwrap_or_else(|| panic!("{text:?}: incomplete"))
    }

    #[test]
    fn a_head_gives_its_status_framing_and_reuse() {
        let cases: &[(&str, u16, Framing, bool)] = &[
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n",
                200,
                Framing::Length(12),
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
                200,
                Framing::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: identity, chunked\r\n\r\n",
                200,
                Framing::Chunked,
                true,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n",
                200,
                Framing::UntilClose,
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\nConnection: keep-alive, Close\r\n\r\n",
                200,
                Framing::Length(5),
                false,
            ),
            (
                "HTTP/1.0 200 OK\r\ncontent-length: 5\r\n\r\n",
                200,
                Framing::Length(5),
                false,
            ),
            (
                "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n",
                200,
                Framing::Chunked,
                false,
            ),
            (
                "HTTP/1.1 204 No Content\r\ncontent-length: 9\r\n\r\n",
                204,
                Framing::Empty,
                true,
            ),
            (
                "HTTP/1.1 304 Not Modified\r\n\r\n",
                304,
                Framing::Empty,
                true,
            ),
            (
                "HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n",
                101,
                Framing::Empty,
                false,
            ),
            ("HTTP/1.1 100 Continue\r\n\r\n", 100, Framing::Empty, true),
            (
                "HTTP/1.1 404 Not Found\r\ncontent-length: 7, 7\r\nContent-Length: 7\r\n\r\n",
                404,
                Framing::Length(7),
                true,
            ),
        ];
        for (text, code, framing, reusable) in cases {
            let parsed = complete(text);
            assert_eq!(
                (parsed.code, parsed.framing, parsed.reusable, parsed.len),
                (*code, *framing, *reusable, text.len()),
                "{text:?}"
            );
        }
        assert!(complete("HTTP/1.1 100 Continue\r\n\r\n").is_interim());
        assert!(complete("HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n").is_interim());
        assert!(!complete("HTTP/1.1 101 Switching Protocols\r\n\r\n").is_interim());
        assert!(!complete("HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").is_interim());
    }

    #[test]
    fn the_body_starts_after_the_head() {
        let text = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}HTTP/1.1";
        assert_eq!(complete(text).len, text.len() - "{}HTTP/1.1".len());
    }

    #[test]
    fn an_unfinished_head_asks_for_more() {
        let text = "HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n";
        for cut in 0..text.len() {
            assert_eq!(head(&text[..cut]), Ok(None), "{:?}", &text[..cut]);
        }
    }

    #[test]
    fn ambiguous_or_foreign_heads_are_malformed() {
        let cases = [
            "<html>moved</html>\r\n\r\n",
            "HTTP/2 200\r\n\r\n",
            "HTTP/1.1 2000 OK\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 5, 6\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: +5\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 0x10\r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: \r\n\r\n",
            "HTTP/1.1 200 OK\r\ncontent-length: 99999999999999999999\r\n\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked, gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntransfer-encoding: gzip\r\n\r\n",
            "HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        ];
        for text in cases {
            assert_eq!(head(text), Err(HeadError::Malformed), "{text:?}");
        }
    }

    #[test]
    fn heads_over_their_bounds_are_too_large() {
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: v\r\n")).collect();
        assert_eq!(
            head(&format!("HTTP/1.1 200 OK\r\n{many}\r\n")),
            Err(HeadError::TooLarge)
        );
        let fits: String = (0..MAX_HEADERS).map(|i| format!("x-{i}: v\r\n")).collect();
        assert!(
            head(&format!("HTTP/1.1 200 OK\r\n{fits}\r\n"))
                .unwrap()
                .is_some()
        );

        let long = format!("HTTP/1.1 200 OK\r\nx-long: {}", "v".repeat(MAX_HEAD_BYTES));
        assert_eq!(head(&long), Err(HeadError::TooLarge), "unfinished and over");
        let complete_but_over = format!("{long}\r\n\r\n");
        assert_eq!(head(&complete_but_over), Err(HeadError::TooLarge));
        let at_the_bound = {
            let prefix = "HTTP/1.1 200 OK\r\nx-long: ";
            let room = MAX_HEAD_BYTES - prefix.len() - 4;
            format!("{prefix}{}\r\n\r\n", "v".repeat(room))
        };
        assert_eq!(at_the_bound.len(), MAX_HEAD_BYTES);
        assert!(head(&at_the_bound).unwrap().is_some());
    }

    fn decode_all(input: &[u8]) -> Result<(Vec<u8>, usize, bool), ChunkError> {
        let mut decoder = ChunkedDecoder::default();
        let mut out = Vec::new();
        let used = decoder.decode(input, &mut out)?;
        Ok((out, used, decoder.is_done()))
    }

    #[test]
    fn chunked_bodies_decode() {
        let body = b"5\r\nhello\r\n7;name=val\r\n, world\r\nA\r\n0123456789\r\n0\r\n\r\nNEXT";
        let (out, used, done) = decode_all(body).unwrap();
        assert_eq!(out, b"hello, world0123456789");
        assert!(done);
        assert_eq!(&body[used..], b"NEXT", "the next answer's bytes are left");

        let trailers = b"3\r\nabc\r\n0\r\nx-sum: 1\r\nx-more: 2\r\n\r\n";
        let (out, used, done) = decode_all(trailers).unwrap();
        assert_eq!(
            (out.as_slice(), used, done),
            (&b"abc"[..], trailers.len(), true)
        );

        let (out, _, done) = decode_all(b"3\r\nab").unwrap();
        assert_eq!((out.as_slice(), done), (&b"ab"[..], false), "unfinished");
        let (out, _, done) = decode_all(b"0\r\n\r\n").unwrap();
        assert_eq!((out.as_slice(), done), (&b""[..], true), "empty body");
    }

    #[test]
    fn broken_chunked_bodies_are_refused() {
        let max_line = format!("1;{}\r\n", "e".repeat(MAX_CHUNK_LINE));
        let trailer = format!("0\r\nx: {}\r\n\r\n", "t".repeat(MAX_TRAILER_BYTES));
        let cases: Vec<&[u8]> = vec![
            b"\r\n",
            b"g\r\n",
            b"-1\r\n",
            b"5\nhello\r\n",
            b"5\r\nhelloX\r\n",
            b"5\r\nhello\rX",
            b"5\r\nhello\n\r\n",
            b"11111111111111111\r\n",
            b"5;ext\nhello",
            b"0\r\nx: y\n\r\n",
            b"0\r\n\rX",
            max_line.as_bytes(),
            trailer.as_bytes(),
        ];
        for case in cases {
            assert_eq!(
                decode_all(case).map(|_| ()),
                Err(ChunkError),
                "{:?}",
                String::from_utf8_lossy(case)
            );
        }
        let largest = b"ffffffffffffffff\r\n";
        assert!(decode_all(largest).is_ok(), "16 hex digits is the most");
    }

    proptest! {
        /// Any split of a chunked body into reads decodes to the same bytes.
        #[test]
        fn any_split_decodes_the_same(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..6),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut encoded = Vec::new();
            for chunk in &chunks {
                encoded.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
                encoded.extend_from_slice(chunk);
                encoded.extend_from_slice(b"\r\n");
            }
            encoded.extend_from_slice(b"0\r\n\r\n");
            let mut points: Vec<usize> = cuts.iter().map(|c| c.index(encoded.len() + 1)).collect();
            points.push(0);
            points.push(encoded.len());
            points.sort_unstable();
            let mut decoder = ChunkedDecoder::default();
            let mut out = Vec::new();
            for pair in points.windows(2) {
                let used = decoder.decode(&encoded[pair[0]..pair[1]], &mut out).unwrap();
                prop_assert_eq!(used, pair[1] - pair[0]);
            }
            prop_assert!(decoder.is_done());
            prop_assert_eq!(out, chunks.concat());
        }
    }
}
