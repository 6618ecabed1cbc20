//! Provider implementations and the rules every provider answer passes: bounds and
//! secret scanning.

pub mod bounds;
pub mod secrets;
