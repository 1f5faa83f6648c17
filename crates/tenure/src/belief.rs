//! One belief — a tenure of an elector or a held lock — shared by the elector, the locks'
//! keep-alive and every guard, so that the deadline, the loss signal and the stale-term
//! bookkeeping exist once.
//!
//! - A belief ends when its signal fires or its local deadline passes, whichever comes first;
//!   the guards read the clock, so after a process pause they report the loss before the task
//!   that would fire the signal has run.
//! - Its deadline follows the database: from the instant the campaign or renewal was sent, plus
//!   the time the database said the lease had left, minus the safety margin (never more than
//!   the caller's own `ttl − safety_margin`). A row that keeps a shorter ttl than the caller
//!   asked for therefore shortens the belief.
//! - A belief that ended never comes back: [`Belief::extend`] refuses once the signal fired or
//!   the deadline passed, and fires the signal.
//! - [`Ledger`]: a term is handed to at most one belief, ever, and a term whose belief ended
//!   stays *stale* until its release is known to have landed; it is never resumed.
//! - Each belief carries its [`Seen`]: its start, every renewal and its end are recorded there
//!   (`telemetry.rs`), so every kind of guard is watched alike.

use crate::backend::Applied;
use crate::config::Timing;
use crate::model::{DbTime, Lease};
use crate::telemetry::{Ended, Seen};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The owner's side of one belief (the elector's task, the locks' table).
#[derive(Debug)]
pub(crate) struct Belief {
    term: u64,
    deadline: watch::Sender<Instant>,
    lost: CancellationToken,
    seen: Seen,
}

/// The guards' side: cheap to clone, read-only.
#[derive(Clone, Debug)]
pub(crate) struct View {
    deadline: watch::Receiver<Instant>,
    lost: CancellationToken,
}

impl Belief {
    /// A new belief in `term` until `deadline`, recorded in `seen`.
    pub(crate) fn new(term: u64, deadline: Instant, seen: Seen) -> (Belief, View) {
        let (tx, rx) = watch::channel(deadline);
        let lost = CancellationToken::new();
        let view = View {
            deadline: rx,
            lost: lost.clone(),
        };
        let belief = Belief {
            term,
            deadline: tx,
            lost,
            seen,
        };
        (belief, view)
    }

    pub(crate) fn term(&self) -> u64 {
        self.term
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.borrow()
    }

    /// Moves the deadline to `to` after a renewal sent at `sent`, unless the belief has
    /// already ended (its signal fired or its current deadline passed): then it fires the
    /// signal and returns false. The check and the move happen under the watch's lock, so no
    /// guard can have seen the belief ended before it is extended.
    pub(crate) fn extend(&self, to: Instant, sent: Instant) -> bool {
        let mut alive = false;
        let mut left = Duration::ZERO;
        self.deadline.send_if_modified(|current| {
            let now = Instant::now();
            alive = !self.lost.is_cancelled() && now < *current;
            left = current.saturating_duration_since(now);
            if alive && to != *current {
                *current = to;
                return true;
            }
            false
        });
        if alive {
            self.seen.renewed(sent, left);
        } else {
            self.lost.cancel();
            self.seen.ended(Ended::Deadline);
        }
        alive
    }

    /// Ends the belief now, `why`.
    pub(crate) fn end(&self, why: Ended) {
        self.lost.cancel();
        self.seen.ended(why);
    }
}

impl Drop for Belief {
    /// A belief whose owner is gone (a dropped elector task, a forgotten lock) has ended.
    fn drop(&mut self) {
        self.lost.cancel();
        self.seen.ended(Ended::Dropped);
    }
}

