//! The drain between a shutdown signal and the server's stop. ctxd keeps accepting
//! connections and answers `503 RUNTIME_UNAVAILABLE` (`Connection: close`) on tenant
//! routes and `/readyz`, so a load balancer sees a replica that is draining, not one that
//! is gone; requests admitted before the signal finish. The drain ends once no request
//! has been in flight or has arrived for the quiet period, or when the grace period is
//! over.

use super::ApiState;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// How often the drain looks at what is still in flight.
const DRAIN_POLL: Duration = Duration::from_millis(20);

/// Whether the drain has started, and the tenant requests still being answered.
pub(crate) struct Drain {
    /// Flipped once, at the signal; body reads wait on it so that a slow body cannot hold
    /// the drain until its own deadline.
    started_tx: watch::Sender<bool>,
    /// Tenant requests admitted (before the drain) and not yet answered: a turn still
    /// reading its body is not on any coordinator yet, but it is in flight.
    admitted: Arc<AtomicUsize>,
    /// When the last request arrived during the drain, in milliseconds since `epoch`: a
    /// client that keeps coming (a probe, a load balancer that has not noticed yet) is
    /// answered 503 until it stops, within the grace period.
    last_arrival_ms: AtomicU64,
    epoch: Instant,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            started_tx: watch::Sender::new(false),
            admitted: Arc::default(),
            last_arrival_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }
}

impl Drain {
    pub(crate) fn has_started(&self) -> bool {
        *self.started_tx.borrow()
    }

    /// Notes a request's arrival (every route but the probes): the quiet period starts
    /// after the last.
    pub(crate) fn arrived(&self) {
        let ms = self.epoch.elapsed().as_millis() as u64;
        self.last_arrival_ms.fetch_max(ms, Ordering::AcqRel);
    }

    fn last_arrival(&self) -> Instant {
        self.epoch + Duration::from_millis(self.last_arrival_ms.load(Ordering::Acquire))
    }

    /// Resolves once the drain has started.
    pub(crate) async fn started(&self) {
        let mut started_rx = self.started_tx.subscribe();
        // The sender lives as long as `self`: the wait ends only when the drain starts.
        let _ = started_rx.wait_for(|started| *started).await;
    }

    /// Counts a tenant request until the guard is dropped.
    pub(crate) fn admit(&self) -> Admitted {
        self.admitted.fetch_add(1, Ordering::AcqRel);
        Admitted(Arc::clone(&self.admitted))
    }

    fn admitted(&self) -> usize {
        self.admitted.load(Ordering::Acquire)
    }
}

/// A tenant request in flight; uncounted when dropped, however the request ends.
pub(crate) struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drained {
    /// Nothing was in flight for the whole quiet period.
    Quiet,
    /// The grace period ended with requests still in flight.
    GraceElapsed { in_flight: usize },
}

/// Starts the drain and waits until nothing — no admitted tenant request, no turn on a
/// coordinator, no new request — has been in flight or arrived for `quiet`, or until
/// `grace` has passed. The quiet period lets a client that just got its last answer come
/// back to a `503` that tells it to go elsewhere (`Retry-After`), instead of to a port
/// that closes under its new connection.
pub(crate) async fn drain(state: &ApiState, quiet: Duration, grace: Duration) -> Drained {
    state.registry.shutting_down.store(true, Ordering::SeqCst);
    state.drain.started_tx.send_replace(true);
    let deadline = Instant::now() + grace;
    let mut quiet_since: Option<Instant> = None;
    loop {
        let in_flight = state.drain.admitted() + state.coordinators.turns().await.in_flight;
        let now = Instant::now();
        if in_flight > 0 {
            quiet_since = None;
        } else {
            let since = (*quiet_since.get_or_insert(now)).max(state.drain.last_arrival());
            if now.duration_since(since) >= quiet {
                return Drained::Quiet;
            }
        }
        if now >= deadline {
            return Drained::GraceElapsed { in_flight };
        }
        tokio::time::sleep(DRAIN_POLL.min(deadline - now)).await;
    }
}
