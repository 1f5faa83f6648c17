//! A member's task: every renew interval one transaction (register, read the live members and
//! the shards' owners), the model's plan, then the surplus surrendered and free shards taken.
//! Its shards' leases are renewed by its [`Locks`]' one keep-alive task, in one batch.

use super::guard::{Returned, ShardGuard};
use super::view::{Statements, Tick};
use crate::candidates::{Candidates, Registration};
use crate::config::Timing;
use crate::lock::{LockOptions, Locks};
use crate::model::spread::{plan, Member as Peer};
use crate::store::Store;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, OnceLock};
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

/// A shard whose guard this member handed out and that has not come back yet.
struct Local {
    term: u64,
    /// Cancelled when the guard's belief ends.
    lost: CancellationToken,
    /// Asked to give it back (a rebalance or a leave).
    surrendered: bool,
}

pub(super) struct Task {
    pub(super) store: Store,
    pub(super) group: String,
    pub(super) shards: u32,
    pub(super) cap: Option<u32>,
    pub(super) weight: u32,
    pub(super) timing: Timing,
    pub(super) options: LockOptions,
    pub(super) locks: Locks,
    pub(super) registry: Candidates,
    pub(super) registration: Registration,
    pub(super) statements: Arc<OnceLock<Statements>>,
    pub(super) send: mpsc::UnboundedSender<ShardGuard>,
    pub(super) owned: watch::Sender<BTreeSet<u32>>,
    /// Dropped guards come back here (`back` is what the guards send on).
    pub(super) back: mpsc::UnboundedSender<Returned>,
    pub(super) returns: mpsc::UnboundedReceiver<Returned>,
    pub(super) stop: CancellationToken,
}

impl Task {
    pub(super) async fn run(self) {
        let stop = self.stop.clone();
        let mut task = Running {
            task: self,
            local: BTreeMap::new(),
        };
        while !stop.is_cancelled() {
            task.tick().await;
            let next = Instant::now() + task.task.timing.renew_interval();
            // A guard coming back ends the wait: its shard may go to another member now.
            tokio::select! {
                () = sleep_until(next) => {}
                Some(returned) = task.task.returns.recv() => task.returned(returned).await,
                () = stop.cancelled() => break,
            }
        }
        task.leave().await;
    }
}

struct Running {
    task: Task,
    local: BTreeMap<u32, Local>,
}

impl Running {
    fn me(&self) -> &str {
        &self.task.registration.candidate
    }

    /// Publishes the shards the work holds and has not been asked to give back.
    fn publish(&self) {
        let owned: BTreeSet<u32> = self
            .local
            .iter()
            .filter(|(_, l)| !l.surrendered && !l.lost.is_cancelled())
            .map(|(&i, _)| i)
            .collect();
        self.task.owned.send_if_modified(|o| {
            let changed = *o != owned;
            *o = owned;
            changed
        });
    }

    /// A guard came back: its lease released (and the answer awaited) unless the work did.
    async fn returned(&mut self, returned: Returned) {
        let Returned { shard, term, lock } = returned;
        if let Some(lock) = lock {
            if let Err(e) = lock.release().await {
                tracing::warn!(group = self.task.group, shard, term, error = %e, "spread: releasing a shard failed; it expires by itself");
            }
        }
        if self.local.get(&shard).is_some_and(|l| l.term == term) {
            self.local.remove(&shard);
        }
        self.publish();
    }

    async fn tick(&mut self) {
        self.publish();
        let t = &self.task;
        let mut body = Tick {
            statements: &t.statements,
            registry: &t.registry,
            registration: &t.registration,
            count: t.shards,
            seen: None,
        };
        if let Err(e) = t.store.transaction(&mut body).await {
            tracing::warn!(group = t.group, error = %e, "spread: reading the group failed; trying again at the next interval");
            return;
        }
        let Some((_, others, shards)) = body.seen else {
            return;
        };
        let me = self.me().to_string();
        let mut members: Vec<Peer> = others
            .iter()
            .map(|c| Peer {
                id: c.candidate.clone(),
                weight: u32::try_from(c.priority).unwrap_or(1).max(1),
            })
            .collect();
        members.push(Peer {
            id: me.clone(),
            weight: t.weight,
        });
        // A shard with a guard here is ours unless the database shows another holder; one the
        // database shows under our id without a guard here is not (another process with the
        // same id, or a release still under way), so it is neither ours nor free.
        // A paused shard nobody holds is not free either: nobody may take it until resumed.
        let owners: Vec<Option<String>> = shards
            .owners
            .iter()
            .enumerate()
            .map(|(i, holder)| {
                let here = u32::try_from(i).is_ok_and(|i| self.local.contains_key(&i));
                match holder {
                    None if here => Some(me.clone()),
                    None if shards.paused[i] => Some("\u{0}paused".to_string()),
                    Some(h) if *h == me && !here => Some(format!("{me}\u{0}elsewhere")),
                    other => other.clone(),
                }
            })
            .collect();
        let plan = plan(&me, &owners, &members, t.cap);
        for shard in plan.release {
            if let Some(l) = self.local.get_mut(&shard).filter(|l| !l.surrendered) {
                tracing::info!(
                    group = t.group,
                    shard,
                    term = l.term,
                    "spread: giving a shard back"
                );
                t.locks
                    .surrender(&super::shard_name(&t.group, shard), l.term);
                l.surrendered = true;
            }
        }
        for shard in plan.take {
            if self.local.contains_key(&shard) || self.task.stop.is_cancelled() {
                continue;
            }
            let name = super::shard_name(&self.task.group, shard);
            match self.task.locks.try_lock(&name, self.task.options).await {
                Ok(Some(guard)) => self.hand_out(shard, guard),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(name, error = %e, "spread: taking a shard failed");
                    break;
                }
            }
        }
        self.publish();
    }

    fn hand_out(&mut self, shard: u32, guard: crate::lock::LockGuard) {
        let t = &self.task;
        let local = Local {
            term: guard.term(),
            lost: guard.lost_token(),
            surrendered: false,
        };
        tracing::info!(
            group = t.group,
            shard,
            term = local.term,
            "spread: took a shard"
        );
        let guard = ShardGuard::new(guard, shard, t.shards, t.back.clone());
        // Counted before it is sent: if the member's stream is gone (it is leaving), the guard
        // is dropped here, comes back, and its release is awaited like any other.
        self.local.insert(shard, local);
        drop(t.send.send(guard));
    }

    /// A clean leave: every shard surrendered, the work given until the leases would expire
    /// to drop its guards (each lease released as its guard comes back, the answer awaited),
    /// then the registration dropped.
    async fn leave(mut self) {
        let t = &self.task;
        for (&shard, l) in &mut self.local {
            if !l.surrendered {
                t.locks
                    .surrender(&super::shard_name(&t.group, shard), l.term);
                l.surrendered = true;
            }
        }
        self.publish();
        let give_up = Instant::now() + self.task.timing.ttl();
        while !self.local.is_empty() {
            tokio::select! {
                Some(returned) = self.task.returns.recv() => self.returned(returned).await,
                () = sleep_until(give_up) => break,
            }
        }
        let t = &self.task;
        if let Err(e) = t.registry.leave(&t.group, &t.registration.candidate).await {
            tracing::warn!(group = t.group, error = %e, "spread: leaving the registry failed; the registration expires by itself");
        }
    }
}
