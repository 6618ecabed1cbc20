//! Provenance: the record model, keyed digests and locators, search planning, the trace
//! store, the trace writer and reproduction.
//!
//! Dependencies point one way: `record` and `digest` at the bottom; `query` (pure search
//! planning) on them; `store` on those; `writer` and `replay` on the store.

pub mod capture;
pub mod digest;
pub mod query;
pub mod record;
pub mod replay;
pub mod store;
pub mod writer;

pub use digest::{DigestKey, DigestKeyError};
