//! A REST API's request to back off (429 with `Retry-After`): until when no call may be
//! made to it (pure reading of the header, and the shared instant every clone of a
//! provider consults before a call).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

/// The wait when a 429 carries no usable `Retry-After`.
pub(crate) const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest wait honoured: a larger `Retry-After` is cut to it, so one answer cannot
/// switch a provider off for days.
pub(crate) const MAX_RETRY_AFTER: Duration = Duration::from_secs(600);

/// How long `Retry-After` asks to wait: delay-seconds or an HTTP date, as of `now`;
/// the default when absent or unreadable; at most [`MAX_RETRY_AFTER`].
pub(crate) fn retry_after(header: Option<&str>, now: SystemTime) -> Duration {
    let Some(text) = header.map(str::trim) else {
        return DEFAULT_RETRY_AFTER;
    };
    let wait = if let Ok(seconds) = text.parse::<u64>() {
        Duration::from_secs(seconds)
    } else if let Ok(date) = httpdate::parse_http_date(text) {
        date.duration_since(now).unwrap_or(Duration::ZERO)
    } else {
        DEFAULT_RETRY_AFTER
    };
    wait.min(MAX_RETRY_AFTER)
}

/// The instant before which the API must not be called, shared by a provider's clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct Backoff {
    until: Arc<Mutex<Option<Instant>>>,
}

impl Backoff {
    fn until(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.until.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a call now must wait.
    pub(crate) fn is_waiting(&self, now: Instant) -> bool {
        self.until().is_some_and(|until| now < until)
    }

    /// No call before `now + wait` (a later instant already set stays).
    pub(crate) fn wait(&self, now: Instant, wait: Duration) {
        let mut until = self.until();
        let proposed = now + wait;
        if until.is_none_or(|current| current < proposed) {
            *until = Some(proposed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_784_000_000);
        assert_eq!(retry_after(Some("7"), now), Duration::from_secs(7));
        assert_eq!(retry_after(Some(" 0 "), now), Duration::ZERO);
        assert_eq!(retry_after(None, now), DEFAULT_RETRY_AFTER);
        assert_eq!(retry_after(Some("soon"), now), DEFAULT_RETRY_AFTER);
        assert_eq!(retry_after(Some("-3"), now), DEFAULT_RETRY_AFTER);
        assert_eq!(retry_after(Some("99999999"), now), MAX_RETRY_AFTER);
        let in_30s = httpdate::fmt_http_date(now + Duration::from_secs(30));
        assert_eq!(retry_after(Some(&in_30s), now), Duration::from_secs(30));
        let past = httpdate::fmt_http_date(now - Duration::from_secs(30));
        assert_eq!(retry_after(Some(&past), now), Duration::ZERO);
    }

    #[test]
    fn waits_only_grow_and_end() {
        let backoff = Backoff::default();
        let t0 = Instant::now();
        assert!(!backoff.is_waiting(t0));
        backoff.wait(t0, Duration::from_secs(5));
        backoff.wait(t0, Duration::from_secs(1));
        assert!(backoff.clone().is_waiting(t0 + Duration::from_secs(4)));
        assert!(!backoff.is_waiting(t0 + Duration::from_secs(5)));
    }
}
