//! The in-memory handle store (`[handles] store = "memory"`, the default), shared by every
//! worker of one process.
//!
//! - **Owner.** One [`MemoryStore`] per process, in the `Registry`; its state sits behind
//!   one `Mutex` held only for map updates (never while an operation runs: operations
//!   get an `Arc` of the material and run unlocked).
//! - **Bounds.** Each tenant has its own share, `max_tenant_bytes`: registering evicts
//!   that tenant's least-recently-used handles (an operation or a registration is a use)
//!   until the new material fits its share — never another tenant's, so no tenant's
//!   traffic can make another's handles stale. The shares fit inside `max_total_bytes`
//!   (the config refuses more tenants × share than that); should they not, a
//!   registration that the tenant's own handles cannot make room for is refused, still
//!   without evicting anyone else's. Tombstones are capped per tenant too,
//!   `max_tenant_tombstones`: a burial beyond it forgets that tenant's oldest (a
//!   forgotten id answers `unknown_handle`), so no tenant's deletes, expiries or
//!   evictions can turn another's `stale_handle` into `unknown_handle`; the shares fit
//!   inside `max_tombstones`.
//! - **Expiry.** A handle lives `ttl` from its registration (use does not extend it).
//!   Every call first sweeps what has expired (an ordered index, so a sweep costs only
//!   what it removes); with no traffic at all, expired material stays until the next
//!   call, still within `max_total_bytes`. No timer is needed.
//! - **Tombstones.** A deleted, expired or evicted handle leaves a tombstone with its
//!   tenant, version, reason and next sequence number, so later operations fail
//!   structurally (`stale_handle` with the deleted version) and keep a monotonic
//!   per-handle sequence.
//! - **Tenants.** A handle or tombstone of another tenant is `unknown_handle`.
//! - The clock is injected (`now: Instant` on every call), so TTL tests need no sleeping.

use super::error::StaleReason;
use super::{Capabilities, HANDLE_ID_PREFIX, HandleError, HandleMaterial, HandleSettings};
use crate::contract::HandleRef;
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

/// Every handle's version: material never changes (see the module docs of `handles`).
pub(crate) const VERSION: u64 = 1;

/// What the store answered for one operation or delete on a handle: `T` is what the
/// attempt gets when the handle is live and current (the material to operate on, or
/// `()` for a deletion that happened).
#[derive(Debug)]
pub(crate) enum Attempt<T> {
    /// Nothing of the caller's tenant: an id never registered, another tenant's handle
    /// or tombstone, or a tombstone already forgotten. Not sequenced, so not traced;
    /// answered `unknown_handle`.
    Unknown,
    /// A handle the tenant holds, live or tombstoned: the attempt is traced under the
    /// handle's next sequence number, whatever its outcome.
    Held {
        /// The per-handle sequence number given to this attempt.
        sequence: u64,
        /// The handle's (or tombstone's) version.
        version: u64,
        /// What to operate on, or why the handle refuses (`stale_handle`).
        outcome: Result<T, HandleError>,
    },
}

struct Entry {
    tenant: String,
    version: u64,
    material: Arc<HandleMaterial>,
    bytes: usize,
    expires: Instant,
    /// Key in `by_expiry`: `(expires, serial)`.
    serial: u64,
    /// Key in `lru`.
    last_used: u64,
    next_sequence: u64,
}

struct Tombstone {
    tenant: String,
    version: u64,
    reason: StaleReason,
    next_sequence: u64,
}

#[derive(Default)]
struct Inner {
    live: HashMap<String, Entry>,
    /// Per tenant, its live ids by last use, oldest first: the eviction order, which
    /// never crosses tenants.
    lru: HashMap<String, BTreeMap<u64, String>>,
    /// Per tenant, the bytes of its live handles: what counts against its share.
    tenant_bytes: HashMap<String, usize>,
    /// Live ids by expiry, soonest first: the sweep order.
    by_expiry: BTreeMap<(Instant, u64), String>,
    /// Monotonic counter for `lru` keys and `by_expiry` serials.
    clock: u64,
    total_bytes: usize,
    tombstones: HashMap<String, Tombstone>,
    /// Per tenant, its tombstone ids, oldest first: the forgetting order, which never
    /// crosses tenants.
    tombstone_order: HashMap<String, VecDeque<String>>,
}

