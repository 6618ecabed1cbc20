//! The transport of a stdio MCP server: its standard output and input as rmcp's line
//! transport with ctxd's message bound, and the child process, killed when the
//! transport is closed or dropped.
//!
//! rmcp's own child-process transport reads lines of up to 16 MiB; here a line is one
//! JSON-RPC message of at most [`MAX_MESSAGE_BYTES`]: a longer line is dropped by rmcp's
//! reader (never buffered whole) and the call it answered ends at its deadline. rmcp parses every message into JSON values, each costing tens of bytes
//! however few it takes on the wire, so the output is also read through
//! [`ValueCount`]: a message that would parse into more than [`items::MAX_VALUES`]
//! values ends the session before rmcp buffers its end (the call fails, the supervisor
//! starts the child again).

use crate::providers::items;
use rmcp::RoleClient;
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use rmcp::transport::async_rw::AsyncRwTransport;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

/// Largest JSON-RPC line a stdio server may send, before the provider's own 1 MiB bound
/// on a result applies (that one gives `LIMIT_EXCEEDED`): it only caps what rmcp reads
/// and parses. Room for a result past the bound with its text twice (as text and as
/// structured content, as SDKs send it), so such a result is still told
/// `RESPONSE_TOO_LARGE`; its values are counted besides ([`ValueCount`]).
pub(crate) const MAX_MESSAGE_BYTES: usize = 8 * 1024 * 1024;

/// How long a closed child has to exit after it is killed.
const EXIT_WAIT: Duration = Duration::from_secs(3);

/// A running stdio server: rmcp's line transport over its pipes, and the child.
pub(crate) struct ChildTransport {
    lines: AsyncRwTransport<RoleClient, ValueCount<ChildStdout>, ChildStdin>,
    /// Spawned with `kill_on_drop`: a transport dropped without `close` kills it too.
    child: Child,
}

impl ChildTransport {
    /// Starts `command` with its standard input and output piped to the transport and
    /// its standard error piped to the caller (who must read it).
    pub(crate) fn spawn(mut command: Command) -> io::Result<(ChildTransport, ChildStderr)> {
        command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn()?;
        let taken = (child.stdout.take(), child.stdin.take(), child.stderr.take());
        let (Some(stdout), Some(stdin), Some(stderr)) = taken else {
            return Err(io::Error::other("the child's pipes are not all there"));
        };
        let stdout = ValueCount::new(stdout, items::MAX_VALUES);
        let lines = AsyncRwTransport::new(stdout, stdin).with_max_line_length(MAX_MESSAGE_BYTES);
        Ok((ChildTransport { lines, child }, stderr))
    }
}

impl Transport<RoleClient> for ChildTransport {
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), io::Error>> + Send + 'static {
        self.lines.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.lines.receive()
    }

    async fn close(&mut self) -> Result<(), io::Error> {
        let closed = self.lines.close().await;
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(EXIT_WAIT, self.child.wait()).await;
        closed
    }
}

/// A line-delimited JSON stream read while the values of each line are counted: a line
/// with more than its bound ends the stream with an error at that point. The count is
/// an upper bound found without parsing: every value but a message's first follows a
/// `[`, `,` or `:` outside a string (a `{` is counted too, for its first key).
pub(crate) struct ValueCount<R> {
    inner: R,
    limit: usize,
    /// Structural marks seen on the current line.
    marks: usize,
    in_string: bool,
    escaped: bool,
}

impl<R> ValueCount<R> {
    pub(crate) fn new(inner: R, limit: usize) -> ValueCount<R> {
        ValueCount {
            inner,
            limit,
            marks: 0,
            in_string: false,
            escaped: false,
        }
    }

    /// Counts `bytes`; `false` once the current line passes the bound.
    fn count(&mut self, bytes: &[u8]) -> bool {
        for &byte in bytes {
            if byte == b'\n' {
                // rmcp splits messages at every newline, inside a string or not.
                self.marks = 0;
                self.in_string = false;
                self.escaped = false;
                continue;
            }
            if self.in_string {
                if self.escaped {
                    self.escaped = false;
                } else if byte == b'\\' {
                    self.escaped = true;
                } else if byte == b'"' {
                    self.in_string = false;
                }
                continue;
            }
            match byte {
                b'"' => self.in_string = true,
                b'[' | b'{' | b',' | b':' => {
                    self.marks += 1;
                    if self.marks >= self.limit {
                        return false;
                    }
                }
                _ => {}
            }
        }
        true
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for ValueCount<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.count(&buf.filled()[before..]) {
                    Poll::Ready(Ok(()))
                } else {
                    // What this read took in is not handed on: an error reads nothing.
                    buf.set_filled(before);
                    tracing::warn!(
                        limit = this.limit,
                        "mcp server message holds more JSON values than a lookup may take; the session ends"
                    );
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a message holds more JSON values than a lookup may take",
                    )))
                }
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    async fn read_all(input: &[u8], limit: usize) -> io::Result<Vec<u8>> {
        let mut reader = ValueCount::new(input, limit);
        let mut out = Vec::new();
        reader.read_to_end(&mut out).await.map(|_| out)
    }

    #[tokio::test]
    async fn values_are_counted_per_line_outside_strings() {
        let line = br#"{"a":[1,2,3],"b":"x,y:[{"}"#;
        // `{` `:` `[` `,` `,` `,` `:` = 7 marks; the string's punctuation is not counted.
        assert!(read_all(line, 8).await.is_ok());
        assert!(read_all(line, 7).await.is_err());
        // Each line starts again.
        let two = [&line[..], b"\n", &line[..], b"\n"].concat();
        assert_eq!(read_all(&two, 8).await.unwrap(), two);
        // An escaped quote does not end a string.
        assert!(read_all(br#"{"k":"a\",,,,,,,,b"}"#, 3).await.is_ok());
        // The bound is upper: a list of n numbers has n - 1 commas and its bracket.
        let list = format!("[{}]", vec!["0"; 1000].join(","));
        assert!(read_all(list.as_bytes(), 1001).await.is_ok());
        assert!(read_all(list.as_bytes(), 1000).await.is_err());
    }
}
