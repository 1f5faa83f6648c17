//! The lease rules, with no IO: [`decide`] maps (database now, current row, operation) to the
//! row to write, the history event to append and what happened. Each operation's rules are one
//! function of `ops.rs`; this file holds the data they read and write.
//!
//! Every backend runs exactly this function inside a transaction that holds the row's lock and
//! read `now` from the database's clock after taking it, so the rules exist once. The
//! model-based test (`tests/model.rs`) keeps its own copy of the state in memory and checks
//! that each backend's stored rows and answers agree with this function for random sequences
//! of operations and real expiries.

mod ops;
pub mod spread;
mod standing;
mod term;
mod time;

pub use standing::{registration_since, Backoff, Rival, Standing};
#[cfg(any(feature = "postgres", feature = "testing"))]
pub use term::TIMELINE_BITS;
pub use term::{Clock, Epoch};
pub(crate) use time::duration_ms;
pub use time::DbTime;

use ops::Ask;

/// One row of `tenure_lease`: the state of one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lease {
    /// The election or lock.
    pub name: String,
    /// Who holds it; `None` when vacant. A holder whose `expires_at` has passed no longer leads.
    pub holder: Option<String>,
    /// The fencing token of the latest tenure; 0 before the first one.
    pub term: u64,
    /// When the latest tenure began.
    pub acquired_at: DbTime,
    /// When the holder last renewed (or acquired).
    pub renewed_at: DbTime,
    /// Until when the holder leads; after a release or demote, until when nobody may start.
    pub expires_at: DbTime,
    /// The ttl the holder last asked for.
    pub ttl_ms: u64,
    /// The holder's "body": a small text (e.g. its address) so that others can find it.
    pub metadata: Option<String>,
    /// A pending graceful handover: the holder steps down, only this candidate may acquire.
    pub handover_to: Option<String>,
    /// Maintenance: the holder steps down and nobody acquires until resumed.
    pub paused: bool,
}

impl Lease {
    /// The holder, if it still leads at `now`.
    pub fn live_holder(&self, now: DbTime) -> Option<&str> {
        self.holder
            .as_deref()
            .filter(|_| !self.expires_at.ended_by(now))
    }

    /// Milliseconds left until `expires_at`, 0 once passed.
    pub fn remaining_ms(&self, now: DbTime) -> u64 {
        self.expires_at.ms_since(now)
    }

    /// Whether a pending handover target still has the lease reserved at `now`: until one ttl
    /// after the lease became free.
    fn reserved_for_other(&self, me: &str, now: DbTime) -> bool {
        self.handover_pending(now) && self.handover_to.as_deref() != Some(me)
    }

    /// Whether a graceful handover was asked for and has not lapsed (one ttl after the lease
    /// became free, or after it was asked for if the lease was free then).
    pub fn handover_pending(&self, now: DbTime) -> bool {
        self.handover_to.is_some()
            && !self.forced_grant_pending()
            && self.expires_at.plus_ms(self.ttl_ms) > now
    }

    /// The target of a graceful handover, as operators see it (`handover_to`, without the mark
    /// of an unadopted immediate handover, whose target already holds the lease).
    pub fn handover_target(&self) -> Option<&str> {
        self.handover_to
            .as_deref()
            .filter(|_| !self.forced_grant_pending())
    }

    /// Whether the tenure was installed by an immediate handover and its holder has not yet
    /// adopted it (marked by `handover_to` naming the holder itself).
    pub fn forced_grant_pending(&self) -> bool {
        self.holder.is_some() && self.handover_to == self.holder
    }
}

/// What a lease is held for: it decides which of its transitions the history records and
/// which of them wake someone (a PostgreSQL notification at commit).
///
/// An election's followers and watchers wait for a new leader as much as for a vacant lease,
/// and its history is the record of who led when: every acquisition and release is recorded
/// and announced. A lock taken and released in a loop would write a history row and send a
/// notification at every turn, which nobody reads: by default only what an operator needs is
/// recorded (see [`Purpose::Lock`]), and only a release (which a waiter may be waiting for)
/// is announced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Purpose {
    /// An election (`Elector`, and the plain [`Store`](crate::Store) operations): every
    /// transition is recorded and announced.
    #[default]
    Election,
    /// A lock or a semaphore permit (`Locks`). Recorded: takeovers of an expired holder,
    /// acquisitions by handover, releases that give a reason, admin events, and, if
    /// `record_every_cycle`, every acquisition and release. Announced: releases and admin
    /// events, never an acquisition (nobody waits for a lock to be taken).
    Lock {
        /// Also record each uncontested acquisition (of a vacant lease, or of the holder's
        /// own kept tenure) and each release without a reason.
        record_every_cycle: bool,
    },
}

impl Purpose {
    /// Whether an uncontested acquisition and a release without a reason are recorded.
    pub fn records_every_cycle(self) -> bool {
        match self {
            Purpose::Election => true,
            Purpose::Lock { record_every_cycle } => record_every_cycle,
        }
    }

    /// Whether an acquisition wakes anyone: an election's followers and watchers.
    pub fn wakes_on_acquisition(self) -> bool {
        self == Purpose::Election
    }

