//! A bounded pool of read-only [`TraceReader`]s for the server's trace routes, so a
//! request reuses a connection instead of opening one, and a burst of requests cannot
//! open more than [`ReaderPoolSettings::readers`] connections to the store.
//!
//! - **Bound.** A semaphore holds one permit per reader. [`ReaderPool::checkout`] waits
//!   (asynchronously, on the caller's worker, holding no thread) for a permit at most
//!   [`ReaderPoolSettings::wait`], then fails with [`StoreError::ReadersBusy`]: the API
//!   answers that like any store failure, `503`.
//! - **Lazy.** Nothing is opened up front: a checkout takes an idle reader, and
//!   [`ReaderCheckout::reader`] opens a connection only when none is idle. Opening is
//!   blocking I/O, so it runs where the query runs, on the blocking pool. A failed
//!   open is that request's error; the next checkout tries again.
//! - **Return.** Dropping the checkout puts its reader back before the permit is
//!   released, so idle plus checked-out readers never exceed the bound.

use super::backend::StoreTarget;
use super::error::StoreError;
use super::read::TraceReader;
use crate::digest::keyed::DigestKey;
use std::fmt;
#[cfg(test)]
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Read connections the server keeps at most. Trace reads are operator traffic, each a
/// handful of index seeks: a few connections serve them, and more would only contend
/// for the same file.
pub(crate) const READERS: usize = 8;
/// Longest a request waits for a free reader before it is answered `503`.
pub(crate) const READER_WAIT: Duration = Duration::from_secs(2);

/// How many readers a pool holds and how long a checkout waits for one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReaderPoolSettings {
    /// Connections open at most ([`READERS`]).
    pub(crate) readers: usize,
    /// Longest wait for a free reader ([`READER_WAIT`]).
    pub(crate) wait: Duration,
}

impl Default for ReaderPoolSettings {
    fn default() -> Self {
        ReaderPoolSettings {
            readers: READERS,
            wait: READER_WAIT,
        }
    }
}

/// Shares a bounded set of read-only connections to one store. Cheap to clone.
#[derive(Clone)]
pub(crate) struct ReaderPool {
    shared: Arc<Shared>,
}

struct Shared {
    /// How errors name the store (its file, or `postgres:$ENV`).
    path: PathBuf,
    /// Where readers connect.
    target: StoreTarget,
    /// Given to every reader, so replays can open retained content.
    key: Option<DigestKey>,
    settings: ReaderPoolSettings,
    /// One permit per reader that may exist: the bound on connections.
    permits: Arc<Semaphore>,
    /// Readers not checked out, ready for the next request.
    idle: Mutex<Vec<TraceReader>>,
    /// Connections open now (idle or checked out), for tests and `Debug`.
    connections: AtomicUsize,
}

impl fmt::Debug for ReaderPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderPool")
            .field("path", &self.shared.path)
            .field("settings", &self.shared.settings)
            .field("connections", &self.connections())
            .finish_non_exhaustive()
    }
}

impl ReaderPool {
    /// A pool for the store at `path`; opens nothing yet. `key` lets readers open
    /// retained content (replays need it).
    #[cfg(test)]
    pub(crate) fn new(
        path: &Path,
        key: Option<&DigestKey>,
        settings: ReaderPoolSettings,
    ) -> ReaderPool {
        ReaderPool::on(&StoreTarget::Sqlite(path.to_path_buf()), key, settings)
    }

    /// A pool of readers of either store; opens nothing yet.
    pub(crate) fn on(
        target: &StoreTarget,
        key: Option<&DigestKey>,
        settings: ReaderPoolSettings,
    ) -> ReaderPool {
        let settings = ReaderPoolSettings {
            readers: settings.readers.max(1),
            ..settings
        };
        ReaderPool {
            shared: Arc::new(Shared {
                path: target.label(),
                target: target.clone(),
                key: key.cloned(),
                settings,
                permits: Arc::new(Semaphore::new(settings.readers)),
                idle: Mutex::new(Vec::with_capacity(settings.readers)),
                connections: AtomicUsize::new(0),
            }),
        }
    }

    /// A reader of one's own until the checkout is dropped. Waits for a free one at most
    /// the pool's `wait`, then `Err(ReadersBusy)`.
    pub(crate) async fn checkout(&self) -> Result<ReaderCheckout, StoreError> {
        let started = Instant::now();
        let wait = self.shared.settings.wait;
        let permits = Arc::clone(&self.shared.permits);
        let permit = match tokio::time::timeout(wait, permits.acquire_owned()).await {
            Ok(Ok(permit)) => permit,
            // The semaphore is never closed; a closed one is as good as busy.
            Ok(Err(_)) | Err(_) => {
                return Err(StoreError::ReadersBusy {
                    path: self.shared.path.clone(),
                    readers: self.shared.settings.readers,
                    waited: started.elapsed(),
                });
            }
        };
        let reader = self.shared.idle().pop();
        Ok(ReaderCheckout {
            shared: Arc::clone(&self.shared),
            reader,
            _permit: permit,
        })
    }

    /// Connections open now, idle or checked out; never above the pool's `readers`.
    pub(crate) fn connections(&self) -> usize {
        self.shared.connections.load(Ordering::SeqCst)
    }
}

