//! The per-tenant replay rate limit: a token bucket per tenant. Replay checks guessed
//! inputs against a turn's keyed digests, which makes it an oracle for low-entropy values
//! (a 4-digit pattern is 10,000 tries); the bucket makes guessing slow. Pure except for
//! the lock: the caller passes the time.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// One bucket per tenant, refilled continuously.
pub(crate) struct ReplayLimiter {
    per_second: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    refilled_at: Instant,
}

impl ReplayLimiter {
    /// `per_minute` replays a minute, at most `burst` at once; a tenant starts full.
    pub(crate) fn new(per_minute: u32, burst: u32) -> Self {
        ReplayLimiter {
            per_second: f64::from(per_minute.max(1)) / 60.0,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::default(),
        }
    }

    /// Takes one replay from the tenant's bucket, or says how long until one is there.
    pub(crate) fn take(&self, tenant: &str, now: Instant) -> Result<(), Duration> {
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        let bucket = buckets.entry(tenant.to_owned()).or_insert(Bucket {
            tokens: self.burst,
            refilled_at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.refilled_at);
        bucket.tokens = (bucket.tokens + elapsed.as_secs_f64() * self.per_second).min(self.burst);
        bucket.refilled_at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / self.per_second,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_refill_rate() {
        let limiter = ReplayLimiter::new(60, 3);
        let start = Instant::now();
        for _ in 0..3 {
            assert_eq!(limiter.take("acme", start), Ok(()));
        }
        let wait = limiter.take("acme", start).unwrap_err();
        assert_eq!(wait, Duration::from_secs(1));
        // Half a token later, half a second to wait.
        let wait = limiter
            .take("acme", start + Duration::from_millis(500))
            .unwrap_err();
        assert!((wait.as_secs_f64() - 0.5).abs() < 1e-6, "{wait:?}");
        assert_eq!(limiter.take("acme", start + Duration::from_secs(1)), Ok(()));
        // A long pause refills up to the burst, never beyond.
        let later = start + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(limiter.take("acme", later), Ok(()));
        }
        assert!(limiter.take("acme", later).is_err());
    }

    #[test]
    fn tenants_have_their_own_buckets() {
        let limiter = ReplayLimiter::new(1, 1);
        let now = Instant::now();
        assert_eq!(limiter.take("acme", now), Ok(()));
        assert_eq!(limiter.take("acme", now), Err(Duration::from_secs(60)));
        assert_eq!(limiter.take("globex", now), Ok(()));
    }
}
