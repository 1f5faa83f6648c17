//! What a member knows of its shards: per shard the tenure its guard holds (the owner's side
//! of its belief: `belief.rs`, as every guard's) and the terms it handed out and still has to
//! give back — a term goes to at most one guard, ever, and a term whose guard came back
//! unreleased stays *stale* until a tick's release of it commits.
//!
//! Every change here follows a committed tick ([`Shards::ticked`]) or a guard that came back
//! ([`Shards::returned`]): a belief starts only from a take that committed, and is extended
//! only to the deadline a committed renewal allows, counted from the instant the tick was sent.

use super::guard::{Returned, ShardGuard};
use super::tick::{Local, Ticked};
use crate::belief::{deadline_for, Belief, Ledger};
use crate::config::Timing;
use crate::guard::Tenure;
use crate::model::Effect;
use crate::store::Store;
use crate::telemetry::{Ended, Role, Seen};
use std::collections::{BTreeMap, BTreeSet};
use tokio::sync::mpsc;
use tokio::time::Instant;

/// A tenure out with a guard.
struct Out {
    belief: Belief,
    /// Ended here (asked back, replaced, past its deadline): not renewed again.
    ended: bool,
    /// Asked back (a rebalance, a pause, a leave).
    surrendered: bool,
}

/// One shard this member has dealt with.
#[derive(Default)]
struct Slot {
    out: Option<Out>,
    ledger: Ledger,
}

/// Everything a member knows of its shards.
pub(super) struct Shards {
    slots: BTreeMap<u32, Slot>,
    pub(super) group: String,
    pub(super) count: u32,
    pub(super) id: String,
    pub(super) timing: Timing,
    /// For the guards: their fence and their own release.
    pub(super) store: Store,
    /// What the guards send when they come back.
    pub(super) back: mpsc::UnboundedSender<Returned>,
}

impl Shards {
    pub(super) fn new(
        group: String,
        count: u32,
        id: String,
        timing: Timing,
        store: Store,
        back: mpsc::UnboundedSender<Returned>,
    ) -> Shards {
        Shards {
            slots: BTreeMap::new(),
            group,
            count,
            id,
            timing,
            store,
            back,
        }
    }

    /// What the next tick needs: the guards out (renewed while believed and not asked back)
    /// and the stale terms to release.
    pub(super) fn local(&self) -> Local {
        let now = Instant::now();
        let mut local = Local::default();
        for (&i, slot) in &self.slots {
            match &slot.out {
                Some(out) => {
                    let renew = !out.ended && !out.surrendered && out.belief.deadline() > now;
                    local.out.insert(i, (out.belief.term(), renew));
                }
                None => {
                    if let Some(term) = slot.ledger.stale() {
                        local.stale.insert(i, term);
                    }
                }
            }
        }
        local
    }

    /// The shards whose guards are out, believed and not asked back.
    pub(super) fn owned(&self) -> BTreeSet<u32> {
        let now = Instant::now();
        self.slots
            .iter()
            .filter(|(_, s)| {
                s.out
                    .as_ref()
                    .is_some_and(|o| !o.ended && !o.surrendered && o.belief.deadline() > now)
            })
            .map(|(&i, _)| i)
            .collect()
    }

    /// Whether a guard is still out.
    pub(super) fn any_out(&self) -> bool {
        self.slots.values().any(|s| s.out.is_some())
    }

    /// The earliest deadline of a belief still held.
    pub(super) fn earliest_deadline(&self) -> Option<Instant> {
        self.slots
            .values()
            .filter_map(|s| s.out.as_ref().filter(|o| !o.ended))
            .map(|o| o.belief.deadline())
            .min()
    }

    /// Ends the beliefs whose deadline has passed (their guards read the clock themselves;
    /// this fires their signal).
    pub(super) fn expire(&mut self) {
        let now = Instant::now();
        for (i, slot) in &mut self.slots {
            if let Some(out) = slot.out.as_mut().filter(|o| !o.ended) {
                if out.belief.deadline() <= now {
                    tracing::warn!(
                        group = self.group,
                        shard = i,
                        term = out.belief.term(),
                        "spread: a shard's deadline passed without a renewal"
                    );
                    out.belief.end(Ended::Deadline);
                    out.ended = true;
                }
            }
        }
    }

    /// Asks `shard` back: its guard's belief ends now; its lease is released when the guard
    /// comes back.
    pub(super) fn surrender(&mut self, shard: u32) {
        let Some(out) = self.slots.get_mut(&shard).and_then(|s| s.out.as_mut()) else {
            return;
        };
        if !out.surrendered {
            tracing::info!(
                group = self.group,
                shard,
                term = out.belief.term(),
                "spread: giving a shard back"
            );
            out.surrendered = true;
            if !out.ended {
                out.belief.end(Ended::Released);
                out.ended = true;
            }
        }
    }