impl Shared {
    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<TraceReader>> {
        // A panic while pushing or popping leaves a valid Vec behind.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One checked-out reader. Move it into the blocking closure that reads; dropping it
/// returns the reader to the pool.
pub(crate) struct ReaderCheckout {
    shared: Arc<Shared>,
    reader: Option<TraceReader>,
    /// Released after `Drop::drop` has put the reader back (fields drop after it).
    _permit: OwnedSemaphorePermit,
}

impl fmt::Debug for ReaderCheckout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderCheckout")
            .field("path", &self.shared.path)
            .field("open", &self.reader.is_some())
            .finish_non_exhaustive()
    }
}

impl ReaderCheckout {
    /// The reader, opening a connection if the pool had no idle one. Opening is
    /// blocking I/O: call this on the blocking pool, where the query runs.
    pub(crate) fn reader(&mut self) -> Result<&TraceReader, StoreError> {
        // A PostgreSQL connection the server closed (a restart, a failover) is replaced.
        if self
            .reader
            .as_ref()
            .is_some_and(|reader| !reader.is_usable())
        {
            self.reader = None;
            self.shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
        if self.reader.is_none() {
            let reader = self.shared.target.open_reader(self.shared.key.as_ref())?;
            self.shared.connections.fetch_add(1, Ordering::SeqCst);
            self.reader = Some(reader);
        }
        Ok(self.reader.as_ref().expect("opened above"))
    }
}

impl Drop for ReaderCheckout {
    fn drop(&mut self) {
        if let Some(reader) = self.reader.take() {
            self.shared.idle().push(reader);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::{LayerStatus, ProviderStatus};
    use crate::trace::query::SearchQuery;
    use crate::trace::store::TraceStore;
    use crate::trace::store::testing::{key, simple};

    fn store_with_turns(dir: &Path, turns: usize) -> PathBuf {
        let path = dir.join("traces.db");
        let mut store = TraceStore::open(&path, &key()).unwrap();
        let traces: Vec<_> = (0..turns)
            .map(|i| {
                simple(
                    &key(),
                    &format!("turn-{i}"),
                    "acme",
                    i as i64,
                    &[("crm", ProviderStatus::Ok)],
                    &[("profile", LayerStatus::Included)],
                )
            })
            .collect();
        store.write_batch(&traces).unwrap();
        path
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap()
    }

    fn settings(readers: usize, wait: Duration) -> ReaderPoolSettings {
        ReaderPoolSettings { readers, wait }
    }

    #[test]
    fn a_busy_pool_refuses_after_the_wait_and_reuses_returned_readers() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_turns(dir.path(), 1);
        let pool = ReaderPool::new(&path, None, settings(1, Duration::from_millis(30)));
        runtime().block_on(async {
            assert_eq!(pool.connections(), 0, "nothing is opened up front");
            let mut held = pool.checkout().await.unwrap();
            assert_eq!(held.reader().unwrap().counts().unwrap().turns, 1);
            assert_eq!(pool.connections(), 1);

            let started = Instant::now();
            let error = pool.checkout().await.unwrap_err();
            assert!(
                matches!(error, StoreError::ReadersBusy { readers: 1, waited, .. } if waited >= Duration::from_millis(30)),
                "{error}"
            );
            assert!(started.elapsed() >= Duration::from_millis(30));
            assert!(error.to_string().contains("traces.db"), "{error}");

            drop(held);
            for _ in 0..5 {
                let mut again = pool.checkout().await.unwrap();
                assert_eq!(again.reader().unwrap().counts().unwrap().turns, 1);
            }
            assert_eq!(pool.connections(), 1, "the returned reader is reused");
        });
    }

    #[test]
    fn concurrent_searches_never_open_more_than_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let path = store_with_turns(dir.path(), 30);
        let readers = 3;
        let pool = ReaderPool::new(
            &path,
            Some(&key()),
            settings(readers, Duration::from_secs(30)),
        );
        let most = Arc::new(AtomicUsize::new(0));
        let runtime = runtime();
        let searches: Vec<_> = (0..40)
            .map(|_| {
                let pool = pool.clone();
                let most = Arc::clone(&most);
                runtime.spawn(async move {
                    let mut checkout = pool.checkout().await.unwrap();
                    let pool = pool.clone();
                    tokio::task::spawn_blocking(move || {
                        let page = checkout.reader()?.search(&SearchQuery {
                            tenant: Some("acme".to_owned()),
                            limit: 10,
                            ..SearchQuery::default()
                        })?;
                        most.fetch_max(pool.connections(), Ordering::SeqCst);
                        // Hold the reader a moment, so checkouts overlap.
                        std::thread::sleep(Duration::from_millis(2));
                        Ok::<_, StoreError>(page.traces.len())
                    })
                    .await
                    .unwrap()
                })
            })
            .collect();
        for search in searches {
            assert_eq!(runtime.block_on(search).unwrap().unwrap(), 10);
        }
        assert!(most.load(Ordering::SeqCst) <= readers, "{most:?}");
        assert!(pool.connections() <= readers);
        assert!(pool.connections() >= 1);
    }

    #[test]
    fn a_failed_open_is_the_requests_error_and_frees_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.db");
        let pool = ReaderPool::new(&missing, None, settings(1, Duration::from_millis(30)));
        runtime().block_on(async {
            for _ in 0..3 {
                let mut checkout = pool.checkout().await.unwrap();
                assert!(matches!(
                    checkout.reader().unwrap_err(),
                    StoreError::Open { .. }
                ));
            }
        });
        assert_eq!(pool.connections(), 0);
        assert!(!missing.exists(), "a reader never creates a store");
    }
}
