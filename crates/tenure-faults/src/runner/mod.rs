//! Runs scenarios: a cluster, rounds of its fault until the duration is used up, then the
//! history through the checker.

pub mod cluster;
mod nemesis;

pub use cluster::Settings;
pub use nemesis::{faketime_env, LIBFAKETIME};

use crate::checker::locks::SemaphoreBound;
use crate::checker::{self, Expect, Verdict};
use crate::scenario::{Fault, Scenario, Workload};
use crate::target::Target;
use cluster::Cluster;
use nemesis::Nemesis;
use rand::SeedableRng;
use std::path::PathBuf;
use std::time::Duration;
use tenure::{BackendKind, Timing};

/// The result of one scenario on one backend.
#[derive(Debug)]
pub struct Outcome {
    pub scenario: &'static str,
    pub backend: BackendKind,
    /// Through a transaction-mode pooler (PgBouncer).
    pub pooled: bool,
    pub seed: u64,
    pub expect: Expect,
    pub verdict: Verdict,
    /// The faults injected, by name.
    pub injected: Vec<String>,
    /// Operations issued (both resources).
    pub issued: usize,
    /// Why it could not run or what else it saw (e.g. the clock jump observed).
    pub notes: Vec<String>,
    /// Whether it ran (a scenario that could not start is not a pass).
    pub ran: bool,
    /// The directory with every history, kept for failed runs.
    pub dir: Option<PathBuf>,
    pub took: Duration,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.ran && self.notes_ok() && self.verdict.passed(&self.expect)
    }

    fn notes_ok(&self) -> bool {
        !self.notes.iter().any(|n| n.starts_with("error"))
    }
}

/// The seed of one scenario on one backend, derived from the run's seed.
pub fn scenario_seed(seed: u64, scenario: &str, kind: BackendKind) -> u64 {
    let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
    for b in scenario.bytes().chain(format!("{kind:?}").bytes()) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Runs `scenario` on `target`.
pub async fn run(scenario: &Scenario, target: &Target, settings: &Settings, seed: u64) -> Outcome {
    let started = std::time::Instant::now();
    let max_jitter = Timing::from_ttl(settings.ttl)
        .map(|t| t.max_jitter())
        .unwrap_or_default();
    let mut outcome = Outcome {
        scenario: scenario.name,
        backend: target.kind,
        pooled: target.pooled,
        seed,
        expect: scenario.expect(target.kind, settings.ttl, max_jitter),
        verdict: Verdict::default(),
        injected: Vec::new(),
        issued: 0,
        notes: Vec::new(),
        ran: false,
        dir: None,
        took: Duration::ZERO,
    };
    let dir = match tempfile::Builder::new()
        .prefix(&format!("tenure-faults-{}-", scenario.name))
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            outcome.notes.push(format!("error: {e}"));
            return outcome;
        }
    };
    let driven = if scenario.workload.is_etcd() {
        crate::etcd::drive(scenario, target, settings, seed, dir.path(), &mut outcome).await
    } else {
        drive(scenario, target, settings, seed, dir.path(), &mut outcome).await
    };
    match driven {
        Ok(()) => outcome.ran = true,
        Err(e) => outcome.notes.push(format!("error: {e}")),
    }
    outcome.took = started.elapsed();
    if !outcome.passed() {
        outcome.dir = Some(dir.keep());
    }
    outcome
}

async fn drive(
    scenario: &Scenario,
    target: &Target,
    settings: &Settings,
    seed: u64,
    dir: &std::path::Path,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let clock_file = (scenario.fault == Fault::Clock).then(|| dir.join("faketime"));
    let env = match &clock_file {
        Some(file) => {
            std::fs::write(file, "+0\n").map_err(|e| e.to_string())?;
            faketime_env(file)
        }
        None => Vec::new(),
    };
    let mut cluster = Cluster::start(target, settings, dir, scenario, env).await?;
    let mut nemesis = Nemesis::new(rand::rngs::StdRng::seed_from_u64(seed), clock_file);
    let started = tokio::time::Instant::now();
    let mut result = Ok(());
    // The scenario's minimum of rounds; then rounds while the duration lasts.
    let mut rounds = 0;
    loop {
        if let Err(e) = nemesis.round(&mut cluster, scenario.fault).await {
            result = Err(e);
            break;
        }
        rounds += 1;
        if rounds >= scenario.min_rounds() && started.elapsed() >= settings.duration {
            break;
        }
    }
    // Let the last tenure do some work before the end.
    tokio::time::sleep(settings.ttl / 2).await;
    cluster.stop_all().await;
    let (history, leases) = cluster.collect().await?;
    result?;
    outcome.injected = nemesis.injected;
    if nemesis.sessions_killed > 0 {
        outcome.notes.push(format!(
            "{} database sessions killed",
            nemesis.sessions_killed
        ));
    }
    if nemesis.pauses_retried > 0 {
        outcome.notes.push(format!(
            "{} pauses caught the leader holding SQLite's write lock and were undone and retried",
            nemesis.pauses_retried
        ));
    }
    if nemesis.pauses_late > 0 {
        outcome.notes.push(format!(
            "{} pauses took hold too late to be sure both writes were still to come, and were \
             undone and retried",
            nemesis.pauses_late
        ));
    }
    outcome.issued = history
        .iter()
        .filter(|e| matches!(e.kind, crate::event::Kind::OpIssued { .. }))
        .count();
    if scenario.fault == Fault::Clock {
        let jumped = observed_clock_jump(&history);
        outcome.notes.push(format!(
            "wall clock moved {jumped} s against the monotonic clock"
        ));
        if jumped < 3_000 {
            outcome
                .notes
                .push("error: the nodes' wall clock did not jump".into());
        }
    }
    outcome.verdict = match scenario.workload {
        Workload::Elector => {
            let acquisitions = leases.get(&cluster.name).map_or(&[][..], Vec::as_slice);
            checker::check(&history, acquisitions, &outcome.expect)
        }
        Workload::Locks => {
            let semaphore = SemaphoreBound {
                name: cluster.locks.semaphore(),
                permits: cluster.locks.permits,
            };
            checker::locks::check(&history, &leases, &[semaphore], &outcome.expect)
        }
        Workload::Spread => checker::locks::check(&history, &leases, &[], &outcome.expect),
        Workload::EtcdLock | Workload::EtcdUnfenced => {
            return Err("an etcd workload runs in crate::etcd, not on nodes".into())
        }
    };
    Ok(())
}

/// The largest change (seconds) of any node's wall-minus-monotonic offset: how far the
/// faked clock really jumped.
fn observed_clock_jump(history: &[crate::event::Event]) -> i64 {
    let mut by_node: std::collections::HashMap<&str, (i64, i64)> = Default::default();
    for e in history.iter().filter(|e| e.node != "nemesis") {
        let offset = e.wall_ms - i64::try_from(e.t / 1_000_000).unwrap_or(i64::MAX);
        let range = by_node.entry(&e.node).or_insert((offset, offset));
        range.0 = range.0.min(offset);
        range.1 = range.1.max(offset);
    }
    by_node
        .values()
        .map(|(lo, hi)| (hi - lo) / 1000)
        .max()
        .unwrap_or(0)
}