/// The store. `Send + Sync`; shared by every worker through the `Registry`.
pub(crate) struct MemoryStore {
    settings: HandleSettings,
    /// All state: held only for map updates, never while an operation runs.
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.lock();
        f.debug_struct("MemoryStore")
            .field("live", &inner.live.len())
            .field("total_bytes", &inner.total_bytes)
            .field("tombstones", &inner.tombstones.len())
            .finish_non_exhaustive()
    }
}

/// Counts, for tests and health.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg(test)]
pub(crate) struct StoreSnapshot {
    pub(crate) live: usize,
    pub(crate) total_bytes: usize,
    pub(crate) tombstones: usize,
}

impl Inner {
    fn tenant_bytes(&self, tenant: &str) -> usize {
        self.tenant_bytes.get(tenant).copied().unwrap_or(0)
    }

    /// The tenant's least recently used live handle, taken out of its LRU order.
    fn pop_oldest(&mut self, tenant: &str) -> Option<String> {
        let order = self.lru.get_mut(tenant)?;
        let (_, id) = order.pop_first()?;
        if order.is_empty() {
            self.lru.remove(tenant);
        }
        Some(id)
    }
}

impl MemoryStore {
    pub(crate) fn new(settings: HandleSettings) -> MemoryStore {
        super::HandleOperationFinished::zero_for_every_operation();
        MemoryStore {
            settings,
            inner: Mutex::new(Inner::default()),
        }
    }

    pub(crate) fn settings(&self) -> &HandleSettings {
        &self.settings
    }

