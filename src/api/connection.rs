//! One client connection under ctxd's rules, below actix's HTTP/1 parser. Two things the
//! parser leaves undone:
//!
//! - **Every request head has a deadline.** actix bounds the head of a connection's first
//!   request only (`client_request_timeout`); on a kept-alive connection a client could
//!   start a second request and never finish its head. Here the first byte of any head
//!   starts `server.header_timeout_ms`; past it the client gets a `408` and the connection
//!   ends.
//! - **Every error answer carries the envelope.** The answers actix's parser writes itself
//!   — 400 for a malformed request (smuggling shapes included), 431, 408 — have empty
//!   bodies; they are rewritten with `{"error": {"code", "message"}}` (and
//!   `X-Content-Type-Options: nosniff`, as every answer of the App). ctxd's own routes
//!   never write an empty error (the App's middleware sees to that), and no body ctxd
//!   writes contains a raw CRLF (JSON escapes it; metrics use bare LF), so an empty-bodied
//!   error head in the byte stream can only be the parser's.

use super::envelope::error_body;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// A connection's stream with the head deadline and the error envelope.
pub(crate) struct GuardedIo<T> {
    io: T,
    header_timeout: Duration,
    head: Head,
    /// Armed when a head starts; polled only while one is arriving.
    deadline: Pin<Box<Sleep>>,
    /// A rewritten error answer, written before anything else, and how much of it is out.
    pending: Vec<u8>,
    pending_written: usize,
    /// The head deadline passed: the 408 went out and reads end.
    timed_out: bool,
}

/// Where the connection is in receiving a request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Head {
    /// Between requests: nothing of a head has arrived since the last answer.
    Idle,
    /// A head is arriving; `line_end` says how much of an empty line was just seen
    /// (0 none, 1 after `\n`, 2 after `\n\r`).
    Arriving { line_end: u8 },
    /// The head is in; the route bounds the rest (the body's own deadline).
    Received,
}

impl<T> GuardedIo<T> {
    pub(crate) fn new(io: T, header_timeout: Duration) -> Self {
        GuardedIo {
            io,
            header_timeout,
            head: Head::Idle,
            deadline: Box::pin(tokio::time::sleep(header_timeout)),
            pending: Vec::new(),
            pending_written: 0,
            timed_out: false,
        }
    }

    /// Follows the bytes of a request head to its empty line (`\n\n` or `\n\r\n`, as
    /// the parser accepts both).
    fn received(&mut self, bytes: &[u8]) {
        let mut line_end = match self.head {
            Head::Received => return,
            Head::Idle => {
                self.deadline
                    .as_mut()
                    .reset(Instant::now() + self.header_timeout);
                0
            }
            Head::Arriving { line_end } => line_end,
        };
        for &byte in bytes {
            line_end = match (line_end, byte) {
                (1 | 2, b'\n') => {
                    self.head = Head::Received;
                    return;
                }
                (_, b'\n') => 1,
                (1, b'\r') => 2,
                _ => 0,
            };
        }
        self.head = Head::Arriving { line_end };
    }
}

