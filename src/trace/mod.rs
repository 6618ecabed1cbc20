//! Provenance: keyed digests and item locators (the trace store and its records come
//! with the trace writer).

pub mod digest;

pub use digest::{DigestKey, DigestKeyError};
