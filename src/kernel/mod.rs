//! The Context Kernel: from gating decisions and provider outcomes to layer statuses, the
//! blocked rule, currentness, the byte budget and the rendered reference text. Pure and
//! deterministic: the same plan, outcomes, budget and nonce always give the same result.

mod assemble;
mod render;

pub use assemble::{HandleSink, NoHandles, Rendering, assemble, assemble_with};
pub(crate) use render::{fence_nonce_from_seed, random_nonce};

#[cfg(test)]
mod tests;
