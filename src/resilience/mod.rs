//! Resilience policies owned by provider actors: the circuit breaker (the response cache
//! comes later). Everything here is a plain type driven by events and an injected clock,
//! so it is tested without a runtime.

pub mod breaker;

pub use breaker::{
    Admission, Breaker, BreakerSnapshot, BreakerState, CallResult, HALF_OPEN_RETRY_AFTER, Ticket,
    Transition, classify,
};
