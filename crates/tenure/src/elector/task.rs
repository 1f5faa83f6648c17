//! The campaign loop behind an [`Elector`](super::Elector).

use super::{Command, LeaderGuard, Role};
use crate::belief::{deadline_for, Belief, Ledger};
use crate::candidates::{Candidates, Registration};
use crate::changes::Topic;
use crate::config::Timing;
use crate::error::{Error, Result};
use crate::model::duration_ms;
use crate::model::{Effect, Lease, Op, Purpose};
use crate::records::LeaderInfo;
use crate::store::Store;
use crate::telemetry::{self, Ended, Seen};
use crate::Applied;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};

/// Why a tenure ended locally.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// Released, paused or stopped by this node.
    Voluntary,
    /// Demoted, paused, handed over or taken over, as the database said.
    Replaced,
    /// The local deadline passed, or an answer came too late: the database may still name us.
    Deadline,
}

/// The tenure this elector believes it holds.
pub(super) struct Tenure {
    belief: Belief,
    /// Completes when every clone of this tenure's guard has been dropped: its work stopped.
    stopped: oneshot::Receiver<()>,
}

pub(super) struct Task {
    pub store: Store,
    /// Where this elector registers at every campaign (and whose rules weigh its priority).
    pub registry: Candidates,
    pub registration: Registration,
    /// Whether campaigns go through the registry (false on a backend that keeps none).
    pub registered: bool,
    pub name: String,
    pub me: String,
    pub metadata: Option<String>,
    pub timing: Timing,
    pub role: watch::Sender<Role>,
    pub guard: watch::Sender<Option<LeaderGuard>>,
    pub commands: mpsc::Receiver<Command>,
    pub command_tx: mpsc::WeakSender<Command>,
    pub changes: crate::changes::Changes,
    pub tenure: Option<Tenure>,
    /// Which terms were handed out, and which one of ours may still be held in the database.
    pub ledger: Ledger,
    /// Campaigning paused on this node.
    pub paused: bool,
    /// No campaign before this instant (after a release or a demote).
    pub not_before: Instant,
    /// When this elector last registered (a campaign, or a keep-alive while it holds off).
    pub registered_at: Instant,
}

impl Task {
    pub(super) async fn run(mut self) {
        let mut next = Instant::now();
        loop {
            let deadline = self.tenure.as_ref().map(|t| t.belief.deadline());
            tokio::select! {
                biased;
                command = self.commands.recv() => match command {
                    None => return self.stop().await,
                    Some(Command::Shutdown { reply }) => {
                        self.stop().await;
                        let _ = reply.send(());
                        return;
                    }
                    Some(Command::Release { term, reason, reply }) => {
                        let current = self.tenure.as_ref().is_some_and(|t| t.belief.term() == term);
                        let mut result = Ok(());
                        if let Some(ended) = current.then(|| self.lose("released", Loss::Voluntary)).flatten() {
                            result = self.release_when_stopped(ended, reason).await;
                            // Leave the lease to the others before campaigning again: a
                            // polling follower tries at least every renew interval, and its
                            // try can take up to the database timeout.
                            self.not_before = Instant::now() + self.timing.release_hold_off();
                            self.set_role(Role::Follower { leader: None });
                        }
                        let _ = reply.send(result);
                    }
                    Some(Command::Pause) => {
                        self.paused = true;
                        if let Some(ended) = self.lose("campaigning paused on this node", Loss::Voluntary) {
                            self.release_or_warn(ended).await;
                        }
                        self.set_role(Role::Paused);
                    }
                    Some(Command::Resume) => {
                        if self.paused {
                            self.paused = false;
                            next = Instant::now();
                            self.set_role(Role::Unknown);
                        }
                    }
                },
                () = sleep_until_some(deadline) => {
                    self.lose("local deadline passed without a renewal", Loss::Deadline);
                    next = Instant::now();
                }
                () = self.changes.changed(|t| t == Topic::Lease(&self.name)) => {
                    stage(&self.name, "woken");
                    next = next.min(Instant::now());
                    // Campaign at once, not through the timer below: tokio rounds a timer up
                    // to its next whole millisecond tick. The database decides as ever: a
                    // signal while the lease is live (or a spurious one) is one refused try.
                    if !self.paused && Instant::now() >= self.not_before {
                        next = self.attempt().await;
                    }
                }
                () = sleep_until(self.registered_at + self.timing.renew_interval()),
                    if !self.paused && self.registered && Instant::now() < self.not_before => {
                    self.stay_registered().await;
                }
                () = sleep_until(next.max(self.not_before)), if !self.paused => {
                    next = self.attempt().await;
                }
            }
        }
    }

