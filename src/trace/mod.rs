//! Provenance storage: the record model, search planning and cursors, the trace store
//! and the trace writer. What a turn records is built by `turn::capture`, with the keyed
//! digests of `digest::keyed`; replays are `turn::replay`.
//!
//! Dependencies point one way: `record` at the bottom; `query` (pure search planning) on
//! it; `cursor` (sealing a page's position) on `query`; `store` on those; `writer` on the
//! store.

pub(crate) mod cursor;
pub(crate) mod query;
pub mod record;
pub mod store;
pub(crate) mod upkeep;
pub mod writer;
