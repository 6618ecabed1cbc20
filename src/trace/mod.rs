//! Provenance: the record model, keyed digests and locators, the trace store, the
//! trace writer and reproduction.

pub mod capture;
pub mod digest;
pub mod query;
pub mod record;
pub mod replay;
pub mod store;
pub mod writer;

pub use digest::{DigestKey, DigestKeyError};
