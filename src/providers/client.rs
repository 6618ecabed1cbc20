//! The connection pool of a provider that speaks HTTP (`http`, `rest`): one reqwest
//! client per calling thread, so a call only ever uses connections whose I/O runs on its
//! own thread.
//!
//! A reqwest (hyper) connection is driven by a task spawned on the runtime that opened
//! it. ctxd runs one single-threaded runtime per actix worker, and a coordinator makes
//! its provider calls on its own worker's thread; with one client shared by all workers,
//! a call often borrowed a connection opened by another worker, and every request and
//! answer then crossed threads twice (a wake-up of the connection's thread, a wake-up
//! back). Keeping a client per thread removes those wake-ups: each worker has its own
//! keep-alive connections to the provider, and `pool_max_idle_per_host` holds per worker
//! thread. The pool still belongs to the provider (its actor holds it, and it goes with
//! the binding on reload); threads that never call the provider never build a client.

use super::PoolSettings;
use super::http::HttpSetupError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use thread_local::ThreadLocal;

/// A provider's HTTP clients, one per thread that has called it. Cloning is cheap and
/// shares the clients.
#[derive(Clone)]
pub(crate) struct ThreadClients {
    clients: Arc<ThreadLocal<reqwest::Client>>,
    pool: PoolSettings,
    connect_timeout: Duration,
}

impl fmt::Debug for ThreadClients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadClients")
            .field("threads", &self.threads())
            .finish_non_exhaustive()
    }
}

impl ThreadClients {
    /// Builds the calling thread's client now, so that settings that cannot make a
    /// client fail at set-up rather than on the first call.
    pub(crate) fn new(
        pool: &PoolSettings,
        connect_timeout: Duration,
    ) -> Result<ThreadClients, HttpSetupError> {
        let clients = ThreadClients {
            clients: Arc::new(ThreadLocal::new()),
            pool: *pool,
            connect_timeout,
        };
        clients.get()?;
        Ok(clients)
    }

    /// The calling thread's client, built on its first call from this thread.
    pub(crate) fn get(&self) -> Result<&reqwest::Client, HttpSetupError> {
        self.clients
            .get_or_try(|| provider_client(&self.pool, self.connect_timeout))
    }

    /// How many threads have a client.
    pub(crate) fn threads(&self) -> usize {
        self.clients.iter().count()
    }
}

/// The HTTP client of a provider that speaks to an upstream over HTTP (`http`, `rest`):
/// rustls, no redirects followed, no retries, no proxy, the binding's pool settings, and
/// `timeout` to connect.
pub(crate) fn provider_client(
    pool: &PoolSettings,
    timeout: Duration,
) -> Result<reqwest::Client, HttpSetupError> {
    reqwest::Client::builder()
        .tls_backend_rustls()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .no_proxy()
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

    #[test]
    fn each_thread_gets_its_own_client_and_keeps_it() {
        let clients = ThreadClients::new(&PoolSettings::default(), Duration::from_secs(1))
            .expect("default settings build a client");
        assert_eq!(
            clients.threads(),
            1,
            "set-up builds the calling thread's client"
        );
        let here = clients.get().expect("built") as *const reqwest::Client;
        assert_eq!(
            clients.get().expect("built") as *const reqwest::Client,
            here,
            "a second call on the same thread reuses its client"
        );
        let other = {
            let clients = clients.clone();
            std::thread::spawn(move || clients.get().expect("built") as *const _ as usize)
                .join()
                .expect("the thread finishes")
        };
        assert_ne!(other, here as usize, "another thread builds its own client");
        assert_eq!(clients.threads(), 2);
    }
}
