//! What can go wrong in the trace store, and the one way a SQLite failure becomes a
//! [`StoreError`] naming the file and the operation.

use crate::trace::cursor::InvalidCursor;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What went wrong in the trace store. Messages name the file and the operation; they
/// never carry record content (parse errors give only a line and column).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the folder {path} for the trace store: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot create the trace store {path}: {source}")]
    CreateFile {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the trace store {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error("trace store {path}: cannot {action}: {source}")]
    Sqlite {
        path: PathBuf,
        action: &'static str,
        source: rusqlite::Error,
    },
    #[error("trace store {}: cannot {action}: {reason}", store.display())]
    Postgres {
        /// The store's label (`postgres:$ENV`): never the connection string.
        store: PathBuf,
        action: &'static str,
        reason: String,
    },
    #[error("trace store {path}: journal_mode=WAL did not take effect (the mode is {mode:?})")]
    NotWal { path: PathBuf, mode: String },
    #[error(
        "{path} is not a ctxd trace store (it has no schema_version table): point [trace] store at a new file or an existing trace store"
    )]
    NotATraceStore { path: PathBuf },
    #[error(
        "the trace store {path} has schema version {found}, newer than this ctxd knows ({known}): upgrade ctxd before opening it"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error(
        "the trace store {path} has schema version {found}, older than this ctxd reads ({known}): start `ctxd serve` on it once to migrate it"
    )]
    TooOld {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("trace store {path}: the {what} does not parse (line {line}, column {column})")]
    Corrupt {
        path: PathBuf,
        what: String,
        line: usize,
        column: usize,
    },
    #[error("trace store {path}: the {what} does not decode: {reason}")]
    Undecodable {
        path: PathBuf,
        what: String,
        reason: super::codec::DecodeError,
    },
    #[error(
        "the cursor is not one this search issued: pass next_cursor from the previous page unchanged, with the same filters"
    )]
    InvalidCursor,
    #[error(
        "trace store {path}: paging needs the digest key (cursors are sealed with it), and this reader was opened without it"
    )]
    NoCursorKey { path: PathBuf },
    #[error(
        "trace store {path}: reading retained content needs the digest key, and this reader was opened without it"
    )]
    NoRetentionKey { path: PathBuf },
    #[error("trace store {path}: all {readers} read connections stayed busy for {waited:?}")]
    ReadersBusy {
        path: PathBuf,
        readers: usize,
        waited: Duration,
    },
}

impl StoreError {
    /// Whether the store is busy (another connection holds the write lock) rather than
    /// broken.
    #[cfg(test)]
    pub(crate) fn is_busy(&self) -> bool {
        let source = match self {
            StoreError::Sqlite { source, .. } | StoreError::Open { source, .. } => source,
            _ => return false,
        };
        matches!(
            source.sqlite_error_code(),
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
        )
    }
}

impl From<InvalidCursor> for StoreError {
    fn from(_: InvalidCursor) -> Self {
        StoreError::InvalidCursor
    }
}

/// `map_err` helper: a SQLite failure of `action` on the store at `path`.
pub(super) fn sqlite(
    path: &Path,
    action: &'static str,
) -> impl FnOnce(rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    move |source| StoreError::Sqlite {
        path,
        action,
        source,
    }
}
