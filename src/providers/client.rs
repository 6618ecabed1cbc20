//! The connection pool of a provider that speaks HTTP (`http`, `rest`): a client slot
//! per calling thread, so a lookup only uses connections whose I/O runs on its own
//! thread.
//!
//! A reqwest (hyper) connection is driven by a task spawned on the runtime that opened
//! it. ctxd runs one single-threaded runtime per actix worker, and a coordinator makes
//! its provider calls on its own worker's thread; with one client shared by all workers,
//! a call often borrowed a connection opened by another worker, and every request and
//! answer then crossed threads twice (a wake-up of the connection's thread, a wake-up
//! back). So a provider builds, at set-up, one client per CPU (the default worker count)
//! and hands each thread that looks up through it a slot of its own, round robin: each
//! worker keeps its own keep-alive connections, and `pool.max_idle_per_host` holds per
//! slot. Building a client is expensive (its TLS configuration), so none is built on a
//! turn's path. With more calling threads than slots, threads share a slot (correct,
//! only slower). The readiness probe has a client of its own, so the provider actors'
//! threads never take a worker's slot. The pool belongs to the provider (its actor
//! holds it, and it goes with the binding on reload).

use super::PoolSettings;
use super::http::HttpSetupError;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use thread_local::ThreadLocal;

/// A provider's HTTP clients: the lookup slots and the probe's. Cloning is cheap and
/// shares them.
#[derive(Clone)]
pub(crate) struct ClientSlots {
    shared: Arc<Slots>,
}

struct Slots {
    /// One client per slot, built at set-up.
    lookups: Vec<reqwest::Client>,
    /// The slot each calling thread was given on its first lookup.
    assigned: ThreadLocal<usize>,
    /// The next slot to give out.
    next: AtomicUsize,
    /// The readiness probe's client.
    probe: reqwest::Client,
}

impl fmt::Debug for ClientSlots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientSlots")
            .field("slots", &self.shared.lookups.len())
            .finish_non_exhaustive()
    }
}

impl ClientSlots {
    /// One lookup slot per CPU (at least one) and the probe's client, all built now,
    /// so that settings that cannot make a client fail at set-up.
    pub(crate) fn new(
        pool: &PoolSettings,
        connect_timeout: Duration,
    ) -> Result<ClientSlots, HttpSetupError> {
        let slots = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::with_slots(pool, connect_timeout, slots)
    }

    /// [`ClientSlots::new`] with `slots` lookup slots (at least one).
    pub(crate) fn with_slots(
        pool: &PoolSettings,
        connect_timeout: Duration,
        slots: usize,
    ) -> Result<ClientSlots, HttpSetupError> {
        let lookups = (0..slots.max(1))
            .map(|_| provider_client(pool, connect_timeout))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ClientSlots {
            shared: Arc::new(Slots {
                lookups,
                assigned: ThreadLocal::new(),
                next: AtomicUsize::new(0),
                probe: provider_client(pool, connect_timeout)?,
            }),
        })
    }

    /// The calling thread's lookup client: its slot, given on its first lookup.
    pub(crate) fn for_lookup(&self) -> &reqwest::Client {
        let slots = &self.shared;
        let slot = slots
            .assigned
            .get_or(|| slots.next.fetch_add(1, Ordering::Relaxed) % slots.lookups.len());
        &slots.lookups[*slot]
    }

    /// The readiness probe's client.
    pub(crate) fn for_probe(&self) -> &reqwest::Client {
        &self.shared.probe
    }
}

/// The policy every client that talks to a provider keeps (the providers' and
/// `ctxd provider-check`'s): rustls, no redirects followed, no retries, no proxy from
/// the environment.
///
/// No retries is said twice: a scope that applies to no request, and no retry allowed
/// per request. The second keeps reqwest from copying every request (its headers and
/// extensions) in case a retry were wanted; with the scope alone it copies each one
/// and then throws the copy away.
pub(crate) fn hardened_builder() -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .tls_backend_rustls()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never().max_retries_per_request(0))
        .no_proxy()
}

/// The HTTP client of a provider that speaks to an upstream over HTTP (`http`, `rest`):
/// [`hardened_builder`], the binding's pool settings, and `timeout` to connect.
fn provider_client(
    pool: &PoolSettings,
    timeout: Duration,
) -> Result<reqwest::Client, HttpSetupError> {
    hardened_builder()
        .pool_max_idle_per_host(pool.max_idle_per_host)
        .pool_idle_timeout(pool.idle_timeout)
        .connect_timeout(timeout)
        .user_agent(concat!("ctxd/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(HttpSetupError::Client)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn address(client: &reqwest::Client) -> usize {
        client as *const reqwest::Client as usize
    }

    #[test]
    fn each_thread_keeps_its_own_slot_until_the_slots_run_out() {
        let clients = ClientSlots::with_slots(&PoolSettings::default(), Duration::from_secs(1), 2)
            .expect("default settings build clients");
        let here = address(clients.for_lookup());
        assert_eq!(
            address(clients.for_lookup()),
            here,
            "a thread keeps its slot"
        );
        // Two more threads, alive at once (a finished thread's place may be reused).
        let taken = Arc::new(std::sync::Barrier::new(3));
        let others: Vec<_> = (0..2)
            .map(|_| {
                let (clients, taken) = (clients.clone(), taken.clone());
                std::thread::spawn(move || {
                    let slot = address(clients.for_lookup());
                    taken.wait();
                    (slot, address(clients.for_lookup()))
                })
            })
            .collect();
        taken.wait();
        let others: Vec<(usize, usize)> = others
            .into_iter()
            .map(|thread| thread.join().expect("the thread finishes"))
            .collect();
        assert!(others.iter().all(|(first, again)| first == again));
        let mut slots: Vec<usize> = others.iter().map(|(slot, _)| *slot).collect();
        slots.sort_unstable();
        let second = *slots
            .iter()
            .find(|&&slot| slot != here)
            .expect("a second slot");
        let mut expected = vec![here, second];
        expected.sort_unstable();
        assert_eq!(
            slots, expected,
            "the second thread gets the other slot, the third shares one, round robin"
        );
        assert_ne!(address(clients.for_probe()), here);
        assert_ne!(
            address(clients.for_probe()),
            second,
            "the probe has its own client"
        );
    }
}