    pub(crate) fn capabilities(&self) -> Capabilities {
        Capabilities::DECLARED
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves maps that are still consistent enough
        // to serve (every update is a few inserts/removes); keep serving.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Registers material for a tenant under a new id, returning its handle (version 1).
    #[cfg(test)]
    pub(crate) fn register(
        &self,
        tenant: &str,
        material: HandleMaterial,
        now: Instant,
    ) -> Result<HandleRef, HandleError> {
        self.register_as(tenant, &new_id(), material, now)
    }

    /// Registers material for a tenant under `id` — one from [`new_id`], decided before
    /// the turn's text was final — returning its handle (version 1). Evicts the tenant's
    /// own least recently used handles until the material fits its share, leaving
    /// tombstones; never another tenant's. Err, evicting nothing, if the material is
    /// larger than the share, or than what the store can hold for the tenant, or if the
    /// id is taken.
    pub(crate) fn register_as(
        &self,
        tenant: &str,
        id: &str,
        material: HandleMaterial,
        now: Instant,
    ) -> Result<HandleRef, HandleError> {
        let bytes = material.bytes();
        let cap = self.settings.max_tenant_bytes;
        if bytes > cap {
            return Err(HandleError::MaterialTooLarge { bytes, cap });
        }
        let mut inner = self.lock();
        // 128 random bits never collide in practice; the check makes it certain.
        if inner.live.contains_key(id) || inner.tombstones.contains_key(id) {
            return Err(HandleError::InvalidArgument {
                field: None,
                message: "the handle id is already taken".to_owned(),
            });
        }
        self.sweep_locked(&mut inner, now);
        // What the other tenants hold is theirs: only this tenant's handles make room.
        let others = inner.total_bytes - inner.tenant_bytes(tenant);
        let room = self.settings.max_total_bytes.saturating_sub(others);
        if bytes > room {
            return Err(HandleError::MaterialTooLarge { bytes, cap: room });
        }
        let limit = cap.min(room);
        while inner.tenant_bytes(tenant) + bytes > limit {
            let Some(oldest) = inner.pop_oldest(tenant) else {
                break;
            };
            self.bury(&mut inner, &oldest, StaleReason::Evicted);
        }
        inner.clock += 1;
        let tick = inner.clock;
        let expires = later(now, self.settings.ttl);
        let id = id.to_owned();
        inner
            .lru
            .entry(tenant.to_owned())
            .or_default()
            .insert(tick, id.clone());
        inner.by_expiry.insert((expires, tick), id.clone());
        inner.total_bytes += bytes;
        *inner.tenant_bytes.entry(tenant.to_owned()).or_default() += bytes;
        inner.live.insert(
            id.clone(),
            Entry {
                tenant: tenant.to_owned(),
                version: VERSION,
                material: Arc::new(material),
                bytes,
                expires,
                serial: tick,
                last_used: tick,
                next_sequence: 1,
            },
        );
        Ok(HandleRef {
            id,
            version: VERSION,
        })
    }

    /// Starts an operation on `id` at `version` for `tenant`: the material, and the
    /// sequence number the operation is traced under. A use for the LRU. `version: None`
    /// (a request whose version did not parse) skips the version check: the attempt is
    /// only sequenced and traced, its request error answered.
    pub(crate) fn begin(
        &self,
        tenant: &str,
        id: &str,
        version: Option<u64>,
        now: Instant,
    ) -> Attempt<Arc<HandleMaterial>> {
        let mut inner = self.lock();
        self.sweep_locked(&mut inner, now);
        inner.clock += 1;
        let tick = inner.clock;
        let Inner { live, lru, .. } = &mut *inner;
        if let Some(entry) = live.get_mut(id).filter(|e| e.tenant == tenant) {
            let sequence = entry.next_sequence;
            entry.next_sequence += 1;
            if let Some(order) = lru.get_mut(tenant) {
                order.remove(&entry.last_used);
                order.insert(tick, id.to_owned());
            }
            entry.last_used = tick;
            let outcome = match version {
                Some(version) if version != entry.version => Err(HandleError::StaleHandle {
                    id: id.to_owned(),
                    reason: StaleReason::WrongVersion,
                    requested: Some(version),
                    version: entry.version,
                }),
                _ => Ok(Arc::clone(&entry.material)),
            };
            return Attempt::Held {
                sequence,
                version: entry.version,
                outcome,
            };
        }
        Self::gone(&mut inner, tenant, id, version)
    }

    /// Deletes a handle, leaving a tombstone. Deleting a tombstone is `stale_handle`
    /// (with the deleted version).
    pub(crate) fn delete(&self, tenant: &str, id: &str, now: Instant) -> Attempt<()> {
        let mut inner = self.lock();
        self.sweep_locked(&mut inner, now);
        if inner.live.get(id).is_some_and(|e| e.tenant == tenant) {
            let (version, sequence) = self.bury(&mut inner, id, StaleReason::Deleted);
            // The delete takes the handle's next sequence number; its tombstone (unless
            // the tenant keeps none) gives the one after.
            if let Some(tombstone) = inner.tombstones.get_mut(id) {
                tombstone.next_sequence += 1;
            }
            return Attempt::Held {
                sequence,
                version,
                outcome: Ok(()),
            };
        }
        Self::gone(&mut inner, tenant, id, None)
    }

    /// Whether the tenant holds this id, live or as a tombstone (trace listings answer
    /// `unknown_handle` for anything else).
    pub(crate) fn is_known(&self, tenant: &str, id: &str) -> bool {
        let inner = self.lock();
        inner.live.get(id).is_some_and(|e| e.tenant == tenant)
            || inner.tombstones.get(id).is_some_and(|t| t.tenant == tenant)
    }

    /// Buries whatever has expired by `now`; returns how many handles.
    #[cfg(test)]
    pub(crate) fn sweep(&self, now: Instant) -> usize {
        let mut inner = self.lock();
        self.sweep_locked(&mut inner, now)
    }

    #[cfg(test)]
    pub(crate) fn snapshot(&self) -> StoreSnapshot {
        let inner = self.lock();
        StoreSnapshot {
            live: inner.live.len(),
            total_bytes: inner.total_bytes,
            tombstones: inner.tombstones.len(),
        }
    }

    /// The answer for an id that is not live for the tenant: its tombstone, or unknown.
    fn gone<T>(inner: &mut Inner, tenant: &str, id: &str, requested: Option<u64>) -> Attempt<T> {
        match inner.tombstones.get_mut(id).filter(|t| t.tenant == tenant) {
            Some(tombstone) => {
                let sequence = tombstone.next_sequence;
                tombstone.next_sequence += 1;
                Attempt::Held {
                    sequence,
                    version: tombstone.version,
                    outcome: Err(HandleError::StaleHandle {
                        id: id.to_owned(),
                        reason: tombstone.reason,
                        requested,
                        version: tombstone.version,
                    }),
                }
            }
            None => Attempt::Unknown,
        }
    }

    fn sweep_locked(&self, inner: &mut Inner, now: Instant) -> usize {
        let mut swept = 0;
        while let Some(entry) = inner.by_expiry.first_entry() {
            if entry.key().0 > now {
                break;
            }
            let id = entry.remove();
            self.bury(inner, &id, StaleReason::Expired);
            swept += 1;
        }
        swept
    }

    /// Removes a live handle from every index and leaves its tombstone, forgetting the
    /// tenant's oldest beyond its share; returns its version and next sequence number.
    fn bury(&self, inner: &mut Inner, id: &str, reason: StaleReason) -> (u64, u64) {
        let entry = inner
            .live
            .remove(id)
            .expect("indexes only hold live handles");
        if let Some(order) = inner.lru.get_mut(&entry.tenant) {
            order.remove(&entry.last_used);
            if order.is_empty() {
                inner.lru.remove(&entry.tenant);
            }
        }
        inner.by_expiry.remove(&(entry.expires, entry.serial));
        inner.total_bytes -= entry.bytes;
        if let Some(held) = inner.tenant_bytes.get_mut(&entry.tenant) {
            *held -= entry.bytes;
            if *held == 0 {
                inner.tenant_bytes.remove(&entry.tenant);
            }
        }
        let order = inner
            .tombstone_order
            .entry(entry.tenant.clone())
            .or_default();
        order.push_back(id.to_owned());
        let mut forgotten = Vec::new();
        while order.len() > self.settings.max_tenant_tombstones {
            match order.pop_front() {
                Some(oldest) => forgotten.push(oldest),
                None => break,
            }
        }
        if order.is_empty() {
            inner.tombstone_order.remove(&entry.tenant);
        }
        for oldest in forgotten {
            inner.tombstones.remove(&oldest);
        }
        let buried = (entry.version, entry.next_sequence);
        if inner.tombstone_order.contains_key(&entry.tenant) {
            inner.tombstones.insert(
                id.to_owned(),
                Tombstone {
                    tenant: entry.tenant,
                    version: entry.version,
                    reason,
                    next_sequence: entry.next_sequence,
                },
            );
        }
        buried
    }
}

/// `h_` + 32 lowercase hex from 128 random bits.
pub(crate) fn new_id() -> String {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).expect("the operating system provides randomness");
    format!("{HANDLE_ID_PREFIX}{}", hex::encode(bytes))
}

