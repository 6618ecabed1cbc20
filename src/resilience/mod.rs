//! Resilience policies of a provider binding: the circuit breaker, kept in the binding's
//! `ProviderGate` (owned by its `ProviderActor`, used on the callers' threads).
//! Everything here is a plain type driven by events and an injected clock, so it is
//! tested without a runtime.

pub(crate) mod breaker;