    /// Asks every shard back (a leave).
    pub(super) fn surrender_all(&mut self) {
        let shards: Vec<u32> = self.slots.keys().copied().collect();
        for shard in shards {
            self.surrender(shard);
        }
    }

    /// A guard came back: its tenure has ended; its term is stale unless the guard released
    /// it.
    pub(super) fn returned(&mut self, r: Returned) {
        let Some(slot) = self.slots.get_mut(&r.shard) else {
            return;
        };
        if slot.out.as_ref().is_some_and(|o| o.belief.term() == r.term) {
            if let Some(out) = slot.out.take() {
                if !out.ended {
                    out.belief.end(Ended::Released);
                }
            }
            slot.ledger.ended(r.term);
            if r.released {
                slot.ledger.gone(r.term);
            }
        }
        self.tidy(r.shard);
    }

    /// Takes in a committed tick sent at `sent` and answered at `received`: surrenders, renewals
    /// (each belief extended to the deadline its answer allows, or ended), releases that
    /// landed, and takes (a new guard for each term granted in time and never handed out;
    /// any other granted term is stale, to be released by the next tick). Returns the guards.
    pub(super) fn ticked(
        &mut self,
        ticked: Ticked,
        sent: Instant,
        received: Instant,
    ) -> Vec<ShardGuard> {
        for &shard in &ticked.surrender {
            self.surrender(shard);
        }
        for (shard, term, applied) in &ticked.renewed {
            let Some(out) = self.slots.get_mut(shard).and_then(|s| s.out.as_mut()) else {
                continue;
            };
            if out.belief.term() != *term || out.ended {
                continue;
            }
            let renewed = applied.effect == Effect::Renewed
                && applied.lease.as_ref().is_some_and(|l| l.term == *term);
            let deadline = deadline_for(&self.timing, applied, sent, received);
            let kept = match (renewed, deadline) {
                (true, Some(deadline)) => out.belief.extend(deadline, sent),
                (true, None) => {
                    out.belief.end(Ended::Deadline);
                    false
                }
                (false, _) => {
                    tracing::warn!(group = self.group, shard, term, effect = ?applied.effect, "spread: a shard was not renewed (paused, taken or expired)");
                    out.belief.end(Ended::Replaced);
                    false
                }
            };
            out.ended = !kept;
        }
        for (shard, term) in &ticked.released {
            if let Some(slot) = self.slots.get_mut(shard) {
                slot.ledger.gone(*term);
            }
            self.tidy(*shard);
        }
        let mut guards = Vec::new();
        for (shard, applied) in &ticked.taken {
            let Effect::Acquired { .. } = applied.effect else {
                continue;
            };
            let Some(term) = applied.lease.as_ref().map(|l| l.term) else {
                continue;
            };
            let slot = self.slots.entry(*shard).or_default();
            let deadline = deadline_for(&self.timing, applied, sent, received);
            match deadline.filter(|_| slot.ledger.may_hand_out(term) && slot.out.is_none()) {
                Some(deadline) => guards.push(self.hand_out(*shard, term, sent, deadline)),
                None => {
                    tracing::warn!(
                        group = self.group,
                        shard,
                        term,
                        "spread: a shard granted too late to believe; giving it back"
                    );
                    slot.ledger.ended(term);
                }
            }
        }
        guards
    }

    /// A new guard for `term` of `shard`, believed until `deadline`.
    fn hand_out(&mut self, shard: u32, term: u64, sent: Instant, deadline: Instant) -> ShardGuard {
        let name = super::shard_name(&self.group, shard);
        tracing::info!(group = self.group, shard, term, "spread: took a shard");
        let seen = Seen::start(&name, Role::Lock, term, sent, &self.timing);
        let (belief, view) = Belief::new(term, deadline, seen);
        let slot = self.slots.entry(shard).or_default();
        slot.ledger.handed_out(term);
        slot.out = Some(Out {
            belief,
            ended: false,
            surrendered: false,
        });
        let fence = self.store.fence().cloned();
        let tenure = Tenure::new(&name, &self.id, term, view, fence);
        ShardGuard::new(
            tenure,
            shard,
            self.count,
            self.store.clone(),
            self.back.clone(),
        )
    }

    /// Forgets a slot with nothing left to remember.
    fn tidy(&mut self, shard: u32) {
        if self
            .slots
            .get(&shard)
            .is_some_and(|s| s.out.is_none() && s.ledger.is_idle())
        {
            self.slots.remove(&shard);
        }
    }
}