/// `from + by`, or far in the future when that overflows.
fn later(from: Instant, by: std::time::Duration) -> Instant {
    from.checked_add(by)
        .unwrap_or_else(|| from + std::time::Duration::from_secs(86_400 * 365 * 30))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handles::{HANDLE_ID_LEN, is_valid_id};
    use std::time::Duration;

    fn settings(max_total_bytes: usize, max_tombstones: usize) -> HandleSettings {
        HandleSettings {
            ttl: Duration::from_secs(60),
            max_total_bytes,
            max_tenant_bytes: max_total_bytes,
            max_tombstones,
            max_tenant_tombstones: max_tombstones,
            ..HandleSettings::default()
        }
    }

    /// A store of `max_total_bytes` in which each tenant holds at most `share`.
    fn shared(max_total_bytes: usize, share: usize) -> HandleSettings {
        HandleSettings {
            max_tenant_bytes: share,
            ..settings(max_total_bytes, 10)
        }
    }

    fn text(n: usize) -> HandleMaterial {
        HandleMaterial::Text("x".repeat(n))
    }

    fn stale<T: std::fmt::Debug>(attempt: &Attempt<T>) -> (StaleReason, u64) {
        match attempt {
            Attempt::Held {
                outcome:
                    Err(HandleError::StaleHandle {
                        reason, version, ..
                    }),
                ..
            } => (*reason, *version),
            other => panic!("expected stale_handle, got {other:?}"),
        }
    }

    fn unknown<T>(attempt: &Attempt<T>) -> bool {
        matches!(attempt, Attempt::Unknown)
    }

    fn sequence<T>(attempt: &Attempt<T>) -> Option<u64> {
        match attempt {
            Attempt::Held { sequence, .. } => Some(*sequence),
            Attempt::Unknown => None,
        }
    }

    /// The outcome of an attempt on a handle the tenant holds.
    fn outcome<T: std::fmt::Debug>(attempt: Attempt<T>) -> Result<T, HandleError> {
        match attempt {
            Attempt::Held { outcome, .. } => outcome,
            Attempt::Unknown => panic!("expected a held handle, got nothing of the tenant's"),
        }
    }

    #[test]
    fn ids_are_random_and_well_formed() {
        let store = MemoryStore::new(settings(1000, 10));
        let now = Instant::now();
        let a = store.register("acme", text(1), now).unwrap();
        let b = store.register("acme", text(1), now).unwrap();
        assert_ne!(a.id, b.id);
        assert_eq!(a.id.len(), HANDLE_ID_LEN);
        assert!(is_valid_id(&a.id) && is_valid_id(&b.id));
        assert_eq!(a.version, 1);
    }

    #[test]
    fn operations_get_the_material_and_a_monotonic_sequence() {
        let store = MemoryStore::new(settings(1000, 10));
        let now = Instant::now();
        let handle = store
            .register("acme", HandleMaterial::Text("hello".into()), now)
            .unwrap();
        for expected in 1..=3 {
            let attempt = store.begin("acme", &handle.id, Some(1), now);
            assert_eq!(sequence(&attempt), Some(expected));
            assert_eq!(
                *outcome(attempt).unwrap(),
                HandleMaterial::Text("hello".into())
            );
        }
        // A wrong version is stale with the current version, and still sequenced.
        let wrong = store.begin("acme", &handle.id, Some(2), now);
        assert_eq!(stale(&wrong), (StaleReason::WrongVersion, 1));
        assert_eq!(sequence(&wrong), Some(4));
    }

    #[test]
    fn another_tenant_sees_nothing() {
        let store = MemoryStore::new(settings(1000, 10));
        let now = Instant::now();
        let handle = store.register("acme", text(3), now).unwrap();
        assert!(unknown(&store.begin("globex", &handle.id, Some(1), now)));
        assert!(unknown(&store.delete("globex", &handle.id, now)));
        assert!(!store.is_known("globex", &handle.id));
        // Its tombstone is just as invisible.
        outcome(store.delete("acme", &handle.id, now)).unwrap();
        assert!(unknown(&store.begin("globex", &handle.id, Some(1), now)));
        assert!(unknown(&store.begin("globex", &handle.id, Some(2), now)));
        assert!(store.is_known("acme", &handle.id));
    }

    #[test]
    fn delete_leaves_a_tombstone_and_deleting_twice_is_stale() {
        let store = MemoryStore::new(settings(1000, 10));
        let now = Instant::now();
        let handle = store.register("acme", text(10), now).unwrap();
        assert_eq!(
            sequence(&store.begin("acme", &handle.id, Some(1), now)),
            Some(1)
        );
        let deleted = store.delete("acme", &handle.id, now);
        assert_eq!(sequence(&deleted), Some(2));
        assert!(outcome(deleted).is_ok());
        assert_eq!(store.snapshot().total_bytes, 0);
        let again = store.delete("acme", &handle.id, now);
        assert_eq!(stale(&again), (StaleReason::Deleted, 1));
        assert_eq!(sequence(&again), Some(3));
        let op = store.begin("acme", &handle.id, Some(1), now);
        assert_eq!(stale(&op), (StaleReason::Deleted, 1));
        assert_eq!(sequence(&op), Some(4), "the sequence survives deletion");
        assert!(unknown(&store.begin(
            "acme",
            &format!("h_{}", "0".repeat(32)),
            Some(1),
            now
        )));
    }

    #[test]
    fn handles_expire_after_the_ttl_with_an_injected_clock() {
        let store = MemoryStore::new(settings(1000, 10));
        let t0 = Instant::now();
        let first = store.register("acme", text(10), t0).unwrap();
        let second = store
            .register("acme", text(20), t0 + Duration::from_secs(30))
            .unwrap();
        let just_before = t0 + Duration::from_secs(60) - Duration::from_millis(1);
        assert!(outcome(store.begin("acme", &first.id, Some(1), just_before)).is_ok());
        // Use does not extend the TTL.
        let at_ttl = t0 + Duration::from_secs(60);
        assert_eq!(
            stale(&store.begin("acme", &first.id, Some(1), at_ttl)),
            (StaleReason::Expired, 1)
        );
        assert_eq!(
            store.snapshot().total_bytes,
            20,
            "the expired bytes are freed"
        );
        assert!(outcome(store.begin("acme", &second.id, Some(1), at_ttl)).is_ok());
        assert_eq!(store.sweep(t0 + Duration::from_secs(90)), 1);
        assert_eq!(
            store.snapshot(),
            StoreSnapshot {
                live: 0,
                total_bytes: 0,
                tombstones: 2
            }
        );
        assert_eq!(
            stale(&store.delete("acme", &second.id, t0 + Duration::from_secs(91))),
            (StaleReason::Expired, 1)
        );
    }

    #[test]
    fn a_tenant_evicts_only_its_own_least_recently_used_handles() {
        let store = MemoryStore::new(shared(200, 100));
        let now = Instant::now();
        let a = store.register("acme", text(40), now).unwrap();
        let b = store.register("globex", text(40), now).unwrap();
        let c = store.register("acme", text(40), now).unwrap();
        // `a` is used, so `c` is now acme's least recently used.
        outcome(store.begin("acme", &a.id, Some(1), now)).unwrap();
        let d = store.register("acme", text(40), now).unwrap();
        assert_eq!(
            stale(&store.begin("acme", &c.id, Some(1), now)),
            (StaleReason::Evicted, 1)
        );
        for (tenant, handle) in [("acme", &a), ("acme", &d), ("globex", &b)] {
            assert!(outcome(store.begin(tenant, &handle.id, Some(1), now)).is_ok());
        }
        assert_eq!(store.snapshot().total_bytes, 120);
        // One handle as large as the share evicts everything else of the tenant's.
        let whole = store.register("acme", text(100), now).unwrap();
        assert_eq!(
            store.snapshot(),
            StoreSnapshot {
                live: 2,
                total_bytes: 140,
                tombstones: 3
            }
        );
        assert!(outcome(store.begin("acme", &whole.id, Some(1), now)).is_ok());
        assert!(outcome(store.begin("globex", &b.id, Some(1), now)).is_ok());
        assert_eq!(
            store.register("acme", text(101), now).unwrap_err(),
            HandleError::MaterialTooLarge {
                bytes: 101,
                cap: 100
            }
        );
        assert!(
            outcome(store.begin("acme", &whole.id, Some(1), now)).is_ok(),
            "a refused registration evicts nothing"
        );
    }

    #[test]
    fn no_tenant_evicts_another_even_when_shares_overcommit_the_store() {
        // Two tenants whose shares (100 each) add up to more than the store (150).
        let store = MemoryStore::new(shared(150, 100));
        let now = Instant::now();
        let theirs = store.register("globex", text(90), now).unwrap();
        // The store holds 60 more at most: acme's 70 is refused, evicting nothing.
        assert_eq!(
            store.register("acme", text(70), now).unwrap_err(),
            HandleError::MaterialTooLarge { bytes: 70, cap: 60 }
        );
        let mine = store.register("acme", text(60), now).unwrap();
        // Full: acme's next registration takes the room of acme's own handle.
        let next = store.register("acme", text(50), now).unwrap();
        assert_eq!(
            stale(&store.begin("acme", &mine.id, Some(1), now)),
            (StaleReason::Evicted, 1)
        );
        assert!(outcome(store.begin("acme", &next.id, Some(1), now)).is_ok());
        // Any number of oversize or full-store registrations later, globex's is live.
        for n in [10, 59, 60, 61, 100, 101, 1000] {
            let _ = store.register("acme", text(n), now);
        }
        assert!(outcome(store.begin("globex", &theirs.id, Some(1), now)).is_ok());
    }

    #[test]
    fn tombstones_are_bounded_and_forgotten_ids_become_unknown() {
        let store = MemoryStore::new(settings(1000, 2));
        let now = Instant::now();
        let ids: Vec<String> = (0..3)
            .map(|_| store.register("acme", text(1), now).unwrap().id)
            .collect();
        for id in &ids {
            outcome(store.delete("acme", id, now)).unwrap();
        }
        assert_eq!(store.snapshot().tombstones, 2);
        assert!(unknown(&store.begin("acme", &ids[0], Some(1), now)));
        assert!(!store.is_known("acme", &ids[0]));
        assert_eq!(
            stale(&store.begin("acme", &ids[2], Some(1), now)),
            (StaleReason::Deleted, 1)
        );
    }

    #[test]
    fn one_tenants_burials_never_forget_anothers_tombstones() {
        let store = MemoryStore::new(HandleSettings {
            max_tombstones: 6,
            max_tenant_tombstones: 3,
            ..settings(100_000, 6)
        });
        let t0 = Instant::now();
        let theirs = store.register("globex", text(1), t0).unwrap();
        outcome(store.delete("globex", &theirs.id, t0)).unwrap();
        // acme buries many: deleted, expired and evicted.
        let mut mine = Vec::new();
        for _ in 0..20 {
            let handle = store.register("acme", text(1), t0).unwrap();
            outcome(store.delete("acme", &handle.id, t0)).unwrap();
            mine.push(handle.id);
        }
        for _ in 0..5 {
            store.register("acme", text(1), t0).unwrap();
        }
        assert_eq!(store.sweep(t0 + Duration::from_secs(61)), 5);
        assert_eq!(
            stale(&store.begin("globex", &theirs.id, Some(1), t0)),
            (StaleReason::Deleted, 1),
            "globex's tombstone outlives acme's burials"
        );
        assert!(store.is_known("globex", &theirs.id));
        // acme keeps its own newest three, no more.
        assert_eq!(store.snapshot().tombstones, 1 + 3);
        assert!(unknown(&store.begin("acme", &mine[19], Some(1), t0)));
    }

    #[test]
    fn a_tenant_share_of_no_tombstones_forgets_at_once_and_deletes_still_answer() {
        let store = MemoryStore::new(HandleSettings {
            max_tenant_tombstones: 0,
            ..settings(1000, 0)
        });
        let now = Instant::now();
        let handle = store.register("acme", text(1), now).unwrap();
        let deleted = store.delete("acme", &handle.id, now);
        assert_eq!(sequence(&deleted), Some(1));
        assert!(outcome(deleted).is_ok());
        assert!(unknown(&store.begin("acme", &handle.id, Some(1), now)));
        assert_eq!(store.snapshot().tombstones, 0);
    }

    #[test]
    fn the_store_is_shared_across_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<MemoryStore>();
        let store = Arc::new(MemoryStore::new(settings(1_000_000, 10)));
        let now = Instant::now();
        let handle = store.register("acme", text(10), now).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let store = Arc::clone(&store);
                let id = handle.id.clone();
                std::thread::spawn(move || {
                    (0..100)
                        .map(|_| sequence(&store.begin("acme", &id, Some(1), now)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<u64> = threads
            .into_iter()
            .flat_map(|t| t.join().unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(
            all,
            (1..=400).collect::<Vec<_>>(),
            "no sequence given twice"
        );
    }
}
