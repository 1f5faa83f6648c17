//! A campaign's standing among the candidates of its name: its own priority, settle time,
//! incarnation and back-off, and its rivals as a registry shows them at the decision's
//! instant. With a standing, the lease rules prefer the best live candidate; without one
//! (locks, plain store operations) they are exactly as before.
//!
//! - **A priority counts once its candidate has proved it can hold the lead.** A candidate is
//!   *campaigning* while its registration shows it campaigned within its cadence (its renew
//!   interval plus its database timeout: the longest a live candidate goes between two
//!   campaigns). Its priority *counts* once it has been seen campaigning across the settle
//!   time in its current incarnation (a restart, with the same id or another, settles again)
//!   and while it is not backing off (its tenures kept ending by expiry: see [`Backoff`]).
//! - **Failover picks the best candidate whose priority counts.** Of two campaigning
//!   candidates of different priorities, judged with the lower one's settle time: if the
//!   higher one counts, it takes a free lease and the lower one waits; if only the lower one
//!   counts (the higher one is new, or backs off), the lower one takes it and the higher one
//!   waits — a healthy candidate leads while a new or failing better one proves itself; if
//!   neither counts (a cold start), the higher one takes it. So two candidates never wait for
//!   each other. Equal priorities never wait. A rival that stops campaigning (crashed,
//!   stopped, cut off) stalls a failover by its cadence after it was last seen at most.
//! - **The preferred leader comes back.** When the holder renews and a campaigning rival of
//!   higher priority counts, the holder hands over to it — the graceful handover path: the
//!   lease is reserved for the rival (`handover_to`), the holder steps down, stops its work and
//!   releases, and only then can the rival acquire (term + 1; no overlap). A holder that backs
//!   off hands over to any campaigning rival of another priority that counts. The tenure an
//!   operator handed to a candidate is not handed over for priority (`chosen_after`).
//! - **A reservation ends with its target's cadence.** Once the target of a reservation has
//!   shown no sign of life (a campaign, or a keep-alive while it holds off) within its cadence,
//!   the reservation has lapsed for every campaign with a standing: a dead better candidate
//!   costs the leader that gap, never a ttl.
//! - Observers are never rivals.

use super::{DbTime, Epoch};

/// The longest back-off, in ttls of the candidate that backs off.
pub(super) const MAX_BACKOFF_TTLS: u64 = 32;

/// Another candidate of the name, as the registry shows it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rival {
    /// Its candidate id.
    pub candidate: String,
    /// Higher is preferred.
    pub priority: i32,
    /// Whether it only follows (never campaigns).
    pub observer: bool,
    /// When its current incarnation's run of registrations began.
    pub since: DbTime,
    /// When it last registered (campaigned).
    pub seen_at: DbTime,
    /// Until when it counts as live without registering again (its ttl after its last sign
    /// of life).
    pub expires_at: DbTime,
    /// Its last sign of life: its last campaign (`seen_at`), or a later keep-alive while it
    /// holds off (after a demote) — alive, not campaigning.
    pub alive_at: DbTime,
    /// The longest a live candidate goes between two campaigns: its renew interval plus its
    /// database timeout (one campaign's round trip at most).
    pub renew_ms: u64,
    /// Its own settle time: how long a candidate of higher priority must have campaigned
    /// before it gives way to that one.
    pub settle_ms: u64,
    /// Until when its priority does not count: its tenures kept ending by expiry.
    pub backoff_until: Option<DbTime>,
}

/// The standing of the candidate that campaigns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Standing<'a> {
    /// Its own priority.
    pub priority: i32,
    /// How long a candidate must have been seen campaigning (in one incarnation) before its
    /// priority counts, as this candidate judges it (for itself and its rivals).
    pub settle_ms: u64,
    /// When this candidate's current incarnation began registering.
    pub since: DbTime,
    /// Until when its own priority does not count: its tenures kept ending by expiry.
    pub backoff_until: Option<DbTime>,
    /// The lease's term when an operator handed the name to this candidate: the first tenure
    /// after that term, if it is this candidate's, is not handed over for priority.
    pub chosen_after: Option<u64>,
    /// The other candidates of the name (live ones, and the target of a reservation whatever
    /// its state: the rules look at their times).
    pub rivals: &'a [Rival],
}