impl View {
    /// The current local deadline.
    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.borrow()
    }

    /// A token cancelled when the belief ends (at the deadline as soon as its owner runs).
    pub(crate) fn token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the belief has ended: the signal fired or the deadline has passed.
    pub(crate) fn has_ended(&self) -> bool {
        // The clock is read before the watch's lock is taken: see `Belief::extend`.
        let now = Instant::now();
        self.lost.is_cancelled() || now >= *self.deadline.borrow()
    }

    /// Completes when the belief ends: the signal fires or the current deadline passes.
    pub(crate) async fn ended(&self) {
        let mut deadline = self.deadline.clone();
        loop {
            let at = *deadline.borrow_and_update();
            // Checked first: a timer already past its instant fires only at the driver's next
            // turn.
            if self.lost.is_cancelled() || Instant::now() >= at {
                return;
            }
            tokio::select! {
                biased;
                () = self.lost.cancelled() => return,
                () = tokio::time::sleep_until(at) => {
                    if Instant::now() >= *deadline.borrow() {
                        return;
                    }
                }
                changed = deadline.changed() => {
                    if changed.is_err() {
                        // The owner is gone; it fired the signal when it dropped.
                        return self.lost.cancelled().await;
                    }
                }
            }
        }
    }
}

/// The local deadline an answer allows, or `None` if it arrived too late to believe: `sent`
/// plus what the database said the lease had left at its instant, minus the safety margin,
/// and never later than `sent + ttl − safety_margin` of the caller's own timing. The database
/// decided after `sent`, so its expiry lies after this deadline by at least the margin.
pub(crate) fn deadline_for(
    timing: &Timing,
    applied: &Applied,
    sent: Instant,
    received: Instant,
) -> Option<Instant> {
    let lease = applied.lease.as_ref()?;
    deadline_of(timing, lease, applied.now, sent, received)
}

/// As [`deadline_for`], for a row read at the database instant `now`.
pub(crate) fn deadline_of(
    timing: &Timing,
    lease: &Lease,
    now: DbTime,
    sent: Instant,
    received: Instant,
) -> Option<Instant> {
    let left = Duration::from_millis(lease.remaining_ms(now));
    let belief = left
        .checked_sub(timing.safety_margin())?
        .min(timing.max_belief());
    let deadline = sent + belief;
    (received < deadline).then_some(deadline)
}

/// The terms of one name as one holder has seen them: which were handed to a belief, and
/// which ended without a known release.
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    /// The highest term ever handed to a belief.
    highest: Option<u64>,
    /// A term of ours that ended locally and may still be held in the database: released,
    /// never resumed.
    stale: Option<u64>,
}

impl Ledger {
    /// Whether `term` may start a new belief: only a term higher than every one handed out.
    pub(crate) fn may_hand_out(&self, term: u64) -> bool {
        self.highest.is_none_or(|h| term > h)
    }

    /// Records that `term` was handed to a belief. An older stale term is moot: the database
    /// has moved past it.
    pub(crate) fn handed_out(&mut self, term: u64) {
        self.highest = Some(self.highest.map_or(term, |h| h.max(term)));
        if self.stale.is_some_and(|s| s < term) {
            self.stale = None;
        }
    }

    /// Records that the belief in `term` ended (or that `term` was granted too late to be
    /// believed): until a release of it lands, it is stale.
    pub(crate) fn ended(&mut self, term: u64) {
        self.highest = Some(self.highest.map_or(term, |h| h.max(term)));
        self.stale = Some(term);
    }

    /// The stale term, if any.
    pub(crate) fn stale(&self) -> Option<u64> {
        self.stale
    }

    /// Records that `term` is no longer held by us in the database (released, or seen held by
    /// someone else or with another term).
    pub(crate) fn gone(&mut self, term: u64) {
        if self.stale == Some(term) {
            self.stale = None;
        }
    }

