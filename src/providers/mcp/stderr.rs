//! A stdio MCP server's standard error, read and logged: read as bytes (so no byte, valid
//! UTF-8 or not, stops the reader, and the child never writes into a closed pipe), split
//! into lines of at most [`MAX_LINE_BYTES`] (the rest of a longer line is read, counted
//! and dropped, never buffered), each line logged as untrusted text with the binding's
//! own secrets masked. The child's private working directory is removed when its
//! standard error ends, that is when the child (and whatever inherited the pipe) is gone.

use crate::providers::untrusted::{Masks, UntrustedText};
use tokio::io::{AsyncRead, AsyncReadExt};

/// The most bytes of one stderr line kept for the log; more than a log line shows
/// ([`crate::providers::untrusted::MAX_SHOWN_BYTES`]), so a line is cut where the log
/// would cut it anyway and the bytes past the bound cost nothing.
pub(crate) const MAX_LINE_BYTES: usize = 4 * 1024;

/// What one read asks the pipe for.
const READ_CHUNK_BYTES: usize = 8 * 1024;

/// Splits a byte stream into lines of at most [`MAX_LINE_BYTES`]. Pure.
#[derive(Debug, Default)]
pub(crate) struct Lines {
    /// The current line's first bytes, at most [`MAX_LINE_BYTES`].
    line: Vec<u8>,
    /// How many bytes of the current line were dropped past the bound.
    dropped: u64,
}

impl Lines {
    /// Takes `chunk`; `emit(line, dropped)` is called for each line it completes (the
    /// newline and a CR before it are not part of the line).
    pub(crate) fn feed(&mut self, chunk: &[u8], emit: &mut impl FnMut(&[u8], u64)) {
        let mut rest = chunk;
        while let Some(end) = rest.iter().position(|&byte| byte == b'\n') {
            self.keep(&rest[..end]);
            self.emit(emit);
            rest = &rest[end + 1..];
        }
        self.keep(rest);
    }

    /// Emits what is left of an unfinished last line, if anything.
    pub(crate) fn finish(&mut self, emit: &mut impl FnMut(&[u8], u64)) {
        if !self.line.is_empty() || self.dropped > 0 {
            self.emit(emit);
        }
    }

    fn keep(&mut self, bytes: &[u8]) {
        let room = MAX_LINE_BYTES - self.line.len();
        let kept = bytes.len().min(room);
        self.line.extend_from_slice(&bytes[..kept]);
        self.dropped += (bytes.len() - kept) as u64;
    }

    fn emit(&mut self, emit: &mut impl FnMut(&[u8], u64)) {
        let line = match self.line.as_slice() {
            [head @ .., b'\r'] if self.dropped == 0 => head,
            line => line,
        };
        emit(line, self.dropped);
        self.line.clear();
        self.dropped = 0;
    }
}

/// Reads `stderr` to its end, logging each line (`mcp server stderr`) through
/// [`UntrustedText`] with `masks`; `keep_until_end` (the child's working directory) is
/// dropped when the stream ends.
pub(crate) async fn log_lines<T>(
    provider: String,
    mut stderr: impl AsyncRead + Unpin,
    masks: Masks,
    keep_until_end: T,
) {
    let mut chunk = vec![0; READ_CHUNK_BYTES];
    let mut lines = Lines::default();
    let mut log = |line: &[u8], dropped: u64| {
        let line = UntrustedText::from_bytes(line, &masks);
        if dropped == 0 {
            tracing::info!(provider = %provider, line = %line, "mcp server stderr");
        } else {
            tracing::info!(
                provider = %provider,
                line = %line,
                dropped_bytes = dropped,
                "mcp server stderr"
            );
        }
    };
    loop {
        match stderr.read(&mut chunk).await {
            Ok(0) => break,
            Ok(read) => lines.feed(&chunk[..read], &mut log),
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
            // A pipe that fails to read has nothing more to give.
            Err(_) => break,
        }
    }
    lines.finish(&mut log);
    drop(keep_until_end);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(chunks: &[&[u8]]) -> Vec<(Vec<u8>, u64)> {
        let mut lines = Lines::default();
        let mut out = Vec::new();
        let mut emit = |line: &[u8], dropped: u64| out.push((line.to_vec(), dropped));
        for chunk in chunks {
            lines.feed(chunk, &mut emit);
        }
        lines.finish(&mut emit);
        out
    }

    #[test]
    fn lines_are_split_across_chunks_without_their_line_ends() {
        assert_eq!(
            split(&[b"first\r\nsec", b"ond\n", b"\nlast"]),
            vec![
                (b"first".to_vec(), 0),
                (b"second".to_vec(), 0),
                (b"".to_vec(), 0),
                (b"last".to_vec(), 0)
            ]
        );
        assert!(split(&[b""]).is_empty());
    }

    #[test]
    fn a_long_line_keeps_its_head_and_counts_the_rest() {
        let long = vec![b'x'; MAX_LINE_BYTES * 3 + 5];
        let lines = split(&[&long[..1000], &long[1000..], b"\nnext\n"]);
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].0.len(), MAX_LINE_BYTES);
        assert_eq!(lines[0].1, (MAX_LINE_BYTES * 2 + 5) as u64);
        assert_eq!(lines[1], (b"next".to_vec(), 0));
    }

    #[test]
    fn bytes_that_are_not_utf8_are_kept_as_they_are() {
        assert_eq!(
            split(&[b"\xff\xfe bad\n"]),
            vec![(b"\xff\xfe bad".to_vec(), 0)]
        );
    }

    #[tokio::test]
    async fn the_reader_reads_to_the_end_whatever_the_bytes() {
        use tokio::io::AsyncWriteExt;
        // A small pipe: the writer finishes only if the reader keeps reading, past a
        // byte that is not UTF-8 and a line far over the bound.
        let (mut child, stderr) = tokio::io::duplex(64);
        let writer = tokio::spawn(async move {
            child.write_all(b"\xff not utf-8\n").await?;
            child.write_all(&vec![b'y'; 1 << 20]).await?;
            child.write_all(b"\nafter\n").await?;
            child.shutdown().await
        });
        let (kept, dropped) = tokio::sync::oneshot::channel::<()>();
        log_lines("p".to_owned(), stderr, Masks::none(), kept).await;
        writer.await.unwrap().expect("every byte was read");
        assert!(dropped.await.is_err(), "dropped at the end of the stream");
    }
}
