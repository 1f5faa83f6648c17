//! One attempt at a lock, in its steps: what this process still has of the name (a term held,
//! a stale term to give back first, a kept term to succeed), the campaign, and then either
//! the guard — a term handed out once, with a belief that ends before the database's expiry —
//! or when to try again.

use super::options::{GiveBack, LockOptions};
use super::{LockGuard, Locks};
use crate::belief::deadline_for;
use crate::config::Timing;
use crate::error::Result;
use crate::guard::Tenure;
use crate::model::{duration_ms, Effect, Op};
use crate::records::Applied;
use crate::validate;
use std::time::Duration;
use tokio::time::Instant;

/// When a waiting caller tries again after an attempt that did not get the lock.
#[derive(Clone, Copy, Debug)]
pub(super) enum Retry {
    /// At once: a term of ours was in the way and is being given back.
    Now,
    /// When the holder's lease would expire (plus jitter), at most a renew interval from now.
    WhenExpires(Duration),
    /// After a renew interval (held by this process, paused, reserved, unknown).
    Poll,
}

/// What this process still has of a name it does not hold: a stale term to give back before
/// it campaigns, and a term kept with `forget` that the campaign succeeds.
pub(super) struct Ours {
    pub(super) stale: Option<(u64, GiveBack)>,
    pub(super) kept: Option<u64>,
}

/// The database's answer to a campaign, with when it was sent and received.
pub(super) struct Answer {
    pub(super) applied: Applied,
    pub(super) sent: Instant,
    pub(super) received: Instant,
}

impl Locks {
    /// One campaign for `name`: the guard if granted, else when to try again.
    pub(super) async fn attempt(
        &self,
        name: &str,
        options: &LockOptions,
    ) -> Result<(Option<LockGuard>, Retry)> {
        validate::name(name)?;
        let (timing, give_back) = options.check()?;
        let Some(ours) = self.ours(name) else {
            return Ok((None, Retry::Poll));
        };
        if let Some((term, stale)) = ours.stale {
            // Ours, and maybe still held: give it back before asking for a new term, so that
            // the answer can never be about it.
            self.inner.release(name, term, stale, None).await?;
        }
        let answer = self.campaign(name, options, &timing, ours.kept).await?;
        if matches!(answer.applied.effect, Effect::Acquired { .. }) {
            return self.grant(name, &answer, options, timing, give_back).await;
        }
        let retry = self
            .not_granted(name, &answer.applied, ours.kept, give_back)
            .await?;
        Ok((None, retry))
    }

    /// What this process has of `name`, or `None` if it holds it now.
    pub(super) fn ours(&self, name: &str) -> Option<Ours> {
        let mut table = self.inner.table();
        if table.held.contains_key(name) {
            return None;
        }
        let now = Instant::now();
        let kept = table.kept.remove(name).filter(|(_, until)| *until > now);
        Some(Ours {
            stale: table.stale(name),
            kept: kept.map(|(term, _)| term),
        })
    }

    /// Campaigns for `name` (or, for a `kept` term, succeeds it: term + 1 with nobody in
    /// between), bounded by the database timeout of the lock's timing.
    async fn campaign(
        &self,
        name: &str,
        options: &LockOptions,
        timing: &Timing,
        kept: Option<u64>,
    ) -> Result<Answer> {
        let holder = &self.inner.holder;
        let ttl_ms = duration_ms(options.ttl);
        let purpose = options.purpose();
        let op = match kept {
            Some(term) => Op::Succeed {
                candidate: holder.clone(),
                term,
                ttl_ms,
                purpose,
            },
            None => Op::Campaign {
                candidate: holder.clone(),
                term: None,
                ttl_ms,
                metadata: None,
                purpose,
            },
        };
        let sent = Instant::now();
        let result = self
            .inner
            .store
            .with_timeout(timing.db_timeout())
            .apply_valid(name, &op, holder)
            .await;
        let received = Instant::now();
        match result {
            Ok(applied) => Ok(Answer {
                applied,
                sent,
                received,
            }),
            Err(e) => {
                if let Some(term) = kept {
                    // Not known to have landed: the kept term may still be ours.
                    let until = received + timing.max_belief();
                    let mut table = self.inner.table();
                    table.kept.insert(name.to_string(), (term, until));
                }
                Err(e)
            }
        }
    }

    /// The campaign did not grant `name`: when to try again (a kept term that must not
    /// continue is given back first).
    pub(super) async fn not_granted(
        &self,
        name: &str,
        applied: &Applied,
        kept: Option<u64>,
        give_back: GiveBack,
    ) -> Result<Retry> {
        let Some(lease) = applied.lease.as_ref() else {
            return Ok(Retry::Poll);
        };
        if let Effect::SteppedDown(_) = applied.effect {
            // A kept term that must not continue (paused, handed over): give it back.
            if let Some(kept) = kept {
                self.inner.table().mark_stale(name, kept, give_back);
                self.inner.release(name, kept, give_back, None).await?;
            }
            return Ok(Retry::Poll);
        }
        let ours = lease.holder.as_deref() == Some(self.inner.holder.as_str())
            && self
                .inner
                .table()
                .stale(name)
                .is_some_and(|(stale, _)| stale == lease.term);
        if ours {
            // Released meanwhile by another task of ours, not yet landed: the next attempt
            // releases it first.
            return Ok(Retry::Now);
        }
        let remaining = Duration::from_millis(lease.remaining_ms(applied.now));
        Ok(if remaining.is_zero() {
            // Expired but blocked (paused, reserved for a handover): poll.
            Retry::Poll
        } else {
            Retry::WhenExpires(remaining)
        })
    }

    /// The campaign granted a term: hand it to a new guard whose belief ends before the
    /// database's expiry — or, granted too late to believe (or, defensively, a term handed out
    /// before), give it back at once.
    pub(super) async fn grant(
        &self,
        name: &str,
        answer: &Answer,
        options: &LockOptions,
        timing: Timing,
        give_back: GiveBack,
    ) -> Result<(Option<LockGuard>, Retry)> {
        let applied = &answer.applied;
        let term = applied.lease.as_ref().map_or(0, |lease| lease.term);
        let deadline = deadline_for(&timing, applied, answer.sent, answer.received);
        let view = {
            let mut table = self.inner.table();
            let handed_out = table
                .terms
                .get(name)
                .is_some_and(|t| !t.ledger.may_hand_out(term));
            match deadline.filter(|_| !handed_out) {
                Some(deadline) => Some(table.hand_out(
                    name,
                    term,
                    answer.sent,
                    deadline,
                    timing,
                    options.keep_alive,
                    give_back,
                )),
                None => {
                    table.mark_stale(name, term, give_back.now_free());
                    None
                }
            }
        };
        let Some(view) = view else {
            // Until the give-back lands the term is stale.
            let free = give_back.now_free();
            if let Err(e) = self.inner.release(name, term, free, None).await {
                tracing::warn!(name, term, error = %e, "giving back a lock term granted too late failed; it stays stale");
            }
            return Ok((None, Retry::Now));
        };
        self.inner.wake.notify_one();
        let fence = self.inner.store.fence().cloned();
        let tenure = Tenure::new(name, &self.inner.holder, term, view, fence);
        let guard = LockGuard::new(self.inner.clone(), tenure, give_back);
        Ok((Some(guard), Retry::Poll))
    }
}
