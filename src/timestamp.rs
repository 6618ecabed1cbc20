//! RFC 3339 UTC timestamps, written by the `time` crate: an item's `updatedAt` from Unix
//! seconds (SQLite and PostgreSQL columns), and the millisecond timestamps of trace
//! records.

use std::time::SystemTime;
use time::OffsetDateTime;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;

const SECONDS: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second]Z");
const MILLISECONDS: &[BorrowedFormatItem<'_>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:3]Z");

/// Unix seconds as an RFC 3339 UTC timestamp, for years 0000 to 9999.
pub(crate) fn rfc3339_utc(seconds: i64) -> Option<String> {
    let time = OffsetDateTime::from_unix_timestamp(seconds).ok()?;
    if !(0..=9999).contains(&time.year()) {
        return None;
    }
    time.format(SECONDS).ok()
}

/// `time` as an RFC 3339 UTC timestamp with milliseconds (`2026-12-06T06:40:00.123Z`).
pub(crate) fn rfc3339_millis(time: SystemTime) -> String {
    OffsetDateTime::from(time)
        .format(MILLISECONDS)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn seconds_cover_years_0000_to_9999() {
        assert_eq!(rfc3339_utc(0).as_deref(), Some("1970-01-01T00:00:00Z"));
        assert_eq!(
            rfc3339_utc(-62_167_219_200).as_deref(),
            Some("0000-01-01T00:00:00Z")
        );
        assert_eq!(
            rfc3339_utc(253_402_300_799).as_deref(),
            Some("9999-12-31T23:59:59Z")
        );
        assert_eq!(rfc3339_utc(-1).as_deref(), Some("1969-12-31T23:59:59Z"));
        for outside in [-62_167_219_201, 253_402_300_800, i64::MIN, i64::MAX] {
            assert_eq!(rfc3339_utc(outside), None, "{outside}");
        }
    }

    #[test]
    fn milliseconds_are_written_as_humantime_writes_them() {
        let mut millis: u64 = 0;
        while millis < 4_102_444_800_000 {
            let time = UNIX_EPOCH + Duration::from_millis(millis);
            assert_eq!(
                rfc3339_millis(time),
                humantime::format_rfc3339_millis(time).to_string()
            );
            millis = millis * 7 / 3 + 86_399_937;
        }
        let within = UNIX_EPOCH + Duration::from_nanos(1_764_998_400_123_999_999);
        assert_eq!(rfc3339_millis(within), "2025-12-06T05:20:00.123Z");
    }
}