    /// While it holds off (after a demote its hold-off can outlast its ttl), the elector keeps
    /// its registration live without campaigning: it is still a live candidate (a handover
    /// may name it), but nobody waits for it.
    async fn stay_registered(&mut self) {
        self.registered_at = Instant::now();
        if let Err(e) = self.registry.keep_alive(&self.registration).await {
            tracing::debug!(name = %self.name, error = %e, "keeping the registration live failed");
        }
    }

    /// One campaign (an observer's: a registration); returns when to try next.
    async fn attempt(&mut self) -> Instant {
        self.registered_at = Instant::now();
        let op = Op::Campaign {
            candidate: self.me.clone(),
            term: self.tenure.as_ref().map(|t| t.belief.term()),
            ttl_ms: duration_ms(self.timing.ttl()),
            metadata: self.metadata.clone(),
            purpose: Purpose::Election,
        };
        let (registry, registration) = (self.registry.clone(), self.registration.clone());
        let store = self.store.clone();
        let registered = self.registered;
        let sent = Instant::now();
        tracing::debug!(name = %self.name, candidate = %self.me, "campaign sent");
        stage(&self.name, "campaign_sent");
        let call = async move {
            if !registered {
                return unregistered(&store, &registration, &op).await;
            }
            let standing_op = (!registration.observer).then_some(&op);
            match registry.campaign(&registration, standing_op).await {
                Err(Error::Unsupported(_)) => Err(Error::Unsupported("the candidate registry")),
                other => other,
            }
        };
        tokio::pin!(call);
        let result = loop {
            let deadline = self.tenure.as_ref().map(|t| t.belief.deadline());
            tokio::select! {
                biased;
                result = &mut call => break result,
                () = sleep_until_some(deadline) => {
                    self.lose("local deadline passed while the database did not answer", Loss::Deadline);
                }
            }
        };
        let received = Instant::now();
        if let Err(Error::Unsupported("the candidate registry")) = result {
            self.without_registry();
            return received;
        }
        let remaining = result.as_ref().ok().and_then(|applied| {
            let lease = applied.lease.as_ref()?;
            Some(Duration::from_millis(lease.remaining_ms(applied.now)))
        });
        telemetry::campaign(&self.name, received - sent, remaining);
        match result {
            Ok(applied) => {
                tracing::debug!(
                    name = %self.name,
                    candidate = %self.me,
                    effect = applied.effect.as_str(),
                    term = applied.lease.as_ref().map_or(0, |l| l.term),
                    "campaign answered"
                );
                self.on_answer(applied, sent, received).await
            }
            Err(e) => {
                tracing::warn!(name = %self.name, error = %e, "campaign failed");
                if self.tenure.is_some() {
                    // Retry soon: the deadline still runs from the last success.
                    received + self.timing.renew_interval() / 4
                } else {
                    self.set_role(Role::Unknown);
                    received + self.timing.renew_interval()
                }
            }
        }
    }

