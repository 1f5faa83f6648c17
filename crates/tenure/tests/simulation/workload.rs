//! The workload: holders (processes, each its own `Store`, `Locks` and electors over one
//! shared backend) running many tasks, and an operator. Only tenure's public API is used.
//! Every task draws its choices from its own generator, forked from the schedule's seed.

use crate::checker::{Checker, Probe};
use crate::faults::{FaultProfile, FaultyBackend};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::Backend;
use tenure::{Elector, LockGuard, LockOptions, Locks, Semaphore, Store, Timing};
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, Instant};

/// Which features a schedule uses. `Only::Hole*` restricts the mix to the features that reach
/// one of issue 11's holes, to attribute failures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Only {
    All,
    /// Relock right after a release (drop, `release()`, `forget()`) from the same `Locks`.
    Hole1,
    /// Two tasks of one process take one lock with ttl ttl/2 and 60 s.
    Hole2,
    /// Failed releases, local pause/resume, cluster pause/resume of electors.
    Hole3,
    /// Two processes campaign with the same candidate id.
    Hole4,
}

impl Only {
    pub(crate) fn parse(s: &str) -> Option<Only> {
        Some(match s {
            "all" => Only::All,
            "hole1" => Only::Hole1,
            "hole2" => Only::Hole2,
            "hole3" => Only::Hole3,
            "hole4" => Only::Hole4,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Mix {
    pub holders: usize,
    /// Lock tasks per holder, on `lock_names` names.
    pub lock_tasks: usize,
    pub lock_names: usize,
    /// a ttl of ttl/2 or 60 s (else the ttl).
    pub long_and_short: bool,
    /// Guards end by release, drop or forget after a while (else they are held until lost).
    pub lock_releases: bool,
    /// Semaphore tasks per holder, on one semaphore of 2 permits.
    pub semaphore_tasks: usize,
    /// One elector per holder on one election.
    pub electors: bool,
    /// The electors of holders 0 and 1 share one candidate id.
    pub shared_id: bool,
    /// Electors release explicitly and pause/resume locally.
    pub elector_releases: bool,
    /// An operator pauses/resumes, hands over (graceful) and demotes (not immediate).
    pub operator: bool,
    pub faults: FaultProfile,
    /// The backend pushes notifications (as PostgreSQL does).
    pub push: bool,
    /// Electors have random priorities, one more holder only observes, and a candidate of
    /// the highest priority comes and goes in a loop (a flapping preferred leader). Only on
    /// real databases: the in-memory backend keeps no candidate registry.
    pub priorities: bool,
    /// Each holder is also a member of one spreading group that comes and goes
    /// (`spreading.rs`). Only on real databases: the in-memory backend has no transactions.
    pub spread: bool,
}

impl Mix {
    pub(crate) fn draw(only: Only, rng: &mut StdRng) -> Mix {
        let quiet = Mix {
            holders: 2,
            lock_tasks: 0,
            lock_names: 1,
            long_and_short: false,
            lock_releases: true,
            semaphore_tasks: 0,
            electors: false,
            shared_id: false,
            elector_releases: false,
            operator: false,
            faults: FaultProfile::NONE,
            push: rng.gen_bool(0.5),
            priorities: false,
            spread: false,
        };
        match only {
            Only::All => Mix {
                holders: rng.gen_range(2..=3),
                lock_tasks: rng.gen_range(0..=3),
                lock_names: rng.gen_range(1..=2),
                long_and_short: rng.gen_bool(0.3),
                lock_releases: rng.gen_bool(0.8),
                semaphore_tasks: rng.gen_range(0..=2),
                electors: rng.gen_bool(0.7),
                shared_id: rng.gen_bool(0.3),
                elector_releases: rng.gen_bool(0.7),
                operator: rng.gen_bool(0.6),
                faults: FaultProfile {
                    rate: [0.0, 0.03, 0.1, 0.2][rng.gen_range(0..4)],
                    delays_only: rng.gen_bool(0.3),
                    round_trip_ms: [0, 2, 10][rng.gen_range(0..3)],
                },
                ..quiet
            },
            Only::Hole1 => Mix {
                lock_tasks: 3,
                faults: FaultProfile {
                    rate: 0.3,
                    delays_only: true,
                    round_trip_ms: 5,
                },
                ..quiet
            },
            Only::Hole2 => Mix {
                lock_tasks: 2,
                long_and_short: true,
                lock_releases: false,
                faults: FaultProfile {
                    round_trip_ms: 10,
                    ..FaultProfile::NONE
                },
                ..quiet
            },
            Only::Hole3 => Mix {
                electors: true,
                elector_releases: true,
                operator: true,
                faults: FaultProfile {
                    rate: 0.15,
                    delays_only: false,
                    round_trip_ms: 5,
                },
                ..quiet
            },
            Only::Hole4 => Mix {
                electors: true,
                shared_id: true,
                ..quiet
            },
        }
    }
}

/// One run of the workload.
pub(crate) struct Plan {
    pub mix: Mix,
    pub seed: u64,
    /// Prepended to every name (unique per run on a shared database).
    pub prefix: String,
    pub ttl: Duration,
    pub end: Instant,
}

impl Plan {
    pub(crate) fn election(&self) -> String {
        format!("{}elect", self.prefix)
    }
    fn lock_name(&self, k: usize) -> String {
        format!("{}lock{k}", self.prefix)
    }
    fn semaphore_name(&self) -> String {
        format!("{}sem", self.prefix)
    }
    fn candidate(&self, holder: usize) -> String {
        if self.mix.shared_id && holder < 2 {
            "shared".to_string()
        } else {
            format!("p{holder}")
        }
    }
    pub(crate) fn timing(&self) -> Timing {
        Timing::from_ttl(self.ttl).expect("a safe ttl")
    }
    fn lock_options(&self, rng: &mut StdRng) -> LockOptions {
        if self.mix.long_and_short {
            let at_most = if rng.gen_bool(0.5) {
                self.ttl / 2
            } else {
                Duration::from_secs(60)
            };
            return LockOptions::default().ttl(at_most);
        }
        let at_least = if rng.gen_bool(0.1) {
            self.ttl / 3
        } else {
            Duration::ZERO
        };
        LockOptions::default()
            .ttl(self.ttl)
            .at_least(at_least)
            .keep_alive(!self.mix.lock_releases || rng.gen_bool(0.8))
    }
    /// A generator for task `label`, independent of the other tasks' draws.
    pub(crate) fn fork(&self, label: u64) -> StdRng {
        StdRng::seed_from_u64(self.seed ^ label.wrapping_mul(0x9E37_79B9_7F4A_7C15))
    }
}

pub(crate) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Starts every task of `plan` in `tasks`, over `backend`.
pub(crate) fn spawn(
    plan: Arc<Plan>,
    backend: Arc<dyn Backend>,
    checker: Arc<Checker>,
    tasks: &mut JoinSet<()>,
) {
    let timeout = plan.timing().db_timeout();
    let store_for = |who: &str, label: u64| {
        let faulty = FaultyBackend::new(
            backend.clone(),
            who,
            plan.seed ^ label.wrapping_mul(0xD6E8_FEB8_6659_FD93),
            plan.mix.faults,
            checker.clone(),
        );
        Store::from_backend(Arc::new(faulty), timeout)
    };
    let mut label = 0;
    let mut next = || {
        label += 1;
        label
    };
    let mix = &plan.mix;
    let semaphore = plan.semaphore_name();
    if mix.semaphore_tasks > 0 {
        checker.semaphore(&semaphore, 2);
    }
    for h in 0..mix.holders {
        let store = store_for(&format!("p{h}"), next());
        let locks = Locks::with_holder(store.clone(), format!("p{h}-locks")).expect("valid id");
        for t in 0..mix.lock_tasks {
            let target = Target::Lock(plan.lock_name(t % mix.lock_names));
            let task = LockTask::new(&plan, &checker, &locks, format!("p{h}/lock{t}"), target);
            tasks.spawn(task.run(plan.fork(next())));
        }
        for t in 0..mix.semaphore_tasks {
            let sem = locks.semaphore(&semaphore, 2).expect("valid semaphore");
            let owner = format!("p{h}/sem{t}");
            let task = LockTask::new(&plan, &checker, &locks, owner, Target::Permit(sem));
            tasks.spawn(task.run(plan.fork(next())));
        }
        if mix.spread {
            let task = crate::spreading::member(
                plan.clone(),
                checker.clone(),
                store.clone(),
                h,
                plan.fork(next()),
            );
            tasks.spawn(task);
        }
        if mix.electors {
            let priority = if mix.priorities {
                plan.fork(next()).gen_range(-1..=2)
            } else {
                0
            };
            let elector = Elector::builder(store.clone(), plan.election())
                .candidate(plan.candidate(h))
                .priority(priority)
                .timing(plan.timing())
                .spawn()
                .expect("valid elector");
            let owner = format!("p{h}/elector({})", plan.candidate(h));
            let task = elect(
                plan.clone(),
                checker.clone(),
                Arc::new(elector),
                owner,
                plan.fork(next()),
            );
            tasks.spawn(task);
        }
    }
    if mix.electors && mix.priorities {
        let store = store_for("observer", next());
        let observer = Elector::builder(store, plan.election())
            .candidate("observer")
            .priority(9)
            .observe()
            .timing(plan.timing())
            .spawn()
            .expect("valid observer");
        tasks.spawn(observe(checker.clone(), observer));
        let store = store_for("flapper", next());
        tasks.spawn(flap(
            plan.clone(),
            checker.clone(),
            store,
            plan.fork(next()),
        ));
    }
    if mix.operator {
        let store = store_for("operator", next());
        tasks.spawn(operate(plan.clone(), store, plan.fork(next())));
    }
}

/// An observer of the election: it must never lead, whatever its priority.
async fn observe(checker: Arc<Checker>, observer: Elector) {
    let mut role = observer.role();
    loop {
        if role.borrow_and_update().is_leader() {
            let detail = "the observer (priority 9) believes it leads".to_string();
            checker.violated("observers-never-lead", detail);
            return;
        }
        if role.changed().await.is_err() {
            return;
        }
    }
}

/// A preferred leader that comes and goes: an elector of the highest priority that runs for a
/// while (taking the lead by handover, or by failover), then stops — cleanly or as a crash —
/// and comes back, in a loop. Its tenures are checked as every elector's.
async fn flap(plan: Arc<Plan>, checker: Arc<Checker>, store: Store, mut rng: StdRng) {
    let mut round = 0;
    while Instant::now() < plan.end {
        round += 1;
        let owner = format!("flapper/{round}");
        let elector = Elector::builder(store.clone(), plan.election())
            .candidate(format!("flapper-{round}"))
            .priority(5)
            .timing(plan.timing())
            .spawn()
            .expect("valid elector");
        let run = ms(rng.gen_range(200..2000));
        let crash = rng.gen_bool(0.5);
        let elector = Arc::new(elector);
        let task = tokio::spawn(elect(
            plan.clone(),
            checker.clone(),
            elector.clone(),
            owner.clone(),
            plan.fork(rng.gen()),
        ));
        sleep(run).await;
        task.abort();
        let _ = task.await;
        checker.event(format!(
            "{owner} {}",
            if crash { "crashes" } else { "stops" }
        ));
        let Ok(elector) = Arc::try_unwrap(elector) else {
            unreachable!("the only other handle was the aborted task's")
        };
        if crash {
            elector.abort();
        } else {
            elector.shutdown().await;
        }
        sleep(ms(rng.gen_range(0..1000))).await;
    }
}

#[derive(Clone)]
enum Target {
    Lock(String),
    Permit(Semaphore),
}

#[derive(Clone)]
struct LockTask {
    plan: Arc<Plan>,
    checker: Arc<Checker>,
    locks: Locks,
    owner: String,
    target: Target,
}

impl LockTask {
    fn new(
        plan: &Arc<Plan>,
        checker: &Arc<Checker>,
        locks: &Locks,
        owner: String,
        target: Target,
    ) -> Self {
        LockTask {
            plan: plan.clone(),
            checker: checker.clone(),
            locks: locks.clone(),
            owner,
            target,
        }
    }

    async fn run(self, mut rng: StdRng) {
        // Guards held until lost: every task starts at once, as at a process's start.
        let mut first = !self.plan.mix.lock_releases;
        loop {
            // Often at once, mostly soon, sometimes much later (a caller that gave up).
            let pause = match rng.gen_range(0..10) {
                _ if std::mem::take(&mut first) => 0,
                0..=2 => 0,
                3..=7 => rng.gen_range(0..300),
                _ => rng.gen_range(300..2000),
            };
            sleep(ms(pause)).await;
            let wait = rng.gen_bool(0.4).then(|| ms(rng.gen_range(0..1000)));
            if let Some(guard) = self.take(wait, &mut rng).await {
                self.hold(guard, &mut rng).await;
            }
        }
    }

    /// `try_lock`, or `lock` waiting up to `wait`.
    async fn take(&self, wait: Option<Duration>, rng: &mut StdRng) -> Option<LockGuard> {
        let options = self.plan.lock_options(rng);
        let taken = match (&self.target, wait) {
            (Target::Lock(name), None) => self.locks.try_lock(name, options).await,
            (Target::Lock(name), Some(w)) => self.locks.lock(name, options, w).await,
            (Target::Permit(sem), None) => sem.try_acquire(options).await,
            (Target::Permit(sem), Some(w)) => sem.acquire(options, w).await,
        };
        self.checker.check();
        taken.unwrap_or_else(|e| {
            self.checker
                .event(format!("{} lock failed: {e}", self.owner));
            None
        })
    }

    /// Holds a new guard for a while (or until lost), then ends it.
    async fn hold(&self, guard: LockGuard, rng: &mut StdRng) {
        let guard = Arc::new(guard);
        let (name, term) = (guard.name().to_string(), guard.term());
        let id = self
            .checker
            .register(&name, term, &self.owner, Probe::Lock(guard.clone()));
        let until = if self.plan.mix.lock_releases {
            Instant::now() + ms(rng.gen_range(0..1500))
        } else {
            self.plan.end
        };
        let lost = tokio::select! {
            biased;
            () = guard.lost() => true,
            () = sleep_until(until) => false,
        };
        if lost {
            self.checker.saw_lost(id);
            sleep(ms(rng.gen_range(0..200))).await;
        }
        // Its end (release, drop, forget) marks it lost before any await: nothing to watch.
        self.checker.retire(id);
        let guard = Arc::try_unwrap(guard).expect("only this task holds the guard");
        let what = match rng.gen_range(0..10) {
            0..=3 => {
                if rng.gen_bool(0.5) {
                    self.relock_from_another_task(rng.gen());
                }
                let released = guard.release().await;
                format!("release: {released:?}")
            }
            4..=7 => {
                drop(guard);
                "drop".to_string()
            }
            _ => {
                guard.forget();
                "forget".to_string()
            }
        };
        self.checker
            .event(format!("{} ended {name} term {term}: {what}", self.owner));
    }

    /// Another task of the same `Locks` tries the lock while this one releases it.
    fn relock_from_another_task(&self, seed: u64) {
        let mut sibling = self.clone();
        sibling.owner.push('+');
        let task: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(async move {
            let mut rng = StdRng::seed_from_u64(seed);
            if let Some(guard) = sibling.take(None, &mut rng).await {
                sibling.hold(guard, &mut rng).await;
            }
        });
        tokio::spawn(task);
    }
}

/// An elector's task: registers each new tenure, then holds, releases or pauses it.
async fn elect(
    plan: Arc<Plan>,
    checker: Arc<Checker>,
    elector: Arc<Elector>,
    owner: String,
    mut rng: StdRng,
) {
    let name = plan.election();
    let mut last: Option<(u64, Instant, u64)> = None;
    loop {
        let Ok(guard) = elector.wait_until_leader().await else {
            return;
        };
        let id = match last {
            // The same tenure again: still held, or lost and held again (the checker's concern).
            Some((term, acquired, id)) if (term, acquired) == (guard.term(), guard.acquired()) => {
                id
            }
            _ => {
                let id =
                    checker.register(&name, guard.term(), &owner, Probe::Leader(guard.clone()));
                let (token, watcher) = (guard.lost_token(), checker.clone());
                tokio::spawn(async move {
                    token.cancelled().await;
                    watcher.retire(id);
                });
                last = Some((guard.term(), guard.acquired(), id));
                id
            }
        };
        let action = if plan.mix.elector_releases {
            rng.gen_range(0..3)
        } else {
            0
        };
        let until = Instant::now() + ms(rng.gen_range(0..1500));
        let lost = tokio::select! {
            biased;
            () = guard.lost() => true,
            () = sleep_until(until), if action > 0 => false,
        };
        if lost {
            checker.saw_lost(id);
            continue;
        }
        let term = guard.term();
        if action == 1 {
            let released = guard.release().await;
            checker.event(format!("{owner} released {name} term {term}: {released:?}"));
        } else {
            drop(guard);
            checker.event(format!("{owner} pauses campaigning (term {term})"));
            let _ = elector.pause().await;
            sleep(ms(rng.gen_range(0..800))).await;
            checker.event(format!("{owner} resumes campaigning"));
            let _ = elector.resume().await;
        }
    }
}

/// The operator: cluster pause/resume, graceful handover, demote (never the unsafe variants).
async fn operate(plan: Arc<Plan>, store: Store, mut rng: StdRng) {
    let mut names = vec![];
    if plan.mix.electors {
        names.push(plan.election());
    }
    names.extend((0..plan.mix.lock_names.min(plan.mix.lock_tasks)).map(|k| plan.lock_name(k)));
    if plan.mix.semaphore_tasks > 0 {
        names.extend((0..2).map(|i| format!("{}#{i}", plan.semaphore_name())));
    }
    if names.is_empty() {
        return;
    }
    loop {
        sleep(ms(rng.gen_range(200..900))).await;
        let name = &names[rng.gen_range(0..names.len())];
        // The wrapper's trace records each call and its answer.
        match rng.gen_range(0..3) {
            0 => {
                let _ = store.pause(name, "op").await;
                sleep(ms(rng.gen_range(100..700))).await;
                for _ in 0..5 {
                    if store.resume(name, "op").await.is_ok() {
                        break;
                    }
                    sleep(ms(50)).await;
                }
            }
            1 => {
                let to = if *name == plan.election() {
                    plan.candidate(rng.gen_range(0..plan.mix.holders))
                } else {
                    format!("p{}-locks", rng.gen_range(0..plan.mix.holders))
                };
                let _ = store.handover(name, &to, false, "op").await;
            }
            _ => {
                let _ = store.demote(name, false, "op").await;
            }
        }
    }
}
