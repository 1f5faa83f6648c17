//! Time as the lease rules know it: instants of the database server's clock, and the
//! durations that travel with them in milliseconds.

use std::fmt;
use std::time::Duration;

/// A point on the database server's clock, in microseconds since the Unix epoch.
///
/// It is only ever read from the database; tenure never builds one from the local clock.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DbTime(pub i64);

impl DbTime {
    /// This instant plus `ms` milliseconds, saturating at the end of `i64` (never wrapping
    /// into the past). The store refuses durations beyond `validate::MAX_DURATION` (100
    /// years) before they reach the model, so the saturation is a backstop, not a rule.
    pub fn plus_ms(self, ms: u64) -> DbTime {
        let us = i64::try_from(ms)
            .ok()
            .and_then(|ms| ms.checked_mul(1000))
            .unwrap_or(i64::MAX);
        DbTime(self.0.saturating_add(us))
    }

    /// This instant minus `ms` milliseconds, saturating at the start of `i64`.
    pub fn minus_ms(self, ms: u64) -> DbTime {
        let us = i64::try_from(ms)
            .ok()
            .and_then(|ms| ms.checked_mul(1000))
            .unwrap_or(i64::MAX);
        DbTime(self.0.saturating_sub(us))
    }

    /// Milliseconds from `earlier` to `self`, or 0 when `earlier` is later.
    pub fn ms_since(self, earlier: DbTime) -> u64 {
        u64::try_from(self.0.saturating_sub(earlier.0)).unwrap_or(0) / 1000
    }

    /// Whether something that ends at this instant (a lease, a session, any row with an
    /// expiry) has ended by `now`: it lives while `now` is before its end, and is over from its
    /// end on. The one rule of expiry, for the model and for every layer.
    pub fn ended_by(self, now: DbTime) -> bool {
        self <= now
    }

    /// As a chrono UTC timestamp, for display.
    pub fn to_utc(self) -> chrono::DateTime<chrono::Utc> {
        chrono::DateTime::from_timestamp_micros(self.0).unwrap_or_default()
    }
}

impl fmt::Display for DbTime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.to_utc().format("%Y-%m-%d %H:%M:%S%.6fZ"))
    }
}

/// `d` in whole milliseconds, saturating (for durations already bounded where they were given:
/// a ttl, a lock-delay). A duration that comes from a caller unchecked goes through
/// `validate::duration_ms` instead.
pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