    async fn on_answer(&mut self, applied: Applied, sent: Instant, received: Instant) -> Instant {
        let Some(lease) = applied.lease.clone() else {
            // A campaign always leaves a row; an observer's may find none (nobody campaigned
            // yet). Anything else is doubt.
            self.set_role(if self.registration.observer {
                Role::Follower { leader: None }
            } else {
                Role::Unknown
            });
            return received + self.timing.renew_interval();
        };
        match &applied.effect {
            Effect::Acquired { .. } => self.on_granted(&applied, &lease, sent, received),
            Effect::Renewed => self.on_renewed(&applied, &lease, sent, received),
            Effect::SteppedDown(reason) => {
                if let Some(ended) = self.lose(&format!("stepped down: {reason:?}"), Loss::Replaced)
                {
                    self.release_or_warn(ended).await;
                }
                // No hold-off after a handover: the reservation keeps everyone but its target
                // out, and once it lapses (its target never came) this elector leads again at
                // its next poll.
                self.set_role(Role::Follower { leader: None });
                received + self.timing.renew_interval()
            }
            _ => self.on_held(&applied, &lease, received).await,
        }
    }

    /// The database began a new tenure for us (or we adopted one an immediate handover granted).
    fn on_granted(
        &mut self,
        applied: &Applied,
        lease: &Lease,
        sent: Instant,
        received: Instant,
    ) -> Instant {
        let term = lease.term;
        if self.tenure.is_some() {
            // A new term replaces the one we held (a forced grant to us, say).
            self.lose("the database granted a new term", Loss::Replaced);
        }
        if !self.ledger.may_hand_out(term) {
            tracing::error!(name = %self.name, term, "granted a term this elector already handed out; not believed");
            self.set_role(Role::Unknown);
            return received + self.timing.renew_interval();
        }
        let Some(deadline) = deadline_for(&self.timing, applied, sent, received) else {
            tracing::warn!(name = %self.name, term, "the database granted a term too late to believe; releasing it");
            self.ledger.ended(term);
            self.set_role(Role::Unknown);
            return received;
        };
        self.ledger.handed_out(term);
        stage(&self.name, "acquired");
        self.begin(term, deadline, sent, received);
        self.set_role(Role::Leader { term, deadline });
        sent + self.timing.renew_interval()
    }

    /// The database renewed the term we named.
    fn on_renewed(
        &mut self,
        applied: &Applied,
        lease: &Lease,
        sent: Instant,
        received: Instant,
    ) -> Instant {
        let Some(tenure) = &self.tenure else {
            // We named no term, so nothing can have been renewed: doubt.
            tracing::error!(name = %self.name, term = lease.term, "renewed a term this elector does not hold");
            self.set_role(Role::Unknown);
            return received + self.timing.renew_interval();
        };
        let renewed = tenure.belief.term() == lease.term
            && deadline_for(&self.timing, applied, sent, received)
                .is_some_and(|deadline| tenure.belief.extend(deadline, sent));
        if !renewed {
            self.lose(
                "the renewal answered after the local deadline",
                Loss::Deadline,
            );
            return received;
        }
        let (term, deadline) = (tenure.belief.term(), tenure.belief.deadline());
        self.set_role(Role::Leader { term, deadline });
        sent + self.timing.renew_interval()
    }

    /// Someone else holds the lease, or nobody may take it yet (lock-delay, pause, handover).
    async fn on_held(&mut self, applied: &Applied, lease: &Lease, received: Instant) -> Instant {
        let leader = LeaderInfo::from_lease(lease, applied.now);
        let remaining = Duration::from_millis(lease.remaining_ms(applied.now));
        if self.tenure.is_some() {
            let why = match &leader {
                Some(l) => format!("'{}' leads now (term {})", l.holder, l.term),
                None => "demoted".to_string(),
            };
            self.lose(&why, Loss::Replaced);
            if lease.holder.is_none() {
                // Demoted: let another live candidate take the lead after the lock-delay.
                self.not_before = received + remaining + self.timing.release_hold_off();
            }
        }
        if let Some(stale) = self.ledger.stale() {
            let ours = lease.holder.as_deref() == Some(self.me.as_str()) && lease.term == stale;
            if !ours {
                self.ledger.gone(stale);
            } else if let Err(e) = self.release_term(stale, None).await {
                tracing::warn!(name = %self.name, term = stale, error = %e, "release of a stale term failed; trying again");
                return Instant::now() + self.timing.renew_interval() / 4;
            } else {
                return Instant::now();
            }
        }
        self.set_role(Role::Follower { leader });
        let wait = if remaining.is_zero() {
            self.timing.renew_interval()
        } else {
            (remaining + self.timing.jitter()).min(self.timing.renew_interval())
        };
        received + wait
    }

