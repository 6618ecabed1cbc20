//! The actor runtime, three actors over pure cores:
//! - `ProviderActor`, one per tenant × provider binding, on the provider arbiters: owns
//!   the binding's client, pool or child process, its `ProviderGate` (concurrency
//!   permits, circuit breaker, timeout — used on the callers' threads, so no actor thread
//!   caps a provider) and its readiness probe; closes everything on `Shutdown`.
//! - `Coordinator`, one per HTTP worker, on that worker's thread: runs each turn's
//!   pipeline — plan, fan-out under the turn deadline, assemble, capture — and counts
//!   its worker's turns.
//! - `TraceWriter` (`trace::writer`), on its own thread: persists provenance in batches.
//!
//! `topology` starts them and shuts them down in order; `reloading` swaps in a new set
//! of tenants and providers without a restart. Actors hold state and move
//! messages; the rules live in the pure cores.

pub(crate) mod coordinator;
pub(crate) mod provider;
pub(crate) mod reloading;
pub(crate) mod topology;

pub(crate) use coordinator::{Coordinator, CoordinatorSnapshot, RunTurn, TurnError};
pub(crate) use provider::ProviderActor;
pub(crate) use reloading::{ReloadInbox, ReloadRequests};
pub(crate) use topology::{Mode, Registry, TenantRuntime, Topology};
