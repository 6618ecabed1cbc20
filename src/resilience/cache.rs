//! The response cache: per provider binding and opt-in (`cache.ttl`), answers kept for
//! their time to live, and identical lookups in flight coalesced into one upstream call.
//!
//! - **What is kept**: `OK` answers for `cache.ttl`; `NOT_FOUND` for
//!   `cache.not_found_ttl` (not at all when it is unset); failures never. An answer is
//!   kept as the bounds step left it (redacted, when the binding redacts).
//! - **Store**: one moka future cache per tenant ([`CacheStore`]), bounded in bytes by
//!   the tenant's share of `[cache] max_total_bytes`. A tenant's churn evicts only its own
//!   entries (moka's TinyLFU admission and LRU decide which), and the shares add up to at
//!   most the total: no tenant can push another's answers out.
//! - **Key** ([`CacheKey`]): one keyed digest — HMAC-SHA256 under a key derived from the
//!   deployment's digest key for this use alone — of the tenant, the binding file and its
//!   digest, the provider, the lookup key name, the value and the limit. The lookup value
//!   is never kept as a key: it lives only as long as the upstream call that carries it.
//!   (Items are kept as the provider sent them, and may hold what they are about.)
//! - **Coalescing** ([`ProviderCache::fetch`]): moka's `entry(..).or_try_insert_with`
//!   runs one fetch per key; concurrent callers wait for it and share its answer —
//!   failures included, which are shared but never kept. A caller that gives up drops
//!   the fetch with it, so the coordinator runs each fetch in a task of its own: a turn
//!   whose deadline passes stops waiting, and the call goes on for the others.
//! - **Age**: every kept answer remembers when the provider gave it; a caller may refuse
//!   one older than it allows ([`ProviderCache::kept`]), which is how a layer with
//!   `currentness: "required"` takes only answers within `cache.required_max_age`.
//!
//! No actor types and no metrics here: what happens is told to a [`CacheObserver`].

use crate::contract::{ProviderStatus, VersionSource};
use crate::digest::DigestKey;
use crate::outcome::Outcome;
use hmac::{Hmac, KeyInit, Mac};
use moka::Expiry;
use moka::notification::RemovalCause;
use sha2::Sha256;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// Response cache; `ttl: None` means no caching (the default), and then the other
/// settings do nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheSettings {
    /// How long an `OK` answer is kept.
    pub(crate) ttl: Option<Duration>,
    /// How long a `NOT_FOUND` answer is kept; `None`: not kept.
    pub(crate) not_found_ttl: Option<Duration>,
    /// The oldest kept answer a layer with `currentness: "required"` takes; zero (the
    /// default): such a layer's provider is always asked.
    pub(crate) required_max_age: Duration,
}

type HmacSha256 = Hmac<Sha256>;

/// Bytes counted for an entry beside its items: the key, the outcome's fields and the
/// store's own bookkeeping.
const ENTRY_OVERHEAD_BYTES: u64 = 256;
/// Bytes counted for an item beside its text.
const ITEM_OVERHEAD_BYTES: u64 = 64;

/// How a cached provider's lookup was answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A kept answer.
    Hit,
    /// This caller's fetch called the provider.
    Miss,
    /// Another caller's fetch was in flight; this one waited for it.
    Coalesced,
}

/// Why an answer left the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Removal {
    /// Its time to live passed.
    Expired,
    /// The tenant's share was full (or the answer was not admitted to it).
    Evicted,
    /// A layer that needed a fresher answer had it dropped.
    Dropped,
}

/// What a cache tells about itself; telemetry counts it.
pub(crate) trait CacheObserver: Send + Sync + 'static {
    fn looked_up(&self, provider: &str, lookup: Lookup);
    fn stored(&self, provider: &str, bytes: u32);
    fn removed(&self, provider: &str, removal: Removal, bytes: u32);
}

/// The key of one kept answer: see the module docs for what it digests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct CacheKey([u8; 32]);

/// An answer as the provider gave it, with what a later turn needs to report it.
#[derive(Debug)]
pub(crate) struct KeptAnswer {
    pub(crate) outcome: Outcome,
    pub(crate) version_source: Option<VersionSource>,
    /// When the provider answered (wall clock, for the trace).
    pub(crate) observed_at: SystemTime,
    /// When the provider answered (monotonic, for the age).
    answered_at: Instant,
    ttl: Duration,
    bytes: u32,
    provider: Arc<str>,
}

impl KeptAnswer {
    /// How long ago the provider gave this answer.
    pub(crate) fn age(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.answered_at)
    }

    /// Whether the provider gave this answer at or after `instant`.
    pub(crate) fn answered_since(&self, instant: Instant) -> bool {
        self.answered_at >= instant
    }
}