    fn begin(&mut self, term: u64, deadline: Instant, sent: Instant, now: Instant) {
        tracing::info!(name = %self.name, candidate = %self.me, term, "leadership acquired");
        let seen = Seen::start(
            &self.name,
            telemetry::Role::Leader,
            term,
            sent,
            &self.timing,
        );
        let (belief, view) = Belief::new(term, deadline, seen);
        let (alive, stopped) = oneshot::channel();
        self.tenure = Some(Tenure { belief, stopped });
        let fence = self.store.fence().cloned();
        self.guard.send_replace(Some(LeaderGuard {
            tenure: crate::guard::Tenure::new(&self.name, &self.me, term, view, fence),
            acquired: now,
            commands: self.command_tx.clone(),
            _alive: Arc::new(alive),
        }));
    }

    /// The backend keeps no candidate registry (a test or wrapper backend without
    /// transactions): campaigns go to the lease alone from now on.
    fn without_registry(&mut self) {
        self.registered = false;
        let r = &self.registration;
        if r.priority != 0 || r.observer {
            tracing::warn!(
                name = %self.name,
                priority = r.priority,
                observer = r.observer,
                "this backend keeps no candidate registry: priorities and observers need one \
                 of the SQL backends; campaigning without them"
            );
        }
    }

    /// Ends the current tenure locally and returns it. Its term stays stale (released, never
    /// resumed) until a release of it is known to have landed.
    fn lose(&mut self, why: &str, loss: Loss) -> Option<Tenure> {
        let t = self.tenure.take()?;
        let term = t.belief.term();
        self.ledger.ended(term);
        // The role stops saying "leader" before anything else can observe the loss. A node
        // paused locally says so at once, not "follower" while the release waits for the work.
        self.set_role(if self.paused {
            Role::Paused
        } else if loss == Loss::Deadline {
            Role::Unknown
        } else {
            Role::Follower { leader: None }
        });
        if loss == Loss::Voluntary {
            tracing::info!(name = %self.name, candidate = %self.me, term, why, "leadership given up");
        } else {
            tracing::warn!(name = %self.name, candidate = %self.me, term, why, "leadership lost");
        }
        t.belief.end(match loss {
            Loss::Voluntary => Ended::Released,
            Loss::Replaced => Ended::Replaced,
            Loss::Deadline => Ended::Deadline,
        });
        self.guard.send_replace(None);
        Some(t)
    }

    /// Releases an ended tenure once its work has stopped (every guard dropped), or at its
    /// deadline at the latest, so that nobody can start while that work may still run.
    async fn release_when_stopped(&mut self, ended: Tenure, reason: Option<String>) -> Result<()> {
        let Tenure { belief, stopped } = ended;
        let term = belief.term();
        tokio::select! {
            _ = stopped => {}
            () = sleep_until(belief.deadline()) => {
                tracing::warn!(name = %self.name, term, "leader-only work still holds its guard at the deadline; releasing anyway");
            }
        }
        self.release_term(term, reason).await
    }

