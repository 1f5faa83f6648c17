//! The same workload and invariants on real databases, in real time: SQLite always, PostgreSQL
//! and MariaDB where their servers are (skipped with a printed reason unless `CI=true`). Only
//! client-side delays are injected; the database brings its own timing. Real time cannot be
//! replayed: the seed only picks the mix and the tasks' choices.

use crate::checker::Checker;
use crate::common;
use crate::faults::FaultProfile;
use crate::spreading;
use crate::workload::{self, Mix, Only, Plan};
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::sync::Arc;
use std::time::Duration;
use tenure::BackendKind;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// A longer ttl than the simulation's: real round trips on a loaded machine.
const TTL: Duration = Duration::from_secs(2);
const RUN: Duration = Duration::from_secs(5);
const SCHEDULES: u64 = 3;

async fn run(kind: BackendKind) {
    let Some(store) = common::store(kind).await else {
        return;
    };
    let first = std::env::var("TENURE_SIM_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    for seed in first..first + SCHEDULES {
        let mut mix = Mix::draw(Only::All, &mut StdRng::seed_from_u64(seed));
        // Every feature, so that each backend sees locks, permits and elections together.
        mix.lock_tasks = mix.lock_tasks.max(1);
        mix.semaphore_tasks = mix.semaphore_tasks.max(1);
        mix.electors = true;
        mix.priorities = true;
        mix.spread = true;
        mix.faults = FaultProfile {
            rate: 0.05,
            delays_only: true,
            round_trip_ms: 0,
        };
        println!("{kind} seed {seed}: {mix:?}");
        let checker = Arc::new(Checker::new(None));
        let plan = Arc::new(Plan {
            mix,
            seed,
            prefix: format!("{}-", common::unique("sim")),
            ttl: TTL,
            end: Instant::now() + RUN,
        });
        let mut tasks = JoinSet::new();
        workload::spawn(
            plan.clone(),
            store.backend().clone(),
            checker.clone(),
            &mut tasks,
        );
        tokio::select! {
            biased;
            () = checker.failed() => {}
            () = tokio::time::sleep_until(plan.end) => checker.check(),
        }
        // The electors campaign through the candidate registry (priorities, the observer).
        let roster = tenure::candidates::Candidates::new(store.clone())
            .list(&plan.election())
            .await
            .expect("the registry");
        tasks.shutdown().await;
        let shards = checker.tenures_of(&format!("{}/", spreading::group(&plan)));
        assert!(
            shards > 0,
            "{kind} seed {seed}: no member of the group was given a shard"
        );
        println!("{kind} seed {seed}: {shards} shard tenures");
        assert!(
            roster
                .candidates
                .iter()
                .any(|c| c.observer && c.is_live(roster.now)),
            "{kind} seed {seed}: no live observer registered: {roster:?}"
        );
        if let Some(v) = checker.take_violation() {
            panic!(
                "{kind} seed {seed}: invariant {} broken at {:.3}s: {}\n  last events:\n    {}",
                v.invariant,
                v.at.as_secs_f64(),
                v.detail,
                v.trace.join("\n    ")
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_sqlite_keeps_the_invariants() {
    run(BackendKind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_postgres_keeps_the_invariants() {
    run(BackendKind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_mysql_keeps_the_invariants() {
    run(BackendKind::MySql).await;
}
