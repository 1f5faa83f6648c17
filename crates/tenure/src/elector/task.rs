//! The campaign loop behind an [`Elector`](super::Elector).

use super::{Command, LeaderGuard, Role};
use crate::config::Timing;
use crate::error::Result;
use crate::model::{Effect, Op};
use crate::store::{duration_ms, LeaderInfo, Store};
use crate::Applied;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::{CancellationToken, DropGuard};

/// Why a tenure ended locally.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Loss {
    /// Released, paused or stopped by this node.
    Voluntary,
    /// Demoted, paused, handed over or taken over, as the database said.
    Replaced,
    /// The local deadline passed; the database may still name us with this term.
    Deadline,
}

/// The tenure this elector believes it holds.
pub(super) struct Tenure {
    term: u64,
    deadline: Instant,
    /// Publishes `deadline` to the guards.
    deadline_tx: watch::Sender<Instant>,
    token: CancellationToken,
    /// Completes when every clone of this tenure's guard has been dropped: its work stopped.
    stopped: oneshot::Receiver<()>,
    /// Fires the guard's signal if the task is dropped (aborted, panicked) while leading.
    _on_drop: DropGuard,
}

pub(super) struct Task {
    pub store: Store,
    pub name: String,
    pub me: String,
    pub metadata: Option<String>,
    pub timing: Timing,
    pub role: watch::Sender<Role>,
    pub guard: watch::Sender<Option<LeaderGuard>>,
    pub commands: mpsc::Receiver<Command>,
    pub command_tx: mpsc::WeakSender<Command>,
    pub notifications: Option<broadcast::Receiver<String>>,
    pub tenure: Option<Tenure>,
    /// A term whose belief ended locally (deadline) while the database may still name us: it
    /// is released, never resumed.
    pub stale_term: Option<u64>,
    /// Campaigning paused on this node.
    pub paused: bool,
    /// No campaign before this instant (after a voluntary release, whatever wakes us).
    pub not_before: Instant,
}