    /// Releases the stale term, if any, on shutdown: at least once, and again after a failure
    /// that may pass (the database did not answer in time, say) until `until` (the ended
    /// tenure's deadline), each try bounded by the database timeout.
    async fn release_stale_until(&mut self, until: Instant) {
        let pause = self.timing.db_timeout() / 4;
        while let Some(term) = self.ledger.stale() {
            let Err(e) = self.release_term(term, None).await else {
                continue;
            };
            if !e.is_transient() || Instant::now() + pause >= until {
                tracing::warn!(name = %self.name, term, error = %e, "release on shutdown failed; the lease will expire");
                return;
            }
            tracing::debug!(name = %self.name, term, error = %e, "release on shutdown failed; trying again");
            tokio::time::sleep(pause).await;
        }
    }

    async fn release_or_warn(&mut self, ended: Tenure) {
        let term = ended.belief.term();
        if let Err(e) = self.release_when_stopped(ended, None).await {
            tracing::warn!(name = %self.name, term, error = %e, "release failed; the term stays stale and the lease will expire");
        }
    }

    /// Releases `term` in the database; once that is known to have landed (released, or not
    /// ours any more) the term is no longer stale.
    async fn release_term(&mut self, term: u64, reason: Option<String>) -> Result<()> {
        let op = Op::Release {
            candidate: self.me.clone(),
            term,
            at_least_ms: 0,
            reason,
            purpose: Purpose::Election,
        };
        stage(&self.name, "release_sent");
        self.store.apply_valid(&self.name, &op, &self.me).await?;
        stage(&self.name, "released");
        self.ledger.gone(term);
        Ok(())
    }

    async fn stop(&mut self) {
        // A release that fails is worth trying again until the tenure's deadline: a successor
        // then need not wait out the ttl. After it the lease expires by itself.
        let mut until = Instant::now();
        if let Some(ended) = self.lose("elector stopped", Loss::Voluntary) {
            until = ended.belief.deadline();
            if let Err(e) = self.release_when_stopped(ended, None).await {
                tracing::debug!(name = %self.name, error = %e, "release on shutdown failed; trying again until the deadline");
            }
        }
        self.release_stale_until(until).await;
        // A clean stop leaves the registry at once, not a ttl later.
        if self.registered {
            if let Err(e) = self.registry.leave(&self.name, &self.me).await {
                tracing::debug!(name = %self.name, error = %e, "leaving the candidate registry failed; the registration expires");
            }
        }
        self.set_role(Role::Stopped);
    }

    /// Publishes `role`; watchers are woken only when the variant, term or leader changes, not
    /// for every renewal.
    fn set_role(&self, role: Role) {
        self.role.send_if_modified(|current| {
            let significant = match (&*current, &role) {
                (Role::Leader { term: a, .. }, Role::Leader { term: b, .. }) => a != b,
                (Role::Follower { leader: a }, Role::Follower { leader: b }) => {
                    a.as_ref().map(|l| (&l.holder, l.term))
                        != b.as_ref().map(|l| (&l.holder, l.term))
                }
                (a, b) => std::mem::discriminant(a) != std::mem::discriminant(b),
            };
            *current = role;
            significant
        });
    }
}

/// A campaign on a backend that keeps no registry: the lease alone (an observer only reads it).
async fn unregistered(store: &Store, registration: &Registration, op: &Op) -> Result<Applied> {
    let name = &registration.name;
    if registration.observer {
        let snapshot = store.get(name).await?;
        return Ok(Applied {
            now: snapshot.now,
            epoch: Default::default(),
            lease: snapshot.leases.into_iter().next(),
            effect: Effect::Unavailable,
        });
    }
    store.apply_valid(name, op, &registration.candidate).await
}

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A stage of a handover, for the benchmark's stage stamps (`TENURE_STAGE_STAMPS`, see the
/// CLI): a debug event of target `tenure::stage`, which no log shows unless asked for.
pub(crate) fn stage(name: &str, stage: &'static str) {
    tracing::debug!(target: "tenure::stage", name, stage);
}
