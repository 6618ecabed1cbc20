//! ctxd — a runtime for context providers.
//!
//! An agent platform calls ctxd once per turn. ctxd decides which context layers the
//! turn needs (gating), fetches the external facts those layers are bound to over the
//! `context-provider.v1` contract, enforces hard bounds and safety on what comes back,
//! renders it as fenced reference data within a byte budget, and records provenance of
//! exactly what was used — never the lookup values.
//!
//! # Layout
//!
//! See docs/ARCHITECTURE.md for the data flow of a turn and which thread runs each step.
//!
//! - [`contract`] — wire vocabulary: statuses, items, `context-provider.v1` messages, the
//!   turn API's bodies (the kernel reports in these types).
//! - [`project`] — Context Projects: model, refusals, validation, Build.
//! - [`config`] — server config, tenants and Deployment Bindings: parse, then validate.
//! - [`deployment`] — every tenant's Projects and Bindings resolved together, every problem
//!   with its severity; building a binding's implementation.
//! - [`validation`] — a problem at a path, the collector of every problem, the id grammar.
//! - [`gate`] — the per-layer invocation decision (pure).
//! - [`outcome`] — what an invocation produced: items, no record, or a typed failure.
//! - [`kernel`] — from outcomes to layer statuses, blocking, budget and rendered text (pure).
//! - [`turn`] — the one turn pipeline (plan, call a source, assemble, capture, respond) and
//!   replay.
//! - [`providers`] — HTTP and SQLite providers, the endpoint rule, answer bounds, secrets.
//! - [`fixtures`] — Context Tests and Preview from fixtures.
//! - [`handles`] — material too large for a budget, behind opaque handles with bounded
//!   operations.
//! - [`digest`] — canonical JSON and SHA-256 digests.
//! - [`json`] — compact JSON for the turn path's large bodies, as serde_json writes it.
//! - [`trace`] — the provenance record model, keyed digests, the trace store and writer.
//! - [`reload`] — what a reload changes (pure): settings that need a restart, provider
//!   actors kept, started and stopped, the summary.
//! - [`actors`] — provider actors, per-worker coordinators, start and ordered shutdown.
//! - [`api`] — the HTTP API: routes, the tenant extractor, error mapping, request bounds,
//!   the drain at shutdown.
//! - [`resilience`] — the circuit breaker.
//! - [`telemetry`] — metrics and logging.
//! - [`cli`] — one module per subcommand.

pub(crate) mod actors;
#[cfg(test)]
mod alloc_meter;
#[cfg(test)]
#[global_allocator]
static TEST_ALLOCATOR: alloc_meter::CountingAllocator = alloc_meter::CountingAllocator;
pub(crate) mod api;
pub mod bounds;
pub mod cli;
pub mod config;
pub mod contract;
pub(crate) mod deployment;
pub mod digest;
pub(crate) mod env;
pub(crate) mod fixtures;
#[cfg(test)]
mod fuzz;
pub mod gate;
pub(crate) mod handles;
pub mod json;
pub mod kernel;
pub mod outcome;
pub mod project;
pub mod providers;
pub(crate) mod reload;
pub(crate) mod resilience;
pub mod secrets;
pub(crate) mod telemetry;
pub(crate) mod timestamp;
pub mod trace;
pub mod turn;
pub mod validation;
