//! The lock workload: one [`Locks`] per node process, and several tasks of that process churning
//! a few lock names and one [`Semaphore`].
//!
//! Each task takes its lock (or a permit) with `try_lock` / `lock` (`try_acquire` / `acquire`),
//! with a ttl drawn from ttl/2, ttl and 3×ttl, then runs one to three rounds of the two
//! writes of the elector workload under the guard's term (the fenced register and the unfenced
//! control of that lease's slot), and ends by releasing, dropping or forgetting the guard. Right
//! after that it wakes the other tasks of its process that wait for the same lock, so that a
//! relock by the same holder id races the release: the way a worker pool sharing one `Locks`
//! uses it.
//!
//! Every guard is its own "node" in the history (`n1.1/t2#5`: node, task, acquisition), so the
//! checker sees two guards of one process as two believers, and a term handed to two guards as
//! a term gained twice.

use super::NodeConfig;
use crate::clock;
use crate::event::{EventLog, Kind, Resource};
use crate::resource::Db;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tenure::{LockGuard, LockOptions, Locks, Semaphore, Store, Tenure};
use tokio::sync::Notify;

/// Tasks per lock name in each process, and tasks on the semaphore.
const TASKS_PER_LOCK: u32 = 2;
const SEMAPHORE_TASKS: u32 = 2;

/// The lease names of the lock workload, derived from the scenario's name, and the register
/// slot of each. The runner and the nodes derive them the same way. In the spreading workload
/// ([`spread`](super::spread)) the `locks` are the shards of the group `base` (no permits).
#[derive(Clone, Debug)]
pub struct LockSet {
    pub base: String,
    pub locks: u32,
    pub permits: u32,
    /// The locks are a spreading group's shards: lock `i` is the lease `BASE/i`.
    pub spread: bool,
}

impl LockSet {
    pub fn lock(&self, i: u32) -> String {
        if self.spread {
            tenure::spread::shard_name(&self.base, i)
        } else {
            format!("{}.lock{i}", self.base)
        }
    }

    pub fn semaphore(&self) -> String {
        format!("{}.sem", self.base)
    }

    /// Every lease: the locks, then the semaphore's permits (`NAME#i`, as the library names
    /// them).
    pub fn leases(&self) -> Vec<String> {
        (0..self.locks)
            .map(|i| self.lock(i))
            .chain((0..self.permits).map(|i| format!("{}#{i}", self.semaphore())))
            .collect()
    }

    /// Register slots: one per lease.
    pub fn slots(&self) -> u32 {
        self.locks + self.permits
    }

    pub fn slot(&self, lease: &str) -> Option<u32> {
        let i = self.leases().iter().position(|l| l == lease)?;
        u32::try_from(i).ok()
    }
}

/// What one task contends for.
#[derive(Clone, Copy, Debug)]
enum Target {
    Lock(u32),
    Semaphore,
}

/// Runs the workload until the process is told to stop (the caller selects on the signals).
pub async fn run(
    config: Arc<NodeConfig>,
    set: LockSet,
    db: Db,
    store: Store,
    log: Arc<EventLog>,
) -> Result<(), String> {
    let locks = Locks::with_holder(store, &config.candidate).map_err(|e| e.to_string())?;
    let semaphore = locks
        .semaphore(&set.semaphore(), set.permits)
        .map_err(|e| e.to_string())?;
    // One wake-up per lock and one for the semaphore: the handoff to the process's own tasks.
    let handoffs: Vec<Arc<Notify>> = (0..=set.locks).map(|_| Arc::new(Notify::new())).collect();
    let targets = (0..set.locks * TASKS_PER_LOCK)
        .map(|t| Target::Lock(t % set.locks))
        .chain((0..SEMAPHORE_TASKS).map(|_| Target::Semaphore));
    let mut tasks = tokio::task::JoinSet::new();
    for (t, target) in targets.enumerate() {
        let handoff = match target {
            Target::Lock(i) => handoffs[i as usize].clone(),
            Target::Semaphore => handoffs[set.locks as usize].clone(),
        };
        let task = Task {
            id: format!("{}/t{t}", config.id),
            target,
            locks: locks.clone(),
            semaphore: semaphore.clone(),
            handoff,
            db: db.clone(),
            log: log.clone(),
            config: config.clone(),
            set: set.clone(),
            rng: StdRng::from_entropy(),
            acquisitions: 0,
        };
        tasks.spawn(task.churn());
    }
    match tasks.join_next().await {
        Some(Err(e)) => Err(format!("a lock task failed: {e}")),
        _ => Err("a lock task ended".into()),
    }
}

/// How a task lets go of a guard.
#[derive(Clone, Copy, Debug)]
enum LetGo {
    Release,
    Drop,
    Forget,
}

struct Task {
    /// `node/tN`; each guard adds `#acquisition`.
    id: String,
    target: Target,
    locks: Locks,
    semaphore: Semaphore,
    handoff: Arc<Notify>,
    db: Db,
    log: Arc<EventLog>,
    config: Arc<NodeConfig>,
    set: LockSet,
    rng: StdRng,
    acquisitions: u64,
}

