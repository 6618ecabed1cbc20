//! How a provider connection is made: opened read-only on a `mode=ro` URI, hardened
//! (`query_only`, defensive mode, untrusted schema, an authorizer with an allowlist of
//! built-in functions) and bounded in memory.
//!
//! Memory: SQLite builds every value whole before ctxd sees it, so the response bound
//! alone comes too late (a query returning `hex(zeroblob(200000000))` once took 972 MB).
//! Two bounds apply inside SQLite:
//! - per connection, `SQLITE_LIMIT_LENGTH` = [`MAX_VALUE_BYTES`]: no TEXT or BLOB (nor a
//!   row SQLite assembles) may be longer, so a larger value fails with `SQLITE_TOOBIG`
//!   before it is built — the lookup answers `LIMIT_EXCEEDED` (`RESPONSE_TOO_LARGE`);
//! - per process (SQLite has one heap), a hard heap limit ([`reserve_heap`]): a base for
//!   the trace store plus [`HEAP_PER_CONNECTION`] for every provider connection ever
//!   opened; past it an allocation fails (`SQLITE_NOMEM`, also `RESPONSE_TOO_LARGE`) rather
//!   than growing the process. It only backs the length bound up: page caches and sorters
//!   spill to temporary files, so a connection stays well within its share.

use crate::bounds::MAX_RESPONSE_BYTES;
use rusqlite::config::DbConfig;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::limits::Limit;
use rusqlite::{Connection, OpenFlags};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::Mutex;

/// Longest TEXT or BLOB a provider connection may build or read: twice the response
/// bound, so that any value that could still be part of an answer is read, and every
/// larger one fails inside SQLite before it is built.
pub(crate) const MAX_VALUE_BYTES: i32 = 2 * MAX_RESPONSE_BYTES as i32;
/// SQLite heap for everything but provider connections: the trace store's writer and
/// readers with their page caches.
const HEAP_BASE_BYTES: i64 = 64 << 20;
/// SQLite heap each provider connection adds to the process's hard limit: its page
/// caches (main and temporary, ~2 MB each by default), a sorter's buffer, and a few
/// values of [`MAX_VALUE_BYTES`] being built, with room to spare.
pub(crate) const HEAP_PER_CONNECTION: i64 = 16 << 20;

/// Provider connections reserved so far in this process (never released: providers are
/// built once at start-up, and a limit that only grows cannot fail a running query).
static RESERVED_CONNECTIONS: Mutex<i64> = Mutex::new(0);

/// Raises SQLite's process-wide hard heap limit by `connections` provider connections'
/// share; returns the new limit in bytes.
pub(super) fn reserve_heap(connections: usize) -> i64 {
    let mut reserved = RESERVED_CONNECTIONS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *reserved += i64::try_from(connections).unwrap_or(i64::MAX / HEAP_PER_CONNECTION);
    let limit = HEAP_BASE_BYTES.saturating_add(reserved.saturating_mul(HEAP_PER_CONNECTION));
    // SAFETY: `sqlite3_hard_heap_limit64` takes a plain integer, touches no caller
    // memory and is safe to call from any thread at any time (it takes SQLite's memory
    // mutex). `PRAGMA hard_heap_limit` cannot be used instead: it only ever lowers the
    // limit, and this one grows with every provider.
    unsafe {
        rusqlite::ffi::sqlite3_hard_heap_limit64(limit);
    }
    limit
}

