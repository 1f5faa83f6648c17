//! Lock cycles — take a free lock, release it — per second and their latency, on one task and
//! on eight concurrent tasks (each on its own lock name): tenure's `Locks::try_lock` +
//! `LockGuard::release`, the raw SQL of [`crate::raw`], seed 004's `cluster_lock`, and etcd through its gateway. (kazoo's
//! Lock runs in Python processes of its own: [`crate::zookeeper::ZooKeeper::lock_cycles`].)
//! [`rows`] sets tenure's figures beside raw SQL's and the peers'.

use crate::db::{Engine, Target};
use crate::etcd::Http;
use crate::peer::Peer;
use crate::plan::Plan;
use crate::raw::Raw;
use crate::report::{at_least, cycles, ratio, times, Row, Throughput};
use std::sync::Arc;
use std::time::Duration;
use tenure::{LockOptions, Locks, Store, StoreOptions};
use tokio::time::Instant;

/// What takes and releases.
pub(crate) enum System {
    Tenure(Locks),
    Raw(Raw),
    /// Seed 004's `cluster_lock` (see [`crate::seeds::cluster_lock_statements`]).
    Seed(Raw),
    /// etcd with one session lease shared by every lock, as `concurrency.Session` does.
    Etcd {
        http: Box<Http>,
        lease: String,
    },
}

impl System {
    async fn cycle(&self, name: &str) -> Result<(), String> {
        match self {
            System::Tenure(locks) => {
                let guard = locks
                    .try_lock(name, LockOptions::default())
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("tenure: {name} was not free"))?;
                guard.release().await.map_err(|e| e.to_string())
            }
            System::Raw(raw) => {
                let term = raw
                    .take(name, "bench")
                    .await
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("raw: {name} was not free"))?;
                raw.release(name, "bench", term)
                    .await
                    .map_err(|e| e.to_string())
            }
            System::Seed(seed) => {
                // A release and the next take within one tick of the clock (SQLite's
                // millisecond) find the lock not yet expired, as the seed's `<` has it: the
                // cycle takes again until it is.
                for _ in 0..1000 {
                    if seed
                        .take(name, "bench")
                        .await
                        .map_err(|e| e.to_string())?
                        .is_some()
                    {
                        return seed
                            .release(name, "bench", 0)
                            .await
                            .map_err(|e| e.to_string());
                    }
                }
                Err(format!("seed 004: {name} was not free"))
            }
            System::Etcd { http, lease } => {
                http.try_lock(name, lease)
                    .await?
                    .ok_or_else(|| format!("etcd: {name} was not free"))?;
                http.unlock(name).await
            }
        }
    }
}

/// Lock names of task `i`.
pub(crate) fn lock_name(i: usize) -> String {
    format!("lock-{i}")
}

/// Runs `tasks` concurrent loops of cycles for `warmup + run`; counts the cycles that started
/// after the warm-up.
pub(crate) async fn measure(
    system: Arc<System>,
    tasks: usize,
    warmup: Duration,
    run: Duration,
) -> Throughput {
    let start = Instant::now();
    let measure_from = start + warmup;
    let end = measure_from + run;
    let mut handles = Vec::new();
    for i in 0..tasks {
        let system = system.clone();
        handles.push(tokio::spawn(async move {
            let name = lock_name(i);
            let mut latencies = Vec::new();
            let mut errors = 0;
            let mut first_error = None;
            while Instant::now() < end {
                let t0 = Instant::now();
                let outcome = system.cycle(&name).await;
                let took = t0.elapsed();
                if t0 < measure_from {
                    continue;
                }
                match outcome {
                    Ok(()) => latencies.push(took.as_secs_f64() * 1e3),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e);
                        // A lock left held (a failed release) would fail every later cycle.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
            (latencies, errors, first_error)
        }));
    }
    let mut parts = Vec::new();
    for h in handles {
        if let Ok(part) = h.await {
            parts.push(part);
        }
    }
    Throughput::merge(tasks, run, parts)
}

/// The lock-cycle rows of one backend: tenure beside raw SQL and the peers, at 1 and 8 tasks.
pub(crate) async fn rows(plan: &Plan, target: &Target, peers: &[Peer]) -> Result<Vec<Row>, String> {
    let key = target.engine.key();
    let warmup = Duration::from_millis(500);
    let store = Store::connect_with(
        &target.url,
        StoreOptions::default().table_prefix(target.prefix.clone()),
    )
    .await
    .map_err(|e| e.to_string())?;
    let tenure = Arc::new(System::Tenure(
        Locks::with_holder(store, "bench-locks").map_err(|e| e.to_string())?,
    ));
    let names: Vec<String> = (0..8).map(lock_name).collect();
    // The library's pools: SQLite one connection, the servers eight.
    let connections = if target.engine == Engine::Sqlite {
        1
    } else {
        8
    };
    let raw = Arc::new(System::Raw(
        Raw::prepare(target, connections, &names).await?,
    ));
    let seed = Arc::new(System::Seed(
        Raw::prepare_seed(target, connections, &names).await?,
    ));
    let mut rows = Vec::new();
    for tasks in [1, 8] {
        let ours = measure(tenure.clone(), tasks, warmup, plan.lock_run).await;
        eprintln!(
            "  {key} tenure lock cycles, {tasks} task(s): {}",
            cycles(&ours)
        );
        let base = measure(raw.clone(), tasks, warmup, plan.lock_run).await;
        eprintln!(
            "  {key} raw SQL lock cycles, {tasks} task(s): {}",
            cycles(&base)
        );
        let theirs = measure(seed.clone(), tasks, warmup, plan.lock_run).await;
        eprintln!(
            "  {key} seed 004 lock cycles, {tasks} task(s): {}",
            cycles(&theirs)
        );
        let measure = if tasks == 1 {
            "lock cycles, 1 task".to_string()
        } else {
            format!("lock cycles, {tasks} tasks")
        };
        let r = ratio(Some(ours.per_second), Some(base.per_second));
        rows.push(
            Row::new(&measure, cycles(&ours))
                .against("raw SQL (2 statements)", cycles(&base), times(r))
                .goal("≥ 0.80× raw SQL", at_least(r, 0.8)),
        );
        let r = ratio(Some(ours.per_second), Some(theirs.per_second));
        rows.push(
            Row::new(&measure, cycles(&ours))
                .against(
                    "seed 004's cluster_lock (2 statements)",
                    cycles(&theirs),
                    times(r),
                )
                .goal("≥ 1.00× seed 004", at_least(r, 1.0)),
        );
        for p in peers {
            let theirs = if tasks == 1 { &p.locks1 } else { &p.locks8 };
            if let Some(e) = theirs {
                rows.push(Row::new(&measure, cycles(&ours)).against(
                    p.locks,
                    cycles(e),
                    times(ratio(Some(ours.per_second), Some(e.per_second))),
                ));
            }
        }
    }
    for system in [&raw, &seed] {
        if let System::Raw(pool) | System::Seed(pool) = &**system {
            pool.close().await;
        }
    }
    Ok(rows)
}