    /// Whether a release with this reason is recorded: always where it gives one (the caller
    /// wants it read, e.g. a failed health check), else where every cycle is.
    pub fn records_release(self, reason: Option<&str>) -> bool {
        reason.is_some() || self.records_every_cycle()
    }
}

/// An operation on one name, decided atomically at one database instant.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Op {
    /// Acquire, renew or step down (`campaign` in the operations table of
    /// `docs/design-notes.md`).
    ///
    /// `term` is the tenure the caller holds, if any. Only a campaign that names the live
    /// lease's term renews it: one that names no term or another term finds the lease held,
    /// whoever its holder id is, so a shared or reused holder id never makes a second
    /// believer. The one exception is a tenure granted by an immediate handover, which the
    /// first campaign of its target adopts (answered [`Effect::Acquired`]).
    Campaign {
        /// Who campaigns.
        candidate: String,
        /// The tenure the caller holds (`None`: it wants a new one).
        term: Option<u64>,
        /// The lease's time to live from this instant, in milliseconds.
        ttl_ms: u64,
        /// Published with the lease while held (e.g. an address).
        metadata: Option<String>,
        /// What the lease is held for: what its acquisition records and whom it wakes.
        purpose: Purpose,
    },
    /// The live holder of tenure `term` ends it and begins the next one for itself at once,
    /// with nobody in between (term + 1, an `acquired` event): how a lock kept with
    /// `LockGuard::forget` is taken again by its holder (election mode), so that every guard
    /// has a term of its own. Where `candidate` does not hold `term` live, exactly a campaign
    /// that names no term.
    Succeed {
        /// Who succeeds itself.
        candidate: String,
        /// The tenure it holds and ends.
        term: u64,
        /// The new tenure's time to live, in milliseconds.
        ttl_ms: u64,
        /// What the lease is held for: whether the new tenure is recorded.
        purpose: Purpose,
    },
    /// Renew the tenure `term` of `candidate` with the row's own ttl, never acquiring: the
    /// keep-alive of held locks, which backends run for many leases in one statement.
    Renew {
        /// Who renews.
        candidate: String,
        /// The tenure renewed.
        term: u64,
    },
    /// Give up the tenure `term` of `candidate`; nobody may start before `acquired_at + at_least`.
    /// `reason`, if any, is the history event's detail.
    Release {
        /// Who releases.
        candidate: String,
        /// The tenure released.
        term: u64,
        /// Milliseconds after `acquired_at` before which nobody may start.
        at_least_ms: u64,
        /// The history event's detail.
        reason: Option<String>,
        /// What the lease is held for: whether the release is recorded.
        purpose: Purpose,
    },
    /// Force a re-election. Keeps `expires_at` (lock-delay) unless `immediate`.
    Demote {
        /// End the lease now instead of keeping `expires_at` (unsafe without fencing).
        immediate: bool,
    },
    /// Force a given leader: graceful by default, at once (and unsafe without fencing) if
    /// `immediate`.
    Handover {
        /// The candidate to lead next.
        to: String,
        /// Install `to` with a new term now (unsafe without fencing).
        immediate: bool,
    },
    /// Maintenance stop: the holder steps down at its next renew, nobody acquires.
    Pause,
    /// End a pause.
    Resume,
}

/// Why a holder stepped down when it tried to renew.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StepDownReason {
    /// The name is paused.
    Paused,
    /// An operator asked for a handover to this candidate.
    HandoverTo(String),
}

/// What an operation did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Effect {
    /// The candidate began a new tenure: term raised by one, or a tenure granted to it by an
    /// immediate handover adopted (the term was raised by the handover).
    Acquired {
        /// The previous holder whose lease had expired, if any.
        took_over_from: Option<String>,
    },
    /// The holder extended its tenure.
    Renewed,
    /// The holder must step down (pause or handover). Nothing was written: the holder stops
    /// renewing, stops its work, and then releases, so that nobody starts while it still runs.
    SteppedDown(StepDownReason),
    /// The tenure was released.
    Released,
    /// A release by someone who is not the holder of that term: nothing changed.
    NotHolder,
    /// Someone else leads, or the lease is blocked (lock-delay, pause, handover): nothing changed.
    Unavailable,
    /// An admin operation took effect.
    Demoted,
    /// A graceful handover was recorded.
    HandoverRequested,
    /// An immediate handover installed the target with a new term.
    Forced,
    /// The name was paused.
    Paused,
    /// The name was resumed.
    Resumed,
    /// An admin operation had nothing to do (e.g. resume of a name not paused).
    NoChange,
    /// An admin operation named a name that has never been used.
    UnknownName,
    /// The lease has used every term of the database's current epoch (see `Epoch`): no new
    /// tenure can begin, and nothing changed.
    TermsExhausted,
}

