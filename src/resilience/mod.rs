//! Resilience policies of a provider binding: the circuit breaker, kept in the binding's
//! `ProviderGate` (owned by its `ProviderActor`, used on the callers' threads), and the
//! response cache with request coalescing. The breaker is a plain type driven by events
//! and an injected clock, so it is tested without a runtime; the cache is plain async
//! code over a moka store, with no actor types.

pub(crate) mod breaker;
pub(crate) mod cache;
