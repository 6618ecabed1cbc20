//! The trace store's upkeep rules, as pure functions the trace writer applies: how long
//! each tenant's records are kept (`[trace] keep`, a tenant's `trace_keep`) and whether
//! the store — and the disk under it — still has room for the traces in flight
//! (`[trace] max_store_bytes`, `min_free_bytes`).

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// How often the writer looks for records past their keep, at most.
const LONGEST_CHECK: Duration = Duration::from_secs(10);
/// How often it looks, at least apart (a keep of a second is checked every 100 ms).
const SHORTEST_CHECK: Duration = Duration::from_millis(100);

/// How many bytes of store (table rows, index entries, the WAL's copy of each page) one
/// byte of encoded record becomes, at most: the reserve taken for every trace that is
/// queued or in the batch being written.
pub(crate) const DISK_BYTES_PER_RECORD_BYTE: u64 = 3;

/// How long trace records are kept: a default for every tenant, and tenants of their own.
/// `None` keeps records until an operator prunes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct RecordKeeping {
    pub(crate) default_keep: Option<Duration>,
    /// Tenants whose keep differs from the default.
    pub(crate) tenants: BTreeMap<String, Option<Duration>>,
}

impl RecordKeeping {
    /// How long `tenant`'s records are kept.
    pub(crate) fn keep_for(&self, tenant: &str) -> Option<Duration> {
        self.tenants
            .get(tenant)
            .copied()
            .unwrap_or(self.default_keep)
    }

    /// Records of `tenant` that started before this instant (ms since the epoch) are past
    /// their keep; `None` when they are kept until pruned by hand.
    pub(crate) fn cutoff_ms(&self, tenant: &str, now_ms: i64) -> Option<i64> {
        self.keep_for(tenant)
            .map(|keep| now_ms.saturating_sub(i64::try_from(keep.as_millis()).unwrap_or(i64::MAX)))
    }

    /// How often the writer checks for records past their keep: a tenth of the shortest
    /// keep, between 100 ms and 10 s; `None` when nothing is ever deleted.
    pub(crate) fn check_every(&self) -> Option<Duration> {
        self.tenants
            .values()
            .chain(std::iter::once(&self.default_keep))
            .flatten()
            .min()
            .map(|shortest| (*shortest / 10).clamp(SHORTEST_CHECK, LONGEST_CHECK))
    }
}

/// The room the store may take: its own bound and the space it leaves free on its disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct StoreBounds {
    /// Bytes of live pages (database and WAL) the store may hold; `None`: no bound of
    /// its own.
    pub(crate) max_store_bytes: Option<u64>,
    /// Bytes the filesystem under the store keeps free.
    pub(crate) min_free_bytes: u64,
}

/// What the store takes, as the writer last measured it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoreUsage {
    /// Pages in use (all pages less the free list) plus the WAL file.
    pub(crate) used_bytes: u64,
    /// Free-list pages: space inside the file that new rows take first.
    pub(crate) reusable_bytes: u64,
    /// Bytes the filesystem still gives this process; `None` when it cannot be read.
    pub(crate) disk_available: Option<u64>,
}

/// Why a trace cannot be taken: writing it would cross a bound. The message names the
/// figures and the setting, never a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoRoom {
    /// The store would grow past `max_store_bytes`.
    StoreBound { used: u64, reserved: u64, max: u64 },
    /// The disk would have less than `min_free_bytes` free.
    Disk {
        available: u64,
        reserved: u64,
        min_free: u64,
    },
}

impl NoRoom {
    /// The reason as `/readyz` names it.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            NoRoom::StoreBound { .. } => "trace_store_full",
            NoRoom::Disk { .. } => "trace_disk_full",
        }
    }
}

impl fmt::Display for NoRoom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoRoom::StoreBound {
                used,
                reserved,
                max,
            } => write!(
                f,
                "the trace store holds {used} bytes and {reserved} more are reserved for traces in flight, against trace.max_store_bytes = {max}: turns are refused until records are pruned or the bound is raised"
            ),
            NoRoom::Disk {
                available,
                reserved,
                min_free,
            } => write!(
                f,
                "the trace store's disk has {available} bytes available and {reserved} are reserved for traces in flight, against trace.min_free_bytes = {min_free}: turns are refused until space is freed"
            ),
        }
    }
}