/// Every entry lives for its own time to live: `OK` and `NOT_FOUND` differ.
struct PerAnswerTtl;

impl Expiry<CacheKey, Arc<KeptAnswer>> for PerAnswerTtl {
    fn expire_after_create(
        &self,
        _key: &CacheKey,
        answer: &Arc<KeptAnswer>,
        _created_at: std::time::Instant,
    ) -> Option<Duration> {
        Some(answer.ttl)
    }
}

/// One tenant's kept answers, bounded in bytes. Clones share the store.
#[derive(Clone)]
pub(crate) struct CacheStore {
    answers: moka::future::Cache<CacheKey, Arc<KeptAnswer>>,
    observer: Arc<dyn CacheObserver>,
}

impl CacheStore {
    /// A store holding at most `max_bytes` of answers (as [`answer_bytes`] counts them).
    pub(crate) fn new(max_bytes: u64, observer: Arc<dyn CacheObserver>) -> CacheStore {
        let removals = Arc::clone(&observer);
        let answers = moka::future::Cache::builder()
            .max_capacity(max_bytes)
            .weigher(|_key: &CacheKey, answer: &Arc<KeptAnswer>| answer.bytes)
            .expire_after(PerAnswerTtl)
            .eviction_listener(move |_key, answer: Arc<KeptAnswer>, cause| {
                let removal = match cause {
                    RemovalCause::Expired => Removal::Expired,
                    RemovalCause::Size => Removal::Evicted,
                    RemovalCause::Explicit | RemovalCause::Replaced => Removal::Dropped,
                };
                removals.removed(&answer.provider, removal, answer.bytes);
            })
            .build();
        CacheStore { answers, observer }
    }

    /// Runs the store's pending upkeep (expiry, eviction, their notifications) now
    /// rather than at a later operation.
    #[cfg(test)]
    pub(crate) async fn settle(&self) {
        self.answers.run_pending_tasks().await;
    }

    #[cfg(test)]
    pub(crate) fn entry_count(&self) -> u64 {
        self.answers.entry_count()
    }
}

/// Which binding a provider cache serves: its entries are its own.
pub(crate) struct CacheScope<'a> {
    pub(crate) tenant: &'a str,
    /// The binding file, as the deployment found it: two files with the same text (and
    /// digest) may bind different databases by relative path.
    pub(crate) binding_file: &'a Path,
    pub(crate) binding_digest: &'a str,
    pub(crate) provider: &'a str,
}

/// The cache of one provider binding: its part of the tenant's store, its settings.
#[derive(Clone)]
pub(crate) struct ProviderCache {
    store: CacheStore,
    /// HMAC state that has digested the scope; each key continues a clone of it.
    keyer: HmacSha256,
    provider: Arc<str>,
    ttl: Duration,
    not_found_ttl: Option<Duration>,
    required_max_age: Duration,
}

impl ProviderCache {
    /// The binding's cache in `store`; `None` when the binding does not cache.
    pub(crate) fn new(
        store: &CacheStore,
        digest_key: &DigestKey,
        scope: &CacheScope<'_>,
        settings: &CacheSettings,
    ) -> Option<ProviderCache> {
        let ttl = settings.ttl?;
        let mut keyer = <HmacSha256 as KeyInit>::new_from_slice(&digest_key.derive("ctxd-cache"))
            .expect("HMAC accepts any key length");
        for part in [
            scope.tenant.as_bytes(),
            scope.binding_file.as_os_str().as_encoded_bytes(),
            scope.binding_digest.as_bytes(),
            scope.provider.as_bytes(),
        ] {
            keyed_part(&mut keyer, part);
        }
        Some(ProviderCache {
            store: store.clone(),
            keyer,
            provider: scope.provider.into(),
            ttl,
            not_found_ttl: settings.not_found_ttl,
            required_max_age: settings.required_max_age,
        })
    }

    /// The key of one lookup.
    pub(crate) fn key(&self, lookup_key: &str, value: &str, limit: u32) -> CacheKey {
        let mut mac = self.keyer.clone();
        keyed_part(&mut mac, lookup_key.as_bytes());
        keyed_part(&mut mac, value.as_bytes());
        keyed_part(&mut mac, &limit.to_be_bytes());
        CacheKey(mac.finalize().into_bytes().into())
    }

    /// The oldest kept answer a layer with `currentness: "required"` takes.
    pub(crate) fn required_max_age(&self) -> Duration {
        self.required_max_age
    }