impl Task {
    async fn churn(mut self) {
        let ttl = self.config.ttl;
        loop {
            let pause = Duration::from_millis(self.rng.gen_range(20..120));
            tokio::select! {
                () = self.handoff.notified() => {}
                () = tokio::time::sleep(pause) => {}
            }
            let at_most = match self.rng.gen_range(0..4) {
                0 => ttl / 2,
                1 => ttl * 3,
                _ => ttl,
            };
            // Every cycle in the database's history: the checker compares each guard's term
            // with the acquisition the database recorded.
            let options = LockOptions::default().ttl(at_most).record_every_cycle(true);
            let wait = self.rng.gen_bool(0.3);
            let got = match (self.target, wait) {
                (Target::Lock(i), false) => self.locks.try_lock(&self.set.lock(i), options).await,
                (Target::Lock(i), true) => self.locks.lock(&self.set.lock(i), options, ttl).await,
                (Target::Semaphore, false) => self.semaphore.try_acquire(options).await,
                (Target::Semaphore, true) => self.semaphore.acquire(options, ttl).await,
            };
            // A failed attempt (a timeout, say) is "not held"; the task simply tries again.
            if let Ok(Some(guard)) = got {
                self.hold(guard).await;
            }
        }
    }

    /// One tenure of a guard: its writes, then let go of it and wake the process's other tasks.
    async fn hold(&mut self, guard: LockGuard) {
        self.acquisitions += 1;
        let label = format!("{}#{}", self.id, self.acquisitions);
        let rounds = self.rng.gen_range(1..=3);
        let how = match self.rng.gen_range(0..5) {
            0 | 1 => LetGo::Release,
            2 | 3 => LetGo::Drop,
            _ => LetGo::Forget,
        };
        let Some(slot) = self.set.slot(guard.name()) else {
            return;
        };
        let worker = Worker {
            log: &self.log,
            config: &self.config,
            db: &self.db,
            holder: self.locks.holder(),
        };
        worker.tenure(&guard, &label, slot, Some(rounds)).await;
        match how {
            LetGo::Release => {
                let release = tokio::spawn(guard.release());
                self.handoff.notify_waiters();
                let _ = release.await;
            }
            LetGo::Drop => {
                drop(guard);
                self.handoff.notify_waiters();
            }
            LetGo::Forget => {
                guard.forget();
                self.handoff.notify_waiters();
            }
        }
    }
}

/// What the writes of a guard's tenure go through: the node's history, its settings, the
/// register, and the holder id the database knows the guard by.
pub(super) struct Worker<'a> {
    pub(super) log: &'a EventLog,
    pub(super) config: &'a NodeConfig,
    pub(super) db: &'a Db,
    pub(super) holder: &'a str,
}

impl Worker<'_> {
    /// One tenure of `guard` (the history's node `label`, register slot `slot`): gained, then
    /// up to `rounds` rounds of the two writes, the fenced register and the unfenced control
    /// (`None`: until the guard is lost), then stepped down — when the rounds are done or when
    /// the guard reports it lost, whichever comes first.
    pub(super) async fn tenure(&self, guard: &Tenure, label: &str, slot: u32, rounds: Option<u32>) {
        let lease = guard.name().to_string();
        let term = guard.term();
        let deadline = AtomicU64::new(clock::instant_ns(guard.deadline()));
        self.log.record_lock(
            label,
            &lease,
            Kind::Gained {
                term,
                deadline: deadline.load(Ordering::SeqCst),
                holder: Some(self.holder.to_string()),
            },
        );
        let writer = Writer {
            worker: self,
            guard,
            label,
            lease: &lease,
            slot,
            seq: AtomicU64::new(0),
            deadline,
        };
        let work = async {
            let mut done = 0;
            while rounds.is_none_or(|r| done < r) {
                let (fenced, control) = tokio::join!(
                    writer.operate(Resource::Fenced),
                    writer.operate(Resource::Unfenced)
                );
                if !fenced || !control {
                    return;
                }
                done += 1;
            }
        };
        tokio::pin!(work);
        // The end of belief is recorded when the guard reports it lost; the writes are not
        // cancelled (the control must stay naive), each loop notices at its next check.
        let lost = tokio::select! {
            () = &mut work => false,
            () = guard.lost() => true,
        };
        self.log
            .record_lock(label, &lease, Kind::SteppedDown { term });
        if lost {
            work.await;
        }
    }
}

/// The writes of one guard's tenure.
struct Writer<'a> {
    worker: &'a Worker<'a>,
    guard: &'a Tenure,
    label: &'a str,
    lease: &'a str,
    slot: u32,
    seq: AtomicU64,
    /// The last deadline recorded, to record each renewal once.
    deadline: AtomicU64,
}

impl Writer<'_> {
    /// One protected write; `false` if the guard was lost before it.
    async fn operate(&self, resource: Resource) -> bool {
        let log = self.worker.log;
        let config = self.worker.config;
        if self.guard.is_lost() {
            return false;
        }
        let term = self.guard.term();
        let deadline = clock::instant_ns(self.guard.deadline());
        if deadline > self.deadline.fetch_max(deadline, Ordering::SeqCst) {
            log.record_lock(self.label, self.lease, Kind::Renewed { term, deadline });
        }
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        log.record_lock(
            self.label,
            self.lease,
            Kind::OpIssued {
                resource,
                term,
                seq,
                deadline,
            },
        );
        tokio::time::sleep(config.work).await;
        let bound = config.ttl * 2;
        let write = self.worker.db.write(
            &config.table,
            self.slot,
            resource,
            (self.lease, self.worker.holder),
            (self.label, term, seq),
            || {},
        );
        let kind = super::answered(bound, write, resource, term, seq).await;
        log.record_lock(self.label, self.lease, kind);
        true
    }
}
