//! A deterministic simulation of tenure's client layer (issue 11): many holders and many tasks
//! per holder (electors, locks, semaphores, releases, drops, pauses, handovers, demotes) on the
//! in-memory backend with a fault drawn from the seed at every database call, in paused tokio
//! time, with the invariants of `checker.rs` checked after every step. See docs/simulation.md.
//!
//! - `TENURE_SIM_SCHEDULES=N` schedules (default 10,000), seeds `TENURE_SIM_FIRST_SEED..` (0);
//! - `TENURE_SIM_SEED=S` replays one schedule with its trace (`TENURE_SIM_REPEAT=K` runs it K
//!   times and counts failures: tokio's `select!` draws from an unseeded generator);
//! - `TENURE_SIM_ONLY=all|hole1|hole2|hole3|hole4` restricts the workload's feature mix;
//! - `TENURE_SIM_THREADS=T` (default 2) threads, one schedule at a time each;
//! - `TENURE_SIM_KEEP_GOING=1` runs each schedule to its end after a violation (to measure
//!   what a passing run costs; the first violation is still reported).

#[path = "../common/mod.rs"]
mod common;

mod checker;
mod faults;
mod real_db;
mod spreading;
mod workload;

use checker::{Checker, Violation};
use common::memory::MemoryBackend;
use rand::rngs::StdRng;
use rand::SeedableRng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use workload::{Mix, Only, Plan};

/// The lease ttl of a schedule (electors, locks), and how much virtual time a schedule runs.
const TTL: Duration = Duration::from_secs(1);
const RUN: Duration = Duration::from_secs(4);
/// How often the checker looks, besides every step and every guard's deadline.
const TICK: Duration = Duration::from_millis(20);

fn env<T: std::str::FromStr>(key: &str) -> Option<T> {
    let value = std::env::var(key).ok()?;
    Some(
        value
            .parse()
            .unwrap_or_else(|_| panic!("{key}={value} is not valid")),
    )
}

fn only_from_env() -> Only {
    let value = std::env::var("TENURE_SIM_ONLY").unwrap_or_else(|_| "all".into());
    Only::parse(&value).unwrap_or_else(|| {
        panic!("TENURE_SIM_ONLY={value}: expected all, hole1, hole2, hole3 or hole4")
    })
}

/// Runs schedule `seed` on its own paused current-thread runtime.
fn run_schedule(seed: u64, only: Only) -> Option<(Mix, Violation)> {
    tenure::__seed_thread_rng(seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(simulate(seed, only))
}

async fn simulate(seed: u64, only: Only) -> Option<(Mix, Violation)> {
    let mix = Mix::draw(only, &mut StdRng::seed_from_u64(seed));
    let memory = Arc::new(MemoryBackend::new(mix.push));
    let checker = Arc::new(Checker::new(Some(memory.clone())));
    let end = tokio::time::Instant::now() + RUN;
    let plan = Arc::new(Plan {
        mix: mix.clone(),
        seed,
        prefix: String::new(),
        ttl: TTL,
        end,
    });
    let mut tasks = tokio::task::JoinSet::new();
    workload::spawn(plan, memory, checker.clone(), &mut tasks);
    let ticker = checker.clone();
    tasks.spawn(async move {
        loop {
            let tick = tokio::time::Instant::now() + TICK;
            let at = ticker.next_deadline().map_or(tick, |d| d.min(tick));
            tokio::time::sleep_until(at).await;
            ticker.check();
        }
    });
    let keep_going = std::env::var("TENURE_SIM_KEEP_GOING").is_ok_and(|v| v == "1");
    tokio::select! {
        biased;
        () = checker.failed(), if !keep_going => {}
        () = tokio::time::sleep_until(end) => checker.check(),
    }
    checker.take_violation().map(|v| (mix, v))
}

fn replay_command(seed: u64, only: Only) -> String {
    let only = match only {
        Only::All => String::new(),
        other => format!(" TENURE_SIM_ONLY={}", format!("{other:?}").to_lowercase()),
    };
    format!("TENURE_SIM_SEED={seed}{only} cargo test -p tenure --test simulation simulated -- --nocapture")
}

fn report(seed: u64, only: Only, mix: &Mix, v: &Violation) -> String {
    format!(
        "seed {seed}: invariant {} broken at {:.3}s: {}\n  mix: {mix:?}\n  last events:\n    {}\n  replay: {}\n",
        v.invariant,
        v.at.as_secs_f64(),
        v.detail,
        v.trace.join("\n    "),
        replay_command(seed, only),
    )
}

#[test]
fn simulated_schedules_keep_the_invariants() {
    let only = only_from_env();
    if let Some(seed) = env::<u64>("TENURE_SIM_SEED") {
        let repeat = env::<u32>("TENURE_SIM_REPEAT").unwrap_or(1);
        let mut failures = 0;
        let mut first = None;
        for _ in 0..repeat {
            if let Some(failure) = run_schedule(seed, only) {
                failures += 1;
                first.get_or_insert(failure);
            }
        }
        println!("seed {seed}: {failures} of {repeat} runs failed");
        if let Some((mix, v)) = first {
            panic!("{}", report(seed, only, &mix, &v));
        }
        return;
    }
    let schedules = env::<u64>("TENURE_SIM_SCHEDULES").unwrap_or(10_000);
    let first_seed = env::<u64>("TENURE_SIM_FIRST_SEED").unwrap_or(0);
    let threads = env::<u64>("TENURE_SIM_THREADS").unwrap_or(2).max(1);
    let started = std::time::Instant::now();
    let next = AtomicU64::new(0);
    let failures: Mutex<Vec<(u64, Mix, Violation)>> = Mutex::default();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= schedules {
                    return;
                }
                let seed = first_seed + i;
                if let Some((mix, v)) = run_schedule(seed, only) {
                    failures.lock().unwrap().push((seed, mix, v));
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap();
    failures.sort_by_key(|(seed, ..)| *seed);
    println!(
        "simulation ({only:?}): {schedules} schedules from seed {first_seed}, {} failed, {:.1}s",
        failures.len(),
        started.elapsed().as_secs_f64()
    );
    if failures.is_empty() {
        return;
    }
    let mut by_invariant = std::collections::BTreeMap::<&str, (usize, u64)>::new();
    for (seed, _, v) in &failures {
        by_invariant.entry(v.invariant).or_insert((0, *seed)).0 += 1;
    }
    let mut message = format!("{} of {schedules} schedules failed:\n", failures.len());
    for (invariant, (count, seed)) in &by_invariant {
        message += &format!("  {invariant}: {count} (first seed {seed})\n");
    }
    let seeds: Vec<String> = failures
        .iter()
        .take(50)
        .map(|(s, ..)| s.to_string())
        .collect();
    message += &format!("  failing seeds: {}\n", seeds.join(" "));
    for (seed, mix, v) in failures.iter().take(3) {
        message += &report(*seed, only, mix, v);
    }
    panic!("{message}");
}