impl<T: AsyncWrite + Unpin> GuardedIo<T> {
    /// Writes what is left of a rewritten answer.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.pending_written < self.pending.len() {
            let written = ready!(
                Pin::new(&mut self.io).poll_write(cx, &self.pending[self.pending_written..])
            )?;
            if written == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.pending_written += written;
        }
        self.pending.clear();
        self.pending_written = 0;
        Poll::Ready(Ok(()))
    }

    /// The head deadline passed: one attempt to write the 408 (the socket's buffer is
    /// empty while a client dawdles over its head), then the connection reads as closed.
    fn time_out(&mut self, cx: &mut Context<'_>) {
        self.timed_out = true;
        let answer = enveloped_answer("HTTP/1.1 408 Request Timeout\r\nconnection: close", 408);
        let _ = Pin::new(&mut self.io).poll_write(cx, &answer);
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> AsyncRead for GuardedIo<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.timed_out {
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.head != Head::Received {
                    this.received(&buf.filled()[before..]);
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                if matches!(this.head, Head::Arriving { .. })
                    && this.deadline.as_mut().poll(cx).is_ready()
                {
                    this.time_out(cx);
                    return Poll::Ready(Ok(()));
                }
                Poll::Pending
            }
            error => error,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for GuardedIo<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        if let Some(rewritten) = with_envelope(buf) {
            this.pending = rewritten;
            this.head = Head::Idle;
            // Taken whole: what is not out yet goes with the next write, flush or shutdown.
            if let Poll::Ready(Err(error)) = this.poll_pending(cx) {
                return Poll::Ready(Err(error));
            }
            return Poll::Ready(Ok(buf.len()));
        }
        let written = ready!(Pin::new(&mut this.io).poll_write(cx, buf))?;
        if is_final_answer_head(buf) {
            this.head = Head::Idle;
        }
        Poll::Ready(Ok(written))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_pending(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

/// The start of an answer other than `1xx` (`100 Continue` comes before a body).
fn is_final_answer_head(bytes: &[u8]) -> bool {
    bytes.starts_with(b"HTTP/1.") && bytes.get(9).is_some_and(|&digit| digit != b'1')
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

const EMPTY_BODY: &[u8] = b"\r\ncontent-length: 0\r\n";
/// The parser's error answers are short heads (status line, length, connection, date).
const ERROR_HEAD_MAX: usize = 512;

/// `bytes` with the parser's empty-bodied error answer given the envelope, if they end
/// with one — the parser's error is always the last answer on its connection, and
/// nothing else ctxd writes ends with an empty line — everything before it unchanged.
fn with_envelope(bytes: &[u8]) -> Option<Vec<u8>> {
    if !bytes.ends_with(b"\r\n\r\n") {
        return None;
    }
    let mut from = bytes.len().saturating_sub(ERROR_HEAD_MAX);
    while let Some(offset) = find(&bytes[from..], b"HTTP/1.1 ") {
        let start = from + offset;
        let answer = &bytes[start..];
        from = start + 1;
        let Some(head_end) = find(answer, b"\r\n\r\n") else {
            continue;
        };
        if head_end + 4 != answer.len() {
            continue;
        }
        // Status line and headers, each line with its CRLF.
        let lines = &answer[..head_end + 2];
        let status = std::str::from_utf8(&lines[9..lines.len().min(12)])
            .ok()
            .and_then(|code| code.parse::<u16>().ok());
        let (Some(status @ 400..=599), Some(empty)) = (status, find(lines, EMPTY_BODY)) else {
            continue;
        };
        // The lines without `content-length: 0`, and without the last CRLF.
        let mut kept = lines[..empty + 2].to_vec();
        kept.extend_from_slice(&lines[empty + EMPTY_BODY.len()..]);
        kept.truncate(kept.len() - 2);
        let mut rewritten = bytes[..start].to_vec();
        rewritten.extend_from_slice(&enveloped_answer(std::str::from_utf8(&kept).ok()?, status));
        return Some(rewritten);
    }
    None
}

/// A whole answer: `head` (status line and headers, no final CRLF) with the envelope for
/// `status` as its JSON body.
fn enveloped_answer(head: &str, status: u16) -> Vec<u8> {
    let status = actix_web::http::StatusCode::from_u16(status)
        .unwrap_or(actix_web::http::StatusCode::BAD_REQUEST);
    let body = serde_json::to_string(&error_body(status)).unwrap_or_default();
    format!(
        "{head}\r\ncontent-type: application/json\r\nx-content-type-options: nosniff\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parsers_empty_errors_get_the_envelope() {
        let answer = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\ndate: Mon, 30 Nov 2026 18:41:03 GMT\r\n\r\n";
        let rewritten = String::from_utf8(with_envelope(answer).unwrap()).unwrap();
        let (head, body) = rewritten.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\nconnection: close\r\ndate: "));
        assert!(head.contains("content-type: application/json"));
        assert!(head.contains(&format!("content-length: {}", body.len())));
        assert!(!head.contains("content-length: 0"));
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(body["error"]["code"], "BAD_REQUEST");

        // After an answer already in the buffer (pipelined requests).
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 15\r\ncontent-type: application/json\r\n\r\n{\"status\":\"ok\"}";
        let mut both = ok.as_bytes().to_vec();
        both.extend_from_slice(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n",
        );
        let rewritten = String::from_utf8(with_envelope(&both).unwrap()).unwrap();
        assert!(rewritten.starts_with(ok));
        assert!(rewritten.contains("REQUEST_HEADER_FIELDS_TOO_LARGE"));
        assert!(!rewritten.contains("content-length: 0"));
    }

    #[test]
    fn answers_with_bodies_pass_unchanged() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 80\r\ncontent-type: application/json\r\n\r\n{\"error\":{}}",
            b"{\"message\":\"HTTP/1.1 400 Bad Request\\r\\ncontent-length: 0\\r\\n\\r\\n\"}",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n",
        ] {
            assert_eq!(with_envelope(answer), None, "{}", String::from_utf8_lossy(answer));
        }
    }

    #[tokio::test]
    async fn a_head_ends_at_its_empty_line() {
        let mut io = GuardedIo::new((), Duration::from_secs(1));
        assert_eq!(io.head, Head::Idle);
        io.received(b"GET / HTTP/1.1\r\nHost: x\r");
        assert!(matches!(io.head, Head::Arriving { .. }));
        io.received(b"\n\r");
        assert_eq!(io.head, Head::Arriving { line_end: 2 });
        io.received(b"\n{\"body\": 1}");
        assert_eq!(io.head, Head::Received);
        let mut bare = GuardedIo::new((), Duration::from_secs(1));
        bare.received(b"GET / HTTP/1.1\nHost: x\n\n");
        assert_eq!(bare.head, Head::Received);
    }

    #[test]
    fn only_a_final_answer_ends_a_request() {
        assert!(is_final_answer_head(b"HTTP/1.1 200 OK\r\n"));
        assert!(is_final_answer_head(b"HTTP/1.1 408 Request Timeout\r\n"));
        assert!(!is_final_answer_head(b"HTTP/1.1 100 Continue\r\n\r\n"));
        assert!(!is_final_answer_head(b"{\"turnId\": 1}"));
    }
}