impl Standing<'_> {
    /// A rival that a free lease waits for at `now`: a campaigning one that takes it instead
    /// (see the module docs). Each side of a pair judges with the settle time of the lower
    /// one, so that two candidates never wait for each other.
    pub(super) fn holds_off(&self, now: DbTime) -> Option<&Rival> {
        let backing_off = backs_off(self.backoff_until, now);
        self.campaigning(now)
            .filter(|r| {
                if r.priority > self.priority {
                    // Unless this one's own priority counts and the better one's does not
                    // over it yet: then the better one defers to this one.
                    self.rival_counts(r, now) || !self.counts(now)
                } else if r.priority < self.priority {
                    // Deference: the lower one's priority counts (by its own settle time), and
                    // this one's does not over it (by the same) — it takes the lease.
                    let theirs = r.since.plus_ms(r.settle_ms) <= r.seen_at
                        && !backs_off(r.backoff_until, now);
                    let mine = self.since.plus_ms(r.settle_ms) <= now && !backing_off;
                    theirs && !mine
                } else {
                    false
                }
            })
            .max_by(|a, b| rank(a, b))
    }

    /// The rival the holder of `term` hands over to at `now`: the best campaigning one whose
    /// priority counts and is higher — or, while the holder backs off, any other — unless an
    /// operator chose the holder for this tenure.
    pub(super) fn preferred(&self, now: DbTime, term: u64, epoch: Epoch) -> Option<&Rival> {
        if self.chosen_for(term, epoch) {
            return None;
        }
        let backing_off = backs_off(self.backoff_until, now);
        self.campaigning(now)
            .filter(|r| self.rival_counts(r, now))
            .filter(|r| r.priority > self.priority || (backing_off && r.priority != self.priority))
            .max_by(|a, b| rank(a, b))
    }

    /// Whether this candidate backs off at `now`.
    pub(super) fn backs_off(&self, now: DbTime) -> bool {
        backs_off(self.backoff_until, now)
    }

    /// Whether a reservation for `target` has lapsed at `now`: the registry shows no sign of
    /// life of the target (a campaign, or a keep-alive while it holds off) within its cadence.
    /// A target the registry does not know (a process not yet started) keeps the reservation
    /// for its usual time.
    pub(super) fn abandoned(&self, target: &str, now: DbTime) -> bool {
        self.rivals
            .iter()
            .any(|r| r.candidate == target && r.alive_at.plus_ms(r.renew_ms) <= now)
    }

    /// Whether the tenure `term` is the one an operator handed to this candidate: the first
    /// term of `epoch` after `chosen_after`.
    fn chosen_for(&self, term: u64, epoch: Epoch) -> bool {
        self.chosen_after
            .and_then(|after| epoch.next_term(after))
            .is_some_and(|first| first == term)
    }

    /// Whether this candidate's own priority counts at `now` (it campaigns now).
    fn counts(&self, now: DbTime) -> bool {
        self.since.plus_ms(self.settle_ms) <= now && !backs_off(self.backoff_until, now)
    }

    /// Whether `r`'s priority counts at `now`: seen campaigning across the settle time in its
    /// incarnation, and not backing off.
    fn rival_counts(&self, r: &Rival, now: DbTime) -> bool {
        r.since.plus_ms(self.settle_ms) <= r.seen_at && !backs_off(r.backoff_until, now)
    }

    /// The rivals that campaign at `now`: not observers, live, and seen within their cadence.
    fn campaigning(&self, now: DbTime) -> impl Iterator<Item = &Rival> {
        self.rivals.iter().filter(move |r| {
            !r.observer && r.expires_at > now && r.seen_at.plus_ms(r.renew_ms) > now
        })
    }
}

fn backs_off(until: Option<DbTime>, now: DbTime) -> bool {
    until.is_some_and(|until| until > now)
}

/// Higher priority first; among equals the one live longest, then the smaller id (a total
/// order, so that every holder picks the same).
fn rank(a: &Rival, b: &Rival) -> std::cmp::Ordering {
    a.priority
        .cmp(&b.priority)
        .then(b.since.cmp(&a.since))
        .then(b.candidate.cmp(&a.candidate))
}

/// When a registration's current run began, as the registration at `now` of incarnation
/// `incarnation` leaves it: kept while the previous registration (its `since`, `expires_at`
/// and incarnation) is live and of the same incarnation, else `now` — a restart settles again,
/// whether it keeps its id or not.
pub fn registration_since(
    now: DbTime,
    incarnation: &str,
    previous: Option<(DbTime, DbTime, Option<&str>)>,
) -> DbTime {
    match previous {
        Some((since, expires_at, Some(was))) if expires_at > now && was == incarnation => since,
        _ => now,
    }
}

/// A candidate's record of tenures that ended by expiry (it crashed, stalled or was cut off
/// while it led): how many in a row, and until when its priority does not count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Backoff {
    /// Its tenures that ended by expiry, in a row (forgotten after a quiet spell).
    pub expiries: u32,
    /// Until when its priority does not count.
    pub until: Option<DbTime>,
}

impl Backoff {
    /// The record after another of its tenures was found ended by expiry at `now`, for a
    /// candidate of ttl `ttl_ms`: the n-th in a row backs off for `ttl · 2ⁿ⁻¹` (at most
    /// [`MAX_BACKOFF_TTLS`] ttls). The count starts again at one once the last back-off has
    /// been over for [`MAX_BACKOFF_TTLS`] ttls (a candidate that led that long is not
    /// flapping).
    pub fn after_expiry(self, ttl_ms: u64, now: DbTime) -> Backoff {
        let longest = ttl_ms.saturating_mul(MAX_BACKOFF_TTLS);
        let forgiven = self.until.is_none_or(|until| until.plus_ms(longest) <= now);
        let expiries = if forgiven {
            1
        } else {
            self.expiries.saturating_add(1)
        };
        let doubling = 1u64.checked_shl(expiries - 1).unwrap_or(u64::MAX);
        let backoff = ttl_ms.saturating_mul(doubling).min(longest);
        Backoff {
            expiries,
            until: Some(now.plus_ms(backoff)),
        }
    }
}