impl Task {
    pub async fn run(mut self) {
        let mut next = Instant::now();
        loop {
            let deadline = self.tenure.as_ref().map(|t| t.deadline);
            tokio::select! {
                biased;
                command = self.commands.recv() => match command {
                    None => return self.stop().await,
                    Some(Command::Shutdown { reply }) => {
                        self.stop().await;
                        let _ = reply.send(());
                        return;
                    }
                    Some(Command::Release { term, reply }) => {
                        let current = self.tenure.as_ref().is_some_and(|t| t.term == term);
                        let result = if current { self.release_current("released").await } else { Ok(()) };
                        if current {
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
                            self.release_when_stopped(ended).await;
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
                    self.set_role(Role::Unknown);
                    next = Instant::now();
                }
                () = crate::backend::wait_for_change(&mut self.notifications, |n| n == self.name) => {
                    next = next.min(Instant::now());
                }
                () = sleep_until(next.max(self.not_before)), if !self.paused => {
                    next = self.attempt().await;
                }
            }
        }
    }

    /// One campaign; returns when to try next.
    async fn attempt(&mut self) -> Instant {
        let op = Op::Campaign {
            candidate: self.me.clone(),
            ttl_ms: duration_ms(self.timing.ttl()),
            metadata: self.metadata.clone(),
        };
        let (store, name, me, timeout) = (
            self.store.clone(),
            self.name.clone(),
            self.me.clone(),
            self.timing.db_timeout(),
        );
        let sent = Instant::now();
        tracing::debug!(name = %self.name, candidate = %self.me, "campaign sent");
        let call = async move { store.apply_within(timeout, &name, &op, &me).await };
        tokio::pin!(call);
        let result = loop {
            let deadline = self.tenure.as_ref().map(|t| t.deadline);
            tokio::select! {
                result = &mut call => break result,
                () = sleep_until_some(deadline) => {
                    self.lose("local deadline passed while the database did not answer", Loss::Deadline);
                    self.set_role(Role::Unknown);
                }
            }
        };
        let received = Instant::now();
        let name = self.name.clone();
        metrics::histogram!("tenure_campaign_seconds", "name" => name.clone())
            .record((received - sent).as_secs_f64());
        match result {
            Ok(applied) => {
                tracing::debug!(
                    name = %self.name,
                    candidate = %self.me,
                    effect = applied.effect.as_str(),
                    term = applied.lease.as_ref().map_or(0, |l| l.term),
                    "campaign answered"
                );
                if let Some(lease) = &applied.lease {
                    metrics::gauge!("tenure_lease_remaining_seconds", "name" => name)
                        .set(lease.remaining_ms(applied.now) as f64 / 1000.0);
                }
                self.on_answer(applied, sent, received).await
            }
            Err(e) => {
                metrics::counter!("tenure_database_errors_total", "name" => name).increment(1);
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
        let Some(lease) = applied.lease.as_ref() else {
            // A campaign always leaves a row; treat anything else as doubt.
            self.set_role(Role::Unknown);
            return received + self.timing.renew_interval();
        };
        match &applied.effect {
            Effect::Acquired { .. } | Effect::Renewed => {
                let term = lease.term;
                let deadline = sent + self.timing.belief();
                if received >= deadline {
                    self.lose(
                        "the database answered after the local deadline",
                        Loss::Deadline,
                    );
                    self.stale_term = Some(term);
                    self.set_role(Role::Unknown);
                    return received;
                }
                if self.tenure.as_ref().is_some_and(|t| t.term != term) {
                    self.lose("the database reports a different term", Loss::Deadline);
                }
                if self.tenure.is_none() && self.stale_term == Some(term) {
                    // Our belief in this term ended; start a fresh term instead of resuming.
                    // Until the release is known to have landed the term stays stale, so a
                    // later renewal of it (the release timed out, say) is released again and
                    // never taken for a new tenure.
                    return match self.release_term(term).await {
                        Ok(()) => {
                            self.stale_term = None;
                            Instant::now()
                        }
                        Err(e) => {
                            tracing::warn!(name = %self.name, term, error = %e, "release of a stale term failed; trying again");
                            Instant::now() + self.timing.renew_interval() / 4
                        }
                    };
                }
                self.stale_term = None;
                match &mut self.tenure {
                    Some(t) => {
                        t.deadline = deadline;
                        t.deadline_tx.send_replace(deadline);
                    }
                    None => self.begin(term, deadline, received),
                }
                self.set_role(Role::Leader { term, deadline });
                sent + self.timing.renew_interval()
            }
            Effect::SteppedDown(reason) => {
                match self.lose(&format!("stepped down: {reason:?}"), Loss::Replaced) {
                    Some(ended) => self.release_when_stopped(ended).await,
                    // A term whose belief already ended: nothing of ours runs under it.
                    None => self.release_or_warn(lease.term).await,
                }
                self.stale_term = None;
                self.set_role(Role::Follower { leader: None });
                received + self.timing.renew_interval()
            }
            _ => {
                let leader = LeaderInfo::from_lease(lease, applied.now);
                if self.tenure.is_some() {
                    let why = match &leader {
                        Some(l) => format!("'{}' leads now (term {})", l.holder, l.term),
                        None => "demoted".to_string(),
                    };
                    self.lose(&why, Loss::Replaced);
                }
                self.set_role(Role::Follower { leader });
                let remaining = Duration::from_millis(lease.remaining_ms(applied.now));
                let wait = if remaining.is_zero() {
                    self.timing.renew_interval()
                } else {
                    (remaining + self.timing.jitter()).min(self.timing.renew_interval())
                };
                received + wait
            }
        }
    }

    fn begin(&mut self, term: u64, deadline: Instant, now: Instant) {
        tracing::info!(name = %self.name, candidate = %self.me, term, "leadership acquired");
        let name = self.name.clone();
        metrics::counter!("tenure_transitions_total", "name" => name.clone(), "event" => "acquired")
            .increment(1);
        metrics::gauge!("tenure_is_leader", "name" => name.clone()).set(1.0);
        metrics::gauge!("tenure_term", "name" => name).set(term as f64);
        let token = CancellationToken::new();
        let (alive, stopped) = oneshot::channel();
        let (deadline_tx, deadline_rx) = watch::channel(deadline);
        self.tenure = Some(Tenure {
            term,
            deadline,
            deadline_tx,
            token: token.clone(),
            stopped,
            _on_drop: token.clone().drop_guard(),
        });
        self.guard.send_replace(Some(LeaderGuard {
            name: self.name.clone(),
            candidate: self.me.clone(),
            term,
            acquired: now,
            lost: token,
            deadline: deadline_rx,
            commands: self.command_tx.clone(),
            _alive: Arc::new(alive),
        }));
    }

    /// Ends the current tenure locally and returns it.
    fn lose(&mut self, why: &str, loss: Loss) -> Option<Tenure> {
        let t = self.tenure.take()?;
        let stale = loss == Loss::Deadline;
        let name = self.name.clone();
        metrics::counter!("tenure_transitions_total", "name" => name.clone(), "event" => "lost")
            .increment(1);
        metrics::gauge!("tenure_is_leader", "name" => name).set(0.0);
        // The role stops saying "leader" before anything else can observe the loss.
        self.set_role(if stale {
            Role::Unknown
        } else {
            Role::Follower { leader: None }
        });
        if loss == Loss::Voluntary {
            tracing::info!(name = %self.name, candidate = %self.me, term = t.term, why, "leadership given up");
        } else {
            tracing::warn!(name = %self.name, candidate = %self.me, term = t.term, why, "leadership lost");
        }
        t.token.cancel();
        if stale {
            self.stale_term = Some(t.term);
        }
        self.guard.send_replace(None);
        Some(t)
    }

    /// Releases an ended tenure once its work has stopped (every guard dropped), or at its
    /// deadline at the latest, so that nobody can start while that work may still run.
    async fn release_when_stopped(&mut self, ended: Tenure) {
        let Tenure {
            term,
            deadline,
            stopped,
            ..
        } = ended;
        tokio::select! {
            _ = stopped => {}
            () = sleep_until(deadline) => {
                tracing::warn!(name = %self.name, term, "leader-only work still holds its guard at the deadline; releasing anyway");
            }
        }
        self.release_or_warn(term).await;
    }

    async fn release_term(&self, term: u64) -> Result<()> {
        let op = Op::Release {
            candidate: self.me.clone(),
            term,
            at_least_ms: 0,
        };
        self.store
            .apply_within(self.timing.db_timeout(), &self.name, &op, &self.me)
            .await
            .map(|_| ())
    }

    async fn release_or_warn(&self, term: u64) {
        if let Err(e) = self.release_term(term).await {
            tracing::warn!(name = %self.name, term, error = %e, "release failed; the lease will expire");
        }
    }

    /// Ends the current tenure locally, then releases it in the database at once.
    async fn release_current(&mut self, why: &str) -> Result<()> {
        match self.lose(why, Loss::Voluntary) {
            Some(ended) => self.release_term(ended.term).await,
            None => Ok(()),
        }
    }

    async fn stop(&mut self) {
        if let Err(e) = self.release_current("elector stopped").await {
            tracing::warn!(name = %self.name, error = %e, "release on shutdown failed; the lease will expire");
        }
        if let Some(term) = self.stale_term.take() {
            self.release_or_warn(term).await;
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

async fn sleep_until_some(deadline: Option<Instant>) {
    match deadline {
        Some(d) => sleep_until(d).await,
        None => std::future::pending().await,
    }
}