    /// The kept answer for `key`, if there is one no older than `max_age` (any age when
    /// `None`). Told as a hit when found.
    pub(crate) async fn kept(
        &self,
        key: &CacheKey,
        max_age: Option<Duration>,
    ) -> Option<Arc<KeptAnswer>> {
        let answer = self.store.answers.get(key).await?;
        if max_age.is_some_and(|max| answer.age(Instant::now()) > max) {
            return None;
        }
        self.store.observer.looked_up(&self.provider, Lookup::Hit);
        Some(answer)
    }

    /// Drops the kept answer for `key`, so the next fetch asks the provider.
    pub(crate) async fn forget(&self, key: &CacheKey) {
        self.store.answers.invalidate(key).await;
    }

    /// The answer for `key`: kept by now, or fetched by `call` — once for every caller
    /// that asks while it runs. `call` answers with the outcome and where its version
    /// came from. Told as a miss when this caller's `call` ran, else as coalesced.
    ///
    /// Dropping the returned future while `call` runs drops `call`, and a waiting caller
    /// starts its own: run it in a task of its own to let it finish for the others.
    pub(crate) async fn fetch<F>(&self, key: CacheKey, call: F) -> Arc<KeptAnswer>
    where
        F: Future<Output = (Outcome, Option<VersionSource>)>,
    {
        let called = AtomicBool::new(false);
        let fetch = async {
            called.store(true, Ordering::Relaxed);
            let (outcome, version_source) = call.await;
            let answer = Arc::new(self.answer(outcome, version_source));
            // Not kept (a failure, or NOT_FOUND without its TTL): shared, not stored.
            if answer.ttl.is_zero() {
                Err(answer)
            } else {
                Ok(answer)
            }
        };
        let answer = match self
            .store
            .answers
            .entry(key)
            .or_try_insert_with(fetch)
            .await
        {
            Ok(entry) => {
                if entry.is_fresh() {
                    self.store
                        .observer
                        .stored(&self.provider, entry.value().bytes);
                }
                entry.into_value()
            }
            Err(not_kept) => Arc::clone(&*not_kept),
        };
        let lookup = if called.load(Ordering::Relaxed) {
            Lookup::Miss
        } else {
            Lookup::Coalesced
        };
        self.store.observer.looked_up(&self.provider, lookup);
        answer
    }

    /// The answer as kept, with its time to live (zero: not kept).
    fn answer(&self, outcome: Outcome, version_source: Option<VersionSource>) -> KeptAnswer {
        let ttl = match outcome.status() {
            ProviderStatus::Ok => self.ttl,
            ProviderStatus::NotFound => self.not_found_ttl.unwrap_or_default(),
            _ => Duration::ZERO,
        };
        KeptAnswer {
            bytes: answer_bytes(&outcome),
            outcome,
            version_source,
            observed_at: SystemTime::now(),
            answered_at: Instant::now(),
            ttl,
            provider: Arc::clone(&self.provider),
        }
    }
}

fn keyed_part(mac: &mut HmacSha256, part: &[u8]) {
    mac.update(&(part.len() as u64).to_be_bytes());
    mac.update(part);
}

