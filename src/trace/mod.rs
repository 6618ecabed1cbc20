//! Provenance storage: the record model, keyed digests and locators, search planning and
//! cursors, the trace store and the trace writer. What a turn records is built by
//! `turn::capture`; replays are `turn::replay`.
//!
//! Dependencies point one way: `record` and `digest` at the bottom; `query` (pure search
//! planning) on them; `cursor` (sealing a page's position) on `query` and `digest`;
//! `store` on those; `writer` on the store.

pub(crate) mod cursor;
pub(crate) mod digest;
pub(crate) mod query;
pub mod record;
pub mod store;
pub(crate) mod upkeep;
pub mod writer;

pub use digest::{DigestKey, DigestKeyError};