    /// Whether nothing needs remembering (for tables of many names).
    pub(crate) fn is_idle(&self) -> bool {
        self.stale.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::telemetry::Role;

    fn seen() -> Seen {
        let timing = Timing::from_ttl(Duration::from_secs(4)).unwrap();
        Seen::start("belief-test", Role::Lock, 1, Instant::now(), &timing)
    }

    #[tokio::test(start_paused = true)]
    async fn an_ended_belief_is_never_extended() {
        let start = Instant::now();
        let (belief, view) = Belief::new(1, start + Duration::from_millis(100), seen());
        assert!(belief.extend(start + Duration::from_millis(200), start));
        assert!(!view.has_ended());
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(view.has_ended(), "the deadline passed");
        // A renewal that answers after the deadline passed is refused, and the loss stays.
        assert!(!belief.extend(Instant::now() + Duration::from_secs(1), start));
        assert!(view.has_ended());
        assert!(view.token().is_cancelled());
        assert_eq!(view.deadline(), start + Duration::from_millis(200));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fired_signal_is_final() {
        let start = Instant::now();
        let (belief, view) = Belief::new(1, start + Duration::from_secs(1), seen());
        belief.end(Ended::Released);
        assert!(!belief.extend(start + Duration::from_secs(2), start));
        assert!(view.has_ended());
        view.ended().await;
        assert_eq!(Instant::now(), start, "at once");
    }

    #[tokio::test(start_paused = true)]
    async fn ended_follows_renewals_and_the_owners_drop() {
        let start = Instant::now();
        let (belief, view) = Belief::new(1, start + Duration::from_millis(100), seen());
        let waiter = tokio::spawn({
            let view = view.clone();
            async move {
                view.ended().await;
                Instant::now()
            }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        belief.extend(start + Duration::from_millis(300), start);
        assert_eq!(
            waiter.await.unwrap(),
            start + Duration::from_millis(300),
            "the moved deadline"
        );
        let (belief, view) = Belief::new(2, Instant::now() + Duration::from_secs(5), seen());
        drop(belief);
        assert!(view.has_ended(), "an owner that is gone ends its belief");
    }

    #[test]
    fn deadline_follows_what_the_database_said() {
        use crate::model::Effect;
        let timing = Timing::from_ttl(Duration::from_secs(10)).unwrap();
        let now = DbTime(1_000_000_000);
        let lease = |ttl_ms: u64| Lease {
            name: "n".into(),
            holder: Some("a".into()),
            term: 1,
            acquired_at: now,
            renewed_at: now,
            expires_at: now.plus_ms(ttl_ms),
            ttl_ms,
            metadata: None,
            handover_to: None,
            paused: false,
        };
        let applied = |ttl_ms| Applied {
            now,
            epoch: Default::default(),
            lease: Some(lease(ttl_ms)),
            effect: Effect::Renewed,
        };
        let sent = Instant::now();
        let soon = sent + Duration::from_millis(10);
        // Our own ttl: ttl − margin.
        assert_eq!(
            deadline_for(&timing, &applied(10_000), sent, soon),
            Some(sent + Duration::from_secs(9))
        );
        // A row that keeps a longer ttl never lengthens the belief; a shorter one shortens it.
        assert_eq!(
            deadline_for(&timing, &applied(60_000), sent, soon),
            Some(sent + Duration::from_secs(9))
        );
        assert_eq!(
            deadline_for(&timing, &applied(3_000), sent, soon),
            Some(sent + Duration::from_secs(2))
        );
        // Less left than the margin, or an answer after the deadline: no belief.
        assert_eq!(deadline_for(&timing, &applied(500), sent, soon), None);
        assert_eq!(
            deadline_for(
                &timing,
                &applied(3_000),
                sent,
                sent + Duration::from_secs(2)
            ),
            None
        );
    }

    #[test]
    fn a_term_is_handed_out_once_and_stays_stale_until_gone() {
        let mut ledger = Ledger::default();
        assert!(ledger.may_hand_out(3));
        ledger.handed_out(3);
        assert!(!ledger.may_hand_out(3), "never twice");
        assert!(!ledger.may_hand_out(2), "never lower");
        ledger.ended(3);
        assert_eq!(ledger.stale(), Some(3));
        ledger.gone(2);
        assert_eq!(ledger.stale(), Some(3), "only its own release clears it");
        ledger.gone(3);
        assert!(ledger.is_idle());
        ledger.ended(4);
        ledger.handed_out(5);
        assert!(ledger.is_idle(), "the database moved past the stale term");
    }
}