impl StoreBounds {
    /// Whether `pending` bytes of encoded records (queued, in the batch, and the one
    /// asking) still fit: each is reserved [`DISK_BYTES_PER_RECORD_BYTE`] times over.
    /// Free-list pages count as room on the disk, since new rows fill them first.
    pub(crate) fn refusal(&self, usage: &StoreUsage, pending: u64) -> Option<NoRoom> {
        let reserved = pending.saturating_mul(DISK_BYTES_PER_RECORD_BYTE);
        if let Some(max) = self.max_store_bytes
            && usage.used_bytes.saturating_add(reserved) > max
        {
            return Some(NoRoom::StoreBound {
                used: usage.used_bytes,
                reserved,
                max,
            });
        }
        let available = usage.disk_available?.saturating_add(usage.reusable_bytes);
        if available < reserved.saturating_add(self.min_free_bytes) {
            return Some(NoRoom::Disk {
                available,
                reserved,
                min_free: self.min_free_bytes,
            });
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: Duration = Duration::from_secs(86_400);

    fn keeping() -> RecordKeeping {
        RecordKeeping {
            default_keep: Some(30 * DAY),
            tenants: [
                ("brief".to_owned(), Some(Duration::from_secs(2))),
                ("archive".to_owned(), None),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn a_tenant_keeps_its_own_period_or_the_default() {
        let keeping = keeping();
        assert_eq!(keeping.keep_for("acme"), Some(30 * DAY));
        assert_eq!(keeping.keep_for("brief"), Some(Duration::from_secs(2)));
        assert_eq!(keeping.keep_for("archive"), None);
        let now = 100 * 86_400_000;
        assert_eq!(keeping.cutoff_ms("acme", now), Some(70 * 86_400_000));
        assert_eq!(keeping.cutoff_ms("brief", now), Some(now - 2_000));
        assert_eq!(keeping.cutoff_ms("archive", now), None);
        // A keep longer than the clock has run deletes nothing, and never overflows.
        let forever = RecordKeeping {
            default_keep: Some(Duration::MAX),
            tenants: BTreeMap::new(),
        };
        assert!(forever.cutoff_ms("acme", now).unwrap() < 0);
    }

    #[test]
    fn checks_come_a_tenth_of_the_shortest_keep_apart_within_bounds() {
        assert_eq!(keeping().check_every(), Some(Duration::from_millis(200)));
        let second = RecordKeeping {
            default_keep: Some(Duration::from_millis(500)),
            tenants: BTreeMap::new(),
        };
        assert_eq!(second.check_every(), Some(SHORTEST_CHECK));
        let month = RecordKeeping {
            default_keep: Some(30 * DAY),
            tenants: BTreeMap::new(),
        };
        assert_eq!(month.check_every(), Some(LONGEST_CHECK));
        let minute = RecordKeeping {
            default_keep: Some(Duration::from_secs(60)),
            tenants: BTreeMap::new(),
        };
        assert_eq!(minute.check_every(), Some(Duration::from_secs(6)));
        let never = RecordKeeping {
            default_keep: None,
            tenants: [("archive".to_owned(), None)].into_iter().collect(),
        };
        assert_eq!(never.check_every(), None);
    }

    fn usage(used: u64, reusable: u64, disk: Option<u64>) -> StoreUsage {
        StoreUsage {
            used_bytes: used,
            reusable_bytes: reusable,
            disk_available: disk,
        }
    }

    #[test]
    fn the_store_bound_counts_what_is_in_flight_three_times() {
        let bounds = StoreBounds {
            max_store_bytes: Some(10_000),
            min_free_bytes: 0,
        };
        assert_eq!(bounds.refusal(&usage(7_000, 0, None), 1_000), None);
        let refused = bounds.refusal(&usage(7_000, 0, None), 1_001).unwrap();
        assert_eq!(
            refused,
            NoRoom::StoreBound {
                used: 7_000,
                reserved: 3_003,
                max: 10_000
            }
        );
        assert_eq!(refused.code(), "trace_store_full");
        let message = refused.to_string();
        assert!(
            message.contains("trace.max_store_bytes = 10000"),
            "{message}"
        );
        // Free-list pages are still part of the file, but not of what the store holds.
        assert_eq!(bounds.refusal(&usage(9_000, 50_000, None), 0), None);
    }

    #[test]
    fn the_disk_keeps_its_free_bytes_and_free_list_pages_count_as_room() {
        let bounds = StoreBounds {
            max_store_bytes: None,
            min_free_bytes: 1_000,
        };
        assert_eq!(bounds.refusal(&usage(1 << 30, 0, Some(4_000)), 1_000), None);
        let refused = bounds.refusal(&usage(0, 0, Some(4_000)), 1_001).unwrap();
        assert_eq!(refused.code(), "trace_disk_full");
        assert!(
            refused.to_string().contains("trace.min_free_bytes = 1000"),
            "{refused}"
        );
        assert_eq!(bounds.refusal(&usage(0, 500, Some(3_500)), 1_000), None);
        // A filesystem that cannot be measured is never the reason to refuse.
        assert_eq!(bounds.refusal(&usage(0, 0, None), u64::MAX), None);
    }
}