/// Built-in functions a query may call: deterministic scalar, aggregate, window, JSON
/// and math functions, plus the date and time functions (read-only; `'now'` reads the
/// clock). Not allowed: `random`, `randomblob`, `changes`, `last_insert_rowid`,
/// `load_extension`, `sqlite_*`, `fts3_tokenizer` and anything not listed.
#[rustfmt::skip]
const ALLOWED_FUNCTIONS: &[&str] = &[
    // core scalar
    "abs", "char", "coalesce", "concat", "concat_ws", "format", "glob", "hex", "if",
    "ifnull", "iif", "instr", "length", "like", "likelihood", "likely", "lower", "ltrim",
    "max", "min", "nullif", "octet_length", "printf", "quote", "replace", "round", "rtrim",
    "sign", "soundex", "substr", "substring", "trim", "typeof", "unhex", "unicode",
    "unistr", "unistr_quote", "unlikely", "upper", "zeroblob",
    // aggregate
    "avg", "count", "group_concat", "string_agg", "sum", "total",
    // window
    "row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile", "lag",
    "lead", "first_value", "last_value", "nth_value",
    // date and time
    "date", "time", "datetime", "julianday", "unixepoch", "strftime", "timediff",
    // JSON
    "json", "jsonb", "json_array", "jsonb_array", "json_array_length", "json_extract",
    "jsonb_extract", "json_insert", "jsonb_insert", "json_object", "jsonb_object",
    "json_patch", "jsonb_patch", "json_quote", "json_remove", "jsonb_remove",
    "json_replace", "jsonb_replace", "json_set", "jsonb_set", "json_type", "json_valid",
    "json_group_array", "jsonb_group_array", "json_group_object", "jsonb_group_object",
    "json_each", "json_tree", "json_pretty",
    // math
    "acos", "acosh", "asin", "asinh", "atan", "atan2", "atanh", "ceil", "ceiling", "cos",
    "cosh", "degrees", "exp", "floor", "ln", "log", "log10", "log2", "mod", "pi", "pow",
    "power", "radians", "sin", "sinh", "sqrt", "tan", "tanh", "trunc",
];

/// `file://<absolute path>?mode=ro`, every byte outside `[A-Za-z0-9/._~-]` percent-encoded
/// (SQLite decodes `%HH` in URI paths; `?`, `#` and `%` would otherwise end or corrupt it).
pub(super) fn read_only_uri(absolute: &Path) -> String {
    let mut uri = String::from("file://");
    for &byte in absolute.as_os_str().as_encoded_bytes() {
        if byte.is_ascii_alphanumeric() || b"/._~-".contains(&byte) {
            uri.push(char::from(byte));
        } else {
            let _ = write!(uri, "%{byte:02X}");
        }
    }
    uri.push_str("?mode=ro");
    uri
}

/// Opens the connection every lookup uses: read-only flags, `query_only`, defensive
/// mode, untrusted schema, the value length bound ([`MAX_VALUE_BYTES`]), then the
/// authorizer (last: from then on not even a `PRAGMA` prepares).
pub(super) fn connect(uri: &str) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // Reads the header: a file that is not a database fails here, with NOTADB.
    conn.query_row("PRAGMA schema_version", [], |row| row.get::<_, i64>(0))?;
    conn.pragma_update(None, "query_only", true)?;
    let query_only: bool = conn.pragma_query_value(None, "query_only", |row| row.get(0))?;
    if !query_only {
        return Err(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ERROR),
            Some("PRAGMA query_only did not take effect".to_owned()),
        ));
    }
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)?;
    conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)?;
    conn.authorizer(Some(authorize))?;
    Ok(conn)
}

/// The `post_create` hook's work: replaces the connection deadpool opened (default
/// flags, `mode=ro` URI) with one from [`connect`].
pub(super) fn harden(conn: &mut Connection, uri: &str) -> rusqlite::Result<()> {
    *conn = connect(uri)?;
    Ok(())
}

/// The authorizer: a statement prepares only if every action in it is allowed.
fn authorize(context: AuthContext<'_>) -> Authorization {
    match context.action {
        AuthAction::Select | AuthAction::Recursive => Authorization::Allow,
        // `pragma_*` tables are PRAGMAs spelled as table-valued functions.
        AuthAction::Read { table_name, .. } if is_pragma_table(table_name) => Authorization::Deny,
        AuthAction::Read { .. } => Authorization::Allow,
        AuthAction::Function { function_name }
            if ALLOWED_FUNCTIONS
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(function_name)) =>
        {
            Authorization::Allow
        }
        _ => Authorization::Deny,
    }
}

fn is_pragma_table(table_name: &str) -> bool {
    table_name
        .get(..7)
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case("pragma_"))
}
