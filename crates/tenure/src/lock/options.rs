//! How a lock is held ([`LockOptions`]) and how each of its terms is given back
//! ([`GiveBack`]), checked once before anything is written.

use crate::config::Timing;
use crate::error::Result;
use crate::model::Purpose;
use crate::validate;
use std::time::Duration;

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOptions {
    pub(super) ttl: Duration,
    at_least: Duration,
    pub(super) keep_alive: bool,
    record_every_cycle: bool,
}

impl Default for LockOptions {
    /// At most 60 s without renewal, no minimum, kept alive while the guard lives, only
    /// notable transitions in the history.
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(60),
            at_least: Duration::ZERO,
            keep_alive: true,
            record_every_cycle: false,
        }
    }
}

impl LockOptions {
    /// The lease ttl: how long a crashed holder keeps the lock (ShedLock's `lockAtMostFor`).
    pub fn ttl(mut self, d: Duration) -> Self {
        self.ttl = d;
        self
    }
    /// The name stays unavailable until `acquired_at + at_least`, even after a release
    /// (ShedLock's `lockAtLeastFor`). At most [`MAX_DURATION`](crate::validate::MAX_DURATION)
    /// (100 years): a longer one, `Duration::MAX` included, makes every lock call fail with
    /// [`Error::Invalid`](crate::error::Error::Invalid) before anything is written.
    pub fn at_least(mut self, d: Duration) -> Self {
        self.at_least = d;
        self
    }
    /// Renew while the guard lives (default), or let the lock expire after `ttl`.
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.keep_alive = on;
        self
    }
    /// Record every acquisition and release of the lock in the history (`tenure history`),
    /// as an election does. Off by default: a lock taken and released in a loop would write a
    /// history row at every turn, which costs each cycle two statements. Recorded either way:
    /// a takeover of a holder whose lease expired unreleased (`taken_over_expired`), an
    /// acquisition by handover, a release that gives a reason
    /// ([`LockGuard::release_because`](super::LockGuard::release_because)), and every admin event (demote, handover, pause,
    /// resume). The fencing term rises by one per tenure whether or not it is recorded.
    pub fn record_every_cycle(mut self, on: bool) -> Self {
        self.record_every_cycle = on;
        self
    }
    /// The lock's timing and how its terms are given back, or why these options are refused.
    pub(super) fn check(&self) -> Result<(Timing, GiveBack)> {
        let timing = Timing::from_ttl(self.ttl)?;
        let give_back = GiveBack {
            at_least_ms: validate::duration_ms("at least", self.at_least)?,
            purpose: self.purpose(),
        };
        Ok((timing, give_back))
    }
    pub(super) fn purpose(&self) -> Purpose {
        Purpose::Lock {
            record_every_cycle: self.record_every_cycle,
        }
    }
}

/// How a term of a lock is given back: nobody may start before `acquired_at + at_least`, and
/// the purpose says whether the release is recorded.
#[derive(Clone, Copy, Debug)]
pub(super) struct GiveBack {
    /// Checked against [`MAX_DURATION`](crate::validate::MAX_DURATION) by
    /// [`LockOptions::check`].
    pub(super) at_least_ms: u64,
    pub(super) purpose: Purpose,
}

impl GiveBack {
    /// For a term granted too late to believe in: no `at_least`, nobody used it.
    pub(super) fn now_free(self) -> GiveBack {
        GiveBack {
            at_least_ms: 0,
            ..self
        }
    }
}
