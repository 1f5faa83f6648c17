//! A campaign's standing among the candidates of its name: its own priority and settle time,
//! and its rivals as a registry shows them at the decision's instant. With a standing, the
//! lease rules prefer the best live candidate; without one (locks, plain store operations)
//! they are exactly as before.
//!
//! - **Failover picks the best live candidate.** A vacant or expired lease is not taken while
//!   a rival of higher priority is live and was seen within the longest gap between two of
//!   its campaigns (its renew interval plus its database timeout): it will take the lease at
//!   its next campaign. The hold-off is bounded by that gap after the rival was last seen, so a
//!   rival that is registered but cannot win (crashed, or cut off from the database) stalls a
//!   failover by one renew interval and one database timeout at most.
//! - **The preferred leader comes back.** When the holder renews and a rival of higher priority
//!   has been live for the settle time, the holder hands over to it — the graceful handover
//!   path: the lease is reserved for the rival (`handover_to`), the holder steps down, stops its
//!   work and releases, and only then can the rival acquire (term + 1; no overlap).
//! - Equal priorities change nothing; observers are never rivals.

use super::DbTime;

/// Another candidate of the name, as the registry shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rival {
    /// Its candidate id.
    pub candidate: String,
    /// Higher is preferred.
    pub priority: i32,
    /// Whether it only follows (never campaigns).
    pub observer: bool,
    /// When its current run of registrations began (it has been live since).
    pub since: DbTime,
    /// When it last registered (campaigned).
    pub seen_at: DbTime,
    /// Until when it counts as live without registering again (its ttl after `seen_at`).
    pub expires_at: DbTime,
    /// The longest a live candidate goes between two campaigns: its renew interval plus its
    /// database timeout (one campaign's round trip at most).
    pub renew_ms: u64,
}

/// The standing of the candidate that campaigns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing<'a> {
    /// Its own priority.
    pub priority: i32,
    /// How long a better rival must have been live before this holder hands over to it.
    pub settle_ms: u64,
    /// The other candidates of the name (live or not: the rules look at their times).
    pub rivals: &'a [Rival],
}

impl Standing<'_> {
    /// A rival that a free lease waits for at `now`: of higher priority, live, and seen within
    /// its renew interval.
    pub(super) fn holds_off(&self, now: DbTime) -> Option<&Rival> {
        self.better(now)
            .filter(|r| r.seen_at.plus_ms(r.renew_ms) > now)
            .max_by(|a, b| rank(a, b))
    }

    /// The rival a holder hands over to at `now`: the best of higher priority that has been
    /// live for the settle time.
    pub(super) fn preferred(&self, now: DbTime) -> Option<&Rival> {
        self.better(now)
            .filter(|r| r.since.plus_ms(self.settle_ms) <= now)
            .max_by(|a, b| rank(a, b))
    }

    fn better(&self, now: DbTime) -> impl Iterator<Item = &Rival> {
        let mine = self.priority;
        self.rivals
            .iter()
            .filter(move |r| !r.observer && r.priority > mine && r.expires_at > now)
    }
}

/// Higher priority first; among equals the one live longest, then the smaller id (a total
/// order, so that every holder picks the same).
fn rank(a: &Rival, b: &Rival) -> std::cmp::Ordering {
    a.priority
        .cmp(&b.priority)
        .then(b.since.cmp(&a.since))
        .then(b.candidate.cmp(&a.candidate))
}