/// What an answer weighs against the byte bound: its items' text and metadata, plus
/// fixed overheads per item and per entry.
pub(crate) fn answer_bytes(outcome: &Outcome) -> u32 {
    let items: u64 = outcome
        .items_found()
        .iter()
        .map(|item| {
            let metadata = if item.metadata.is_empty() {
                0
            } else {
                serde_json::to_string(&item.metadata).map_or(0, |text| text.len())
            };
            let text = item.id.len()
                + item.title.as_ref().map_or(0, String::len)
                + item.content.len()
                + item.updated_at.as_ref().map_or(0, String::len)
                + metadata;
            ITEM_OVERHEAD_BYTES + text as u64
        })
        .sum();
    let versions = outcome.version.as_ref().map_or(0, String::len)
        + outcome.revision.as_ref().map_or(0, String::len);
    u32::try_from(ENTRY_OVERHEAD_BYTES + items + versions as u64).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{Currentness, Item, Source};
    use crate::outcome::Failure;
    use std::sync::Mutex;
    use std::sync::atomic::AtomicUsize;

    /// Everything a store told, in order.
    #[derive(Default)]
    struct Told(Mutex<Vec<String>>);

    impl Told {
        fn all(&self) -> Vec<String> {
            self.0.lock().unwrap().clone()
        }
    }

    impl CacheObserver for Told {
        fn looked_up(&self, provider: &str, lookup: Lookup) {
            self.0
                .lock()
                .unwrap()
                .push(format!("{provider} {lookup:?}"));
        }
        fn stored(&self, provider: &str, _bytes: u32) {
            self.0.lock().unwrap().push(format!("{provider} stored"));
        }
        fn removed(&self, provider: &str, removal: Removal, _bytes: u32) {
            self.0
                .lock()
                .unwrap()
                .push(format!("{provider} {removal:?}"));
        }
    }

    fn key() -> DigestKey {
        DigestKey::from_bytes(vec![7u8; 32]).unwrap()
    }

    fn settings(ttl: u64, not_found_ttl: Option<u64>) -> CacheSettings {
        CacheSettings {
            ttl: Some(Duration::from_secs(ttl)),
            not_found_ttl: not_found_ttl.map(Duration::from_secs),
            required_max_age: Duration::from_secs(1),
        }
    }

    fn scope<'a>(tenant: &'a str, provider: &'a str) -> CacheScope<'a> {
        CacheScope {
            tenant,
            binding_file: Path::new("/srv/bindings/acme.toml"),
            binding_digest: "sha256:b1",
            provider,
        }
    }

    fn cache_in(store: &CacheStore, settings: &CacheSettings) -> ProviderCache {
        ProviderCache::new(store, &key(), &scope("acme", "crm"), settings).unwrap()
    }

    fn item(content: &str) -> Item {
        Item {
            id: "R-1".into(),
            title: None,
            content: content.into(),
            metadata: Default::default(),
            updated_at: None,
        }
    }

    fn ok() -> (Outcome, Option<VersionSource>) {
        let outcome = Outcome::answered(vec![item("x")], Currentness::Current, Source::Live);
        (outcome, Some(VersionSource::Binding))
    }

    #[test]
    fn keys_differ_by_every_part_and_never_hold_the_value() {
        let told = Arc::new(Told::default());
        let store = CacheStore::new(1 << 20, told);
        let cache = cache_in(&store, &settings(60, None));
        let base = cache.key("customerId", "CUST-1042", 5);
        assert_eq!(base, cache.key("customerId", "CUST-1042", 5));
        assert_ne!(base, cache.key("customerId", "CUST-1043", 5));
        assert_ne!(base, cache.key("customerId", "CUST-1042", 4));
        assert_ne!(base, cache.key("orderId", "CUST-1042", 5));
        let settings = settings(60, None);
        for other in [scope("globex", "crm"), scope("acme", "orders")] {
            let other = ProviderCache::new(&store, &key(), &other, &settings).unwrap();
            assert_ne!(base, other.key("customerId", "CUST-1042", 5));
        }
        let moved = CacheScope {
            binding_file: Path::new("/srv/other/acme.toml"),
            ..scope("acme", "crm")
        };
        let moved = ProviderCache::new(&store, &key(), &moved, &settings).unwrap();
        assert_ne!(base, moved.key("customerId", "CUST-1042", 5));
        assert!(!format!("{base:?}").contains("CUST"));
        let no_cache = CacheSettings::default();
        assert!(ProviderCache::new(&store, &key(), &scope("a", "b"), &no_cache).is_none());
    }

    #[tokio::test]
    async fn ok_answers_are_kept_failures_never_and_not_found_by_its_own_ttl() {
        let told = Arc::new(Told::default());
        let store = CacheStore::new(1 << 20, told.clone());
        let cache = cache_in(&store, &settings(60, None));
        let calls = AtomicUsize::new(0);
        let call = |outcome: Outcome| {
            calls.fetch_add(1, Ordering::Relaxed);
            async move { (outcome, None) }
        };
        let failed = Outcome::failed(Failure::Deadline, Source::Live);
        let missing = Outcome::not_found(Source::Live);
        for (value, outcome) in [("a", failed), ("b", missing)] {
            for _ in 0..2 {
                let key = cache.key("k", value, 5);
                let fetched = cache.fetch(key, call(outcome.clone())).await;
                assert_eq!(fetched.outcome, outcome);
                assert!(cache.kept(&key, None).await.is_none(), "{value} not kept");
            }
        }
        assert_eq!(calls.load(Ordering::Relaxed), 4);

        let key = cache.key("k", "c", 5);
        let first = cache.fetch(key, async { ok() }).await;
        let kept = cache.kept(&key, None).await.expect("an OK answer is kept");
        assert!(Arc::ptr_eq(&kept, &first));
        assert_eq!(kept.version_source, Some(VersionSource::Binding));
        let again = cache.fetch(key, async { unreachable!("kept") }).await;
        assert!(Arc::ptr_eq(&again, &first));

        // With a NOT_FOUND TTL, "no record" is kept too.
        let with_not_found = cache_in(&store, &settings(60, Some(10)));
        let key = with_not_found.key("k", "d", 5);
        let missing = async { (Outcome::not_found(Source::Live), None) };
        with_not_found.fetch(key, missing).await;
        let kept = with_not_found.kept(&key, None).await.unwrap();
        assert_eq!(kept.outcome.status(), ProviderStatus::NotFound);
        assert_eq!(kept.ttl, Duration::from_secs(10));
        assert_eq!(
            told.all()
                .iter()
                .filter(|t| t.as_str() == "crm stored")
                .count(),
            2
        );
    }

    #[tokio::test]
    async fn too_old_for_the_caller_is_not_a_hit() {
        let store = CacheStore::new(1 << 20, Arc::new(Told::default()));
        let cache = cache_in(&store, &settings(60, None));
        let key = cache.key("k", "v", 5);
        let asked = Instant::now();
        cache.fetch(key, async { ok() }).await;
        assert!(
            cache
                .kept(&key, Some(Duration::from_secs(60)))
                .await
                .is_some()
        );
        tokio::time::sleep(Duration::from_millis(30)).await;
        let kept = cache.kept(&key, None).await.unwrap();
        assert!(kept.answered_since(asked));
        assert!(!kept.answered_since(Instant::now()));
        assert!(kept.age(Instant::now()) >= Duration::from_millis(30));
        assert!(
            cache
                .kept(&key, Some(Duration::from_millis(10)))
                .await
                .is_none()
        );
        cache.forget(&key).await;
        assert!(cache.kept(&key, None).await.is_none());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn concurrent_fetches_of_one_key_call_once() {
        let told = Arc::new(Told::default());
        let store = CacheStore::new(1 << 20, told.clone());
        let cache = cache_in(&store, &settings(60, None));
        let key = cache.key("k", "v", 5);
        let calls = AtomicUsize::new(0);
        let fetches = (0..50).map(|_| {
            cache.fetch(key, async {
                calls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
                ok()
            })
        });
        let fetched = futures_util::future::join_all(fetches).await;
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        assert!(fetched.iter().all(|f| Arc::ptr_eq(f, &fetched[0])));
        let told = told.all();
        assert_eq!(told.iter().filter(|t| *t == "crm Miss").count(), 1);
        assert_eq!(told.iter().filter(|t| *t == "crm Coalesced").count(), 49);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_failure_in_flight_is_shared_with_its_waiters_and_not_kept() {
        let told = Arc::new(Told::default());
        let store = CacheStore::new(1 << 20, told.clone());
        let cache = cache_in(&store, &settings(60, None));
        let key = cache.key("k", "v", 5);
        let fetches = (0..5).map(|_| {
            cache.fetch(key, async {
                tokio::time::sleep(Duration::from_millis(10)).await;
                (
                    Outcome::failed(Failure::HttpStatus(503), Source::Live),
                    None,
                )
            })
        });
        let fetched = futures_util::future::join_all(fetches).await;
        assert!(
            fetched
                .iter()
                .all(|f| f.outcome.detail() == Some("HTTP_503"))
        );
        assert_eq!(told.all().iter().filter(|t| *t == "crm Miss").count(), 1);
        assert!(cache.kept(&key, None).await.is_none());
    }

    #[tokio::test]
    async fn the_byte_bound_holds_and_evictions_are_told() {
        let told = Arc::new(Told::default());
        let big = "x".repeat(10_000);
        let answer = || {
            let outcome = Outcome::answered(vec![item(&big)], Currentness::Current, Source::Live);
            (outcome, None)
        };
        let weight = u64::from(answer_bytes(&answer().0));
        let store = CacheStore::new(weight * 3, told.clone());
        let cache = cache_in(&store, &settings(60, None));
        for value in 0..20 {
            let key = cache.key("k", &value.to_string(), 5);
            cache.fetch(key, async { answer() }).await;
            store.settle().await;
        }
        assert!(store.entry_count() <= 3, "{}", store.entry_count());
        assert!(store.answers.weighted_size() <= weight * 3);
        assert!(
            told.all().iter().any(|t| t == "crm Evicted"),
            "{:?}",
            told.all()
        );
    }

    #[test]
    fn answer_weight_grows_with_content() {
        let small = Outcome::answered(vec![item("x")], Currentness::Current, Source::Live);
        let large = Outcome::answered(
            vec![item(&"x".repeat(5000))],
            Currentness::Current,
            Source::Live,
        );
        assert!(answer_bytes(&large) >= answer_bytes(&small) + 4999);
        assert_eq!(
            u64::from(answer_bytes(&Outcome::not_found(Source::Live))),
            ENTRY_OVERHEAD_BYTES
        );
    }
}
