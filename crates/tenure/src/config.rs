//! The client-side timing model: ttl, renew interval, safety margin, database timeout.

use crate::error::{Error, Result};
use std::time::Duration;

/// Validated timings of an elector. Build with [`Timing::builder`] or [`Timing::from_ttl`].
///
/// The holder believes it leads only until its *local deadline*: the monotonic instant just
/// before it sent its last successful campaign, plus `ttl − safety_margin`. The database set
/// the expiry from a later instant, so the belief always ends first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    ttl: Duration,
    renew_interval: Duration,
    safety_margin: Duration,
    db_timeout: Duration,
    max_jitter: Duration,
}

impl Default for Timing {
    /// ttl 10 s, renew every 2.5 s, margin 1 s, database timeout 2 s.
    fn default() -> Self {
        Timing::from_ttl(Duration::from_secs(10)).expect("the defaults are safe")
    }
}

impl Timing {
    /// A builder starting from the defaults for a 10 s ttl.
    pub fn builder() -> TimingBuilder {
        TimingBuilder::default()
    }

    /// The defaults for `ttl`: renew every ttl/4, margin ttl/10, database timeout ttl/5.
    ///
    /// # Errors
    /// [`Error::UnsafeTiming`] if `ttl` is below 50 ms or above one day.
    pub fn from_ttl(ttl: Duration) -> Result<Timing> {
        Timing::builder().ttl(ttl).build()
    }

    /// How long a lease lasts without renewal.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }
    /// How often the holder renews, and the longest a follower waits between attempts.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }
    /// How much earlier than the database's expiry the holder stops believing it leads.
    pub fn safety_margin(&self) -> Duration {
        self.safety_margin
    }
    /// Bound on each database call; a timeout counts as failure. An elector (or a lock) makes
    /// its calls through a handle on its [`Store`](crate::Store) bounded by this one value
    /// ([`Store::with_timeout`](crate::Store::with_timeout)), not the store's own timeout.
    pub fn db_timeout(&self) -> Duration {
        self.db_timeout
    }
    /// The largest random delay added to a follower's next attempt.
    pub fn max_jitter(&self) -> Duration {
        self.max_jitter
    }
    /// A random delay in `0..=max_jitter`, so that followers do not all try at once.
    pub fn jitter(&self) -> Duration {
        let max = u64::try_from(self.max_jitter.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(crate::rng::next_u64() % (max + 1))
    }

    /// How long an elector that released waits before it campaigns again: `renew_interval +
    /// db_timeout`. A polling follower tries at least every renew interval and each try takes
    /// at most the database timeout, so a follower whose round trip is under about two thirds
    /// of the database timeout takes over first, even if the releaser's round trip is shorter.
    pub fn release_hold_off(&self) -> Duration {
        self.renew_interval + self.db_timeout
    }

    /// The longest a belief lasts: its local deadline is at most this long after the instant
    /// its campaign was sent (`ttl − safety_margin`; earlier when the database says the row
    /// has less left).
    pub fn max_belief(&self) -> Duration {
        self.ttl - self.safety_margin
    }
}

/// Builds a [`Timing`]; unset values default from the ttl.
#[derive(Clone, Debug, Default)]
pub struct TimingBuilder {
    ttl: Option<Duration>,
    renew_interval: Option<Duration>,
    safety_margin: Option<Duration>,
    db_timeout: Option<Duration>,
}

impl TimingBuilder {
    /// Lease ttl (D). Default 10 s.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }
    /// Renew interval. Default D/4.
    pub fn renew_interval(mut self, d: Duration) -> Self {
        self.renew_interval = Some(d);
        self
    }
    /// Safety margin. Default D/10.
    pub fn safety_margin(mut self, d: Duration) -> Self {
        self.safety_margin = Some(d);
        self
    }
    /// Per-call database timeout. Default D/5.
    pub fn db_timeout(mut self, d: Duration) -> Self {
        self.db_timeout = Some(d);
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// [`Error::UnsafeTiming`], naming the values, when `renew_interval + db_timeout +
    /// safety_margin >= ttl` (a renewal could answer after the holder's belief ended, or the
    /// belief could outlast the database's expiry), when a value is zero, or when the ttl is
    /// outside 50 ms ..= 1 day.
    pub fn build(self) -> Result<Timing> {
        let ttl = self.ttl.unwrap_or(Duration::from_secs(10));
        if ttl < Duration::from_millis(50) || ttl > Duration::from_secs(24 * 3600) {
            return Err(Error::UnsafeTiming(format!(
                "ttl {ttl:?} must be between 50ms and 24h"
            )));
        }
        let renew_interval = self.renew_interval.unwrap_or(ttl / 4);
        let safety_margin = self.safety_margin.unwrap_or(ttl / 10);
        let db_timeout = self.db_timeout.unwrap_or(ttl / 5);
        for (what, value) in [
            ("renew_interval", renew_interval),
            ("safety_margin", safety_margin),
            ("db_timeout", db_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::UnsafeTiming(format!(
                    "{what} must be greater than zero"
                )));
            }
        }
        let sum = renew_interval + db_timeout + safety_margin;
        if sum >= ttl {
            return Err(Error::UnsafeTiming(format!(
                "renew_interval ({renew_interval:?}) + db_timeout ({db_timeout:?}) + \
                 safety_margin ({safety_margin:?}) = {sum:?} must be less than ttl ({ttl:?}); \
                 lower them or raise the ttl"
            )));
        }
        Ok(Timing {
            ttl,
            renew_interval,
            safety_margin,
            db_timeout,
            max_jitter: (ttl / 20).min(Duration::from_millis(100)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_the_ttl() {
        let t = Timing::default();
        assert_eq!(t.ttl(), Duration::from_secs(10));
        assert_eq!(t.renew_interval(), Duration::from_millis(2500));
        assert_eq!(t.safety_margin(), Duration::from_secs(1));
        assert_eq!(t.db_timeout(), Duration::from_secs(2));
        assert_eq!(t.max_belief(), Duration::from_secs(9));
    }

    #[test]
    fn unsafe_combinations_are_named() {
        let err = Timing::builder()
            .ttl(Duration::from_secs(4))
            .renew_interval(Duration::from_secs(2))
            .db_timeout(Duration::from_secs(2))
            .build()
            .unwrap_err()
            .to_string();
        assert!(err.contains("renew_interval (2s)"), "{err}");
        assert!(err.contains("db_timeout (2s)"), "{err}");
        assert!(err.contains("ttl (4s)"), "{err}");
        assert!(Timing::from_ttl(Duration::from_millis(10)).is_err());
        let zero = Timing::builder().safety_margin(Duration::ZERO).build();
        assert!(zero.unwrap_err().to_string().contains("safety_margin"));
    }
}
