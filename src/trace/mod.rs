//! Provenance storage: the record model, keyed digests and locators, the trace store and
//! the trace writer. What a turn records is built by `turn::capture`; replays are
//! `turn::replay`.

pub mod digest;
pub mod query;
pub mod record;
pub mod store;
pub mod writer;

pub use digest::{DigestKey, DigestKeyError};
