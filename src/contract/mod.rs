//! Wire-level vocabulary shared by every part of ctxd: statuses, provider items and the
//! `context-provider.v1` messages. Types only; no behaviour beyond (de)serialization.

mod item;
mod status;
mod wire;

pub use item::{Currentness, Item};
pub use status::{LayerReason, LayerStatus, ProviderStatus, Source};
pub use wire::{
    CONTRACT, DescribeRequest, DescribeResponse, LookupRequest, LookupResponse, WireItem,
};
