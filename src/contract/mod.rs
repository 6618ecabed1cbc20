//! Wire-level vocabulary shared by every part of ctxd: statuses, provider items, the
//! `context-provider.v1` messages and the turn API's bodies. Types only; no behaviour
//! beyond (de)serialization.

mod item;
mod status;
pub(crate) mod turn;
mod wire;

pub use item::{Currentness, Item};
pub use status::{LayerReason, LayerStatus, ProviderStatus, Source};
pub use turn::{
    BudgetReport, CutAction, CutReport, ErrorBody, ErrorDetail, HandleRef, LayerReport,
    ProviderReport, RedactionCounts, SelectionReport, TurnBudget, TurnRequest, TurnResponse,
    TurnResult, VersionSource, input_map,
};
pub use wire::{
    CONTRACT, DescribeRequest, DescribeResponse, LookupRequest, LookupResponse, WireItem,
};
