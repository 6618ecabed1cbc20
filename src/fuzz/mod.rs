//! Fuzzing of every parser that takes outside bytes: a provider's lookup and describe
//! answers, a turn request, a Project, a Deployment Binding, a server config and a handle
//! operation. Runs on the stable toolchain, inside `cargo test`:
//!
//! - **short mode** (every `cargo test`): [`SHORT_INPUTS`] inputs per target, plus every
//!   saved finding in `src/fuzz/findings/` replayed as a regression test;
//! - **long mode** (by hand, not in CI): `CTXD_FUZZ_INPUTS=1000000 cargo test --release
//!   --lib fuzz::long -- --ignored --nocapture` — one million inputs per target by
//!   default, with executions per second printed per target.
//!
//! Inputs come from a small mutation engine ([`mutate`]) over seed corpora: the shipped
//! demo files and hand-written answers, mutated by byte flips, interesting bytes,
//! deletions, duplications, splices between seeds, dictionary tokens (JSON and TOML
//! syntax, the formats' own keys, deep nesting, huge numbers, control characters) and,
//! for JSON, structural mutations of the parsed tree. The generator is a seeded xorshift,
//! so a run is reproducible from its seed.
//!
//! Each target checks more than "does not panic": the invariants of its parser — a
//! provider answer never yields more items than the limit or an item over the item
//! bound; errors name a path; a handle operation never returns more than its limits.
//! A panic is caught, the input saved under `target/fuzz-findings/<target>/`, and the
//! run fails naming the file: such an input belongs in `src/fuzz/findings/` as a
//! regression.

mod engine;
mod targets;

/// Inputs per target in the short mode, in every `cargo test`.
pub(crate) const SHORT_INPUTS: usize = 1_500;
/// Inputs per target in the long mode unless `CTXD_FUZZ_INPUTS` says otherwise.
pub(crate) const LONG_INPUTS: usize = 1_000_000;
