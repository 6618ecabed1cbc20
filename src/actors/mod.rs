//! The actor runtime: a `ProviderActor` per tenant × provider binding owns the
//! binding's client or pool, its `ProviderGate` (concurrency permits and circuit
//! breaker, used on the callers' threads) and readiness; a
//! `Coordinator` per HTTP worker plans each turn, fans out its invocations under the
//! turn deadline and assembles the answer; `topology` starts them and shuts them down in
//! order. Actors hold state and move messages; the rules live in the pure cores.

pub mod coordinator;
pub mod provider;
pub mod topology;

pub use coordinator::{Coordinator, RunTurn, TurnError};
pub use provider::{Grant, Observe, ProviderActor, ProviderGate, ProviderSnapshot, Refusal};
pub use topology::{Mode, ProjectRuntime, ProviderHandle, Registry, TenantRuntime, Topology};