impl Effect {
    /// A stable snake_case word for programs (`--json`, the HTTP API).
    pub fn as_str(&self) -> &'static str {
        match self {
            Effect::Acquired { .. } => "acquired",
            Effect::Renewed => "renewed",
            Effect::SteppedDown(_) => "stepped_down",
            Effect::Released => "released",
            Effect::NotHolder => "not_holder",
            Effect::Unavailable => "unavailable",
            Effect::Demoted => "demoted",
            Effect::HandoverRequested => "handover_requested",
            Effect::Forced => "forced",
            Effect::Paused => "paused",
            Effect::Resumed => "resumed",
            Effect::NoChange => "no_change",
            Effect::UnknownName => "unknown_name",
            Effect::TermsExhausted => "terms_exhausted",
        }
    }
}

/// A transition worth recording in `tenure_history`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A new tenure began.
    Acquired,
    /// The holder gave its tenure up.
    Released,
    /// A new tenure began after the last one expired unreleased.
    TakenOverExpired,
    /// An admin forced a re-election.
    Demoted,
    /// An admin handed the lease to a given candidate (graceful).
    HandedOver,
    /// An admin installed a given candidate at once.
    Forced,
    /// An admin paused the name.
    Paused,
    /// An admin ended the pause.
    Resumed,
}

impl EventKind {
    /// The word stored in the `event` column.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Acquired => "acquired",
            EventKind::Released => "released",
            EventKind::TakenOverExpired => "taken_over_expired",
            EventKind::Demoted => "demoted",
            EventKind::HandedOver => "handed_over",
            EventKind::Forced => "forced",
            EventKind::Paused => "paused",
            EventKind::Resumed => "resumed",
        }
    }
}

/// A history row to append, minus the actor (who asked) which the caller knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// The term it happened to.
    pub term: u64,
    /// The holder after the transition, if any.
    pub holder: Option<String>,
    /// Free text (a release's reason, a handover's target).
    pub detail: String,
}

/// The outcome of [`decide`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision {
    /// The row after the operation (`None` only if there was none and there still is none).
    pub lease: Option<Lease>,
    /// Whether `lease` differs from the stored row and must be written.
    pub write: bool,
    /// What to append to the history, if anything.
    pub event: Option<Event>,
    /// Whether someone may be waiting for this transition (followers, lock waiters,
    /// watchers): a backend that can push (PostgreSQL's `NOTIFY`) announces it at commit.
    pub wake: bool,
    /// What happened.
    pub effect: Effect,
}

/// Applies `op` to the row `current` of `name` at the database's instant and in its epoch
/// (`at`; a bare [`DbTime`] is a database with one history, [`Epoch::ZERO`]). Every new term
/// is minted here, by [`Epoch::next_term`].
// The one-statement fast path of PostgreSQL calls it outside a transaction body.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub fn decide(at: impl Into<Clock>, name: &str, current: Option<&Lease>, op: &Op) -> Decision {
    decide_among(at, name, current, op, None)
}

/// [`decide`] for a campaign with a [`Standing`] among the candidates of its name: a free
/// lease waits for a better live rival, and a holder hands over to one that has settled. Other
/// operations ignore the standing.
pub fn decide_among(
    at: impl Into<Clock>,
    name: &str,
    current: Option<&Lease>,
    op: &Op,
    standing: Option<&Standing<'_>>,
) -> Decision {
    let Clock { now, epoch } = at.into();
    let mut decision = match op {
        Op::Campaign {
            candidate,
            term,
            ttl_ms,
            metadata,
            purpose,
        } => {
            let ask = Ask {
                me: candidate,
                term: *term,
                ttl_ms: *ttl_ms,
                metadata,
                purpose: *purpose,
                epoch,
                standing,
            };
            ops::campaign(now, name, current, &ask)
        }
        Op::Succeed {
            candidate,
            term,
            ttl_ms,
            purpose,
        } => {
            let ask = Ask {
                me: candidate,
                term: Some(*term),
                ttl_ms: *ttl_ms,
                metadata: &None,
                purpose: *purpose,
                epoch,
                standing: None,
            };
            ops::succeed(now, name, current, &ask)
        }
        Op::Renew { candidate, term } => ops::renew(now, current, candidate, *term),
        Op::Release {
            candidate,
            term,
            at_least_ms,
            reason,
            purpose,
        } => ops::release(
            now,
            current,
            candidate,
            *term,
            *at_least_ms,
            reason.as_deref(),
            *purpose,
        ),
        Op::Demote { immediate } => ops::demote(now, current, *immediate),
        Op::Handover { to, immediate } => ops::handover(now, epoch, current, to, *immediate),
        Op::Pause => ops::pause(now, name, current),
        Op::Resume => ops::resume(current),
    };
    // A release or demote empties the row; its history event names who gave the lease up.
    if let Some(event) = &mut decision.event {
        if matches!(event.kind, EventKind::Released | EventKind::Demoted) {
            event.holder = current.and_then(|row| row.holder.clone());
        }
    }
    decision
}

#[cfg(test)]
mod admin_tests;
#[cfg(test)]
mod epoch_tests;
#[cfg(test)]
mod property_tests;
#[cfg(test)]
mod purpose_tests;
#[cfg(test)]
mod release_tests;
#[cfg(test)]
mod spread_tests;
#[cfg(test)]
mod standing_flap_tests;
#[cfg(test)]
mod standing_lapse_tests;
#[cfg(test)]
mod standing_tests;
#[cfg(test)]
mod tests;
