//! The `[cache]` section of the server config: the memory the response caches of every
//! tenant may hold together, and each tenant's share of it. Which providers cache, and
//! for how long, is each binding's `cache` setting.

use crate::config::Problems;
use serde::Deserialize;

/// Bytes the response caches hold across tenants unless the config says otherwise.
const DEFAULT_MAX_TOTAL_BYTES: i64 = 64 * 1024 * 1024;
const TOTAL_BYTES_RANGE: (i64, i64) = (1024, 64 * 1024 * 1024 * 1024);

/// The response caches' memory bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CacheMemory {
    /// Bytes of kept answers across every tenant.
    pub(crate) max_total_bytes: u64,
    /// Bytes of kept answers one tenant holds (its share): beyond it that tenant's own
    /// entries are evicted, never another tenant's. An equal share of the total unless
    /// set; shares that do not fit in the total are refused.
    pub(crate) max_tenant_bytes: u64,
}

impl Default for CacheMemory {
    fn default() -> Self {
        CacheMemory {
            max_total_bytes: DEFAULT_MAX_TOTAL_BYTES as u64,
            max_tenant_bytes: DEFAULT_MAX_TOTAL_BYTES as u64,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCache {
    max_total_bytes: Option<i64>,
    max_tenant_bytes: Option<i64>,
}

/// `[cache]`: the total within its range, and every one of `tenants` shares within it.
pub(super) fn check_cache(
    problems: &mut Problems,
    raw: RawCache,
    tenants: usize,
) -> Option<CacheMemory> {
    let total = problems.int_in(
        "cache.max_total_bytes",
        raw.max_total_bytes.unwrap_or(DEFAULT_MAX_TOTAL_BYTES),
        TOTAL_BYTES_RANGE.0..=TOTAL_BYTES_RANGE.1,
    )?;
    let share = super::tenant_share(
        problems,
        "cache",
        ("max_total_bytes", total),
        raw.max_tenant_bytes,
        tenants,
        "evicts another's answers",
    )?;
    Some(CacheMemory {
        max_total_bytes: total as u64,
        max_tenant_bytes: share as u64,
    })
}
