//! Scale: one process holding many locks (statements per renew interval, CPU, RSS), and many
//! candidates on one name in one process (database calls per second).
//!
//! The many-locks holder is a process of its own (`tenure-bench hold-leases`, answering one
//! JSON line), so that its CPU time and RSS are the holder's alone; [`held_by_helper`] runs it
//! and reads its answer. [`rows`] makes the backend's rows of the table.

use crate::db::{counters, Counters, Engine, Target};
use crate::plan::Plan;
use crate::procs::{own_cpu, rss_kb, Proc};
use crate::report::{count, Row, Verdict};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::{CountingBackend as Counting, Counts};
use tenure::{Elector, LockOptions, Locks, Store, StoreOptions, Timing};
use tokio::process::Command;
use tokio::time::Instant;

/// What `hold-leases` measured over its window.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct Held {
    pub leases: usize,
    pub acquire_s: f64,
    pub renew_interval_s: f64,
    pub window_s: f64,
    /// Renew intervals in the window (window / renew interval).
    pub intervals: f64,
    /// Batched renewals (transactions) in the window, and the leases they carried.
    pub batches: u64,
    pub renewed: u64,
    /// Other calls (campaigns, releases) in the window: 0 if nothing is done per lock.
    pub applies: u64,
    /// The library's statements per batch: BEGIN, the clock, one UPDATE per 5,000 leases
    /// (MySQL: plus one SELECT each), COMMIT.
    pub statements_per_batch: u64,
    pub slowest_batch_ms: f64,
    /// Server-side deltas over the window (see [`Counters`]).
    pub server: Vec<(String, i64)>,
    pub cpu_s: f64,
    pub rss_kb: u64,
    pub peak_rss_kb: u64,
    /// Locks still held at the end (all of them, unless renewals failed).
    pub still_held: usize,
}

impl Held {
    pub(crate) fn statements_per_interval(&self) -> f64 {
        (self.batches * self.statements_per_batch) as f64 / self.intervals
    }
}

/// The most locks one keep-alive call renews (`tenure::Locks` sends larger batches as calls of
/// this many; each call is a batch that `CountingBackend` counts).
const KEEP_ALIVE_GROUP: usize = 10_000;

/// The statements of one keep-alive call when `leases` are held.
fn statements_per_batch(engine: Engine, leases: usize) -> u64 {
    let leases = leases.min(KEEP_ALIVE_GROUP);
    // BEGIN, the clock, COMMIT, and the renewal: on PostgreSQL one statement however many
    // (the pairs as arrays); elsewhere one per 5,000 pairs (MySQL: each with its read-back).
    let renewal = match engine {
        Engine::Postgres => 1,
        Engine::MySql => 2 * leases.div_ceil(5000) as u64,
        Engine::Sqlite => leases.div_ceil(5000) as u64,
    };
    3 + renewal
}

async fn counting_store(target: &Target) -> Result<(Store, Arc<Counting>), String> {
    let options = StoreOptions::default().table_prefix(target.prefix.clone());
    let timeout = options.timeout;
    let backend = tenure::backend::connect(&target.url, &options)
        .await
        .map_err(|e| e.to_string())?;
    let counting = Arc::new(Counting::new(backend));
    let store = Store::from_backend(counting.clone(), timeout);
    // A hand-wrapped store creates no layer's table, and `try_lock_many` checks the spreading
    // rule against the spreading layer's.
    store.migrate().await.map_err(|e| e.to_string())?;
    Ok((store, counting))
}

/// `tenure-bench hold-leases`: takes `leases` locks with ttl `at_most`, then watches
/// `intervals` renew intervals.
pub(crate) async fn hold_leases(
    target: &Target,
    leases: usize,
    at_most: Duration,
    intervals: u32,
) -> Result<Held, String> {
    let (store, counting) = counting_store(target).await?;
    let locks = Locks::with_holder(store, "bench-scale").map_err(|e| e.to_string())?;
    let options = LockOptions::default().ttl(at_most);
    // One batch (`Locks::try_lock_many`): a transaction per thousand names.
    let names: Vec<String> = (0..leases).map(|i| format!("lease-{i}")).collect();
    let t0 = Instant::now();
    let guards = locks
        .try_lock_many(&names, options)
        .await
        .map_err(|e| e.to_string())?;
    if guards.len() != leases {
        return Err(format!("{} of {leases} leases were free", guards.len()));
    }
    let acquire_s = t0.elapsed().as_secs_f64();
    let renew_interval = Timing::from_ttl(at_most)
        .map_err(|e| e.to_string())?
        .renew_interval();
    let pool = target.raw_pool(1).await.map_err(|e| e.to_string())?;
    let table = target.lease_table();
    // Let the statistics of the acquisition settle, then open the window: PostgreSQL 15
    // publishes an idle connection's counters up to 10 s late (PGSTAT_IDLE_INTERVAL), so a
    // shorter wait counts the 10,000 acquisitions' commits inside the window.
    let settle = match target.engine {
        Engine::Postgres => Duration::from_secs(11),
        _ => Duration::from_millis(1200),
    };
    tokio::time::sleep(settle).await;
    let server_before = counters(&pool, &table).await;
    let (count_before, cpu_before) = (counting.counts(), own_cpu());
    counting.take_slowest_batch();
    let window = renew_interval * intervals;
    let opened = Instant::now();
    tokio::time::sleep(window).await;
    let window_s = opened.elapsed().as_secs_f64();
    let counts: Counts = counting.counts().since(count_before);
    let cpu = own_cpu().zip(cpu_before).map(|(a, b)| a.saturating_sub(b));
    let (rss, peak) = rss_kb(std::process::id()).unwrap_or_default();
    let server: Counters = counters(&pool, &table).await.delta(&server_before);
    pool.close().await;
    let still_held = locks.held();
    for g in guards {
        g.forget();
    }
    Ok(Held {
        leases,
        acquire_s,
        renew_interval_s: renew_interval.as_secs_f64(),
        window_s,
        intervals: window_s / renew_interval.as_secs_f64(),
        batches: counts.batches,
        renewed: counts.renewed,
        applies: counts.applies,
        statements_per_batch: statements_per_batch(target.engine, leases),
        slowest_batch_ms: counting.take_slowest_batch().as_secs_f64() * 1e3,
        server: server.values,
        cpu_s: cpu.map_or(0.0, |c| c.as_secs_f64()),
        rss_kb: rss,
        peak_rss_kb: peak,
        still_held,
    })
}

/// What many candidates on one name cost.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Crowd {
    pub candidates: usize,
    pub ttl_s: f64,
    pub window_s: f64,
    /// `apply` calls (one transaction each) per second, as counted in the process.
    pub calls_per_s: f64,
    /// Server-side deltas per second.
    pub server_per_s: Vec<(String, f64)>,
    pub leader_found: bool,
}

/// `candidates` electors on one name in this process, watched for `window` once one leads.
pub(crate) async fn crowd(
    target: &Target,
    candidates: usize,
    ttl: Duration,
    window: Duration,
) -> Result<Crowd, String> {
    let (store, counting) = counting_store(target).await?;
    let timing = Timing::from_ttl(ttl).map_err(|e| e.to_string())?;
    let name = "crowd";
    let mut electors = Vec::new();
    for i in 0..candidates {
        let e = Elector::builder(store.clone(), name)
            .candidate(format!("crowd-{i}"))
            .timing(timing)
            .spawn()
            .map_err(|e| e.to_string())?;
        electors.push(e);
    }
    let until = Instant::now() + ttl * 3 + Duration::from_secs(5);
    let mut leader_found = false;
    while Instant::now() < until {
        if electors.iter().any(|e| e.role().borrow().is_leader()) {
            leader_found = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Past the start-up burst: every follower has seen the leader at least once.
    tokio::time::sleep(timing.renew_interval() * 2).await;
    let pool = target.raw_pool(1).await.map_err(|e| e.to_string())?;
    let table = target.lease_table();
    let server_before = counters(&pool, &table).await;
    let before = counting.counts();
    let opened = Instant::now();
    tokio::time::sleep(window).await;
    let window_s = opened.elapsed().as_secs_f64();
    let counts = counting.counts().since(before);
    let server = counters(&pool, &table).await.delta(&server_before);
    pool.close().await;
    for e in electors {
        e.shutdown().await;
    }
    Ok(Crowd {
        candidates,
        ttl_s: ttl.as_secs_f64(),
        window_s,
        // Campaigns and ticks are the layers' transactions (`transaction`), the rest `apply`.
        calls_per_s: (counts.applies + counts.transactions) as f64 / window_s,
        server_per_s: server
            .values
            .into_iter()
            .map(|(k, v)| (k, v as f64 / window_s))
            .collect(),
        leader_found,
    })
}

/// Runs `tenure-bench hold-leases` (`leases` locks with ttl `at_most` on tables `prefix`,
/// watched for `intervals` renew intervals) and reads its answer; gives up on it once it has
/// taken longer than `acquire_within` plus its window.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn held_by_helper(
    plan: &Plan,
    target: &Target,
    prefix: &str,
    leases: usize,
    at_most: Duration,
    intervals: u32,
    acquire_within: Duration,
) -> Result<Held, String> {
    let out = plan
        .dir
        .join(format!("hold-{}-{leases}.json", target.engine.key()));
    let mut c = Command::new(&plan.bench);
    c.arg("hold-leases")
        .arg("--url")
        .arg(&target.url)
        .arg("--prefix")
        .arg(prefix)
        .arg("--leases")
        .arg(leases.to_string())
        .arg("--at-most")
        .arg(format!("{}ms", at_most.as_millis()))
        .arg("--intervals")
        .arg(intervals.to_string())
        .arg("--out")
        .arg(&out);
    let mut proc = Proc::spawn(c, &plan.dir.join("hold-leases.log")).map_err(|e| e.to_string())?;
    // Its window, and the settling of the servers' counters before it (11 s at most).
    let window = at_most / 4 * intervals + Duration::from_secs(30);
    let bound = acquire_within + window;
    let status = tokio::time::timeout(bound, proc.child.wait())
        .await
        .map_err(|_| {
            format!(
                "{leases} leases not taken and watched within {:.0} s (--curve-acquire-within {:.0} s)",
                bound.as_secs_f64(),
                acquire_within.as_secs_f64()
            )
        })?
        .map_err(|e| e.to_string())?;
    if !status.success() {
        let log = std::fs::read_to_string(plan.dir.join("hold-leases.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(3).collect();
        return Err(format!(
            "hold-leases failed ({status}): {}",
            tail.join(" / ")
        ));
    }
    let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

// === the rows of the tables ===

/// The scale rows of one backend: many locks held by one process, many candidates on one
/// name; and the note on how they were counted.
pub(crate) async fn rows(plan: &Plan, target: &Target) -> Result<(Vec<Row>, Vec<String>), String> {
    let key = target.engine.key();
    let at_most = Duration::from_secs(10);
    let prefix = format!("{}s_", target.prefix);
    let held = held_by_helper(
        plan,
        target,
        &prefix,
        plan.leases,
        at_most,
        plan.scale_intervals,
        Duration::from_secs(270),
    )
    .await?;
    eprintln!(
        "  {key} {} leases: acquired in {:.1} s; {} batches, {} applies in {:.1} intervals; server {:?}; CPU {:.2} s; RSS {} kB",
        held.leases, held.acquire_s, held.batches, held.applies, held.intervals, held.server, held.cpu_s, held.rss_kb
    );
    let n = count(Some(held.leases as f64));
    let per_interval = held.statements_per_interval();
    let server_note = server_per_interval(target.engine, &held);
    let mut rows = vec![
        Row::new(
            format!("{n} locks held: statements per renew interval"),
            format!(
                "{per_interval:.1} ({:.2} batches × {}){}",
                held.batches as f64 / held.intervals,
                held.statements_per_batch,
                if held.applies > 0 {
                    format!(", +{} other calls", held.applies)
                } else {
                    String::new()
                }
            ),
        )
        .against("server-side count", server_note, "")
        .goal(
            "≤ 10",
            at_most_f(per_interval, 10.0, held.still_held == held.leases),
        ),
        Row::new(
            format!("{n} locks held: CPU, RSS"),
            format!(
                "{:.1} % of a core, {:.1} MiB RSS (slowest batch {:.0} ms, {} of {} still held)",
                100.0 * held.cpu_s / held.window_s,
                held.rss_kb as f64 / 1024.0,
                held.slowest_batch_ms,
                held.still_held,
                held.leases
            ),
        ),
        Row::new(
            format!("{n} locks: taking them all"),
            format!(
                "{:.1} s with try_lock_many (a transaction per 1,000 names)",
                held.acquire_s
            ),
        ),
    ];
    let crowd_target = Target {
        prefix: format!("{}c_", target.prefix),
        ..target.clone()
    };
    let crowd = crowd(
        &crowd_target,
        plan.candidates,
        plan.opts.ttl,
        plan.crowd_window,
    )
    .await?;
    eprintln!(
        "  {key} {} candidates: {:.0} calls/s, server {:?}",
        crowd.candidates, crowd.calls_per_s, crowd.server_per_s
    );
    let server: Vec<String> = crowd
        .server_per_s
        .iter()
        .map(|(k, v)| format!("{k} {v:.0}/s"))
        .collect();
    rows.push(
        Row::new(
            format!(
                "{} candidates on one name: database calls",
                crowd.candidates
            ),
            format!("{:.0} transactions/s", crowd.calls_per_s),
        )
        .against(
            "server-side count",
            if server.is_empty() {
                "-".into()
            } else {
                server.join(", ")
            },
            "",
        ),
    );
    let notes = vec![format!(
        "Scale ({key}): the {n} locks have at_most 10 s (renewed every 2.5 s), watched for {} \
         renew intervals in their own process; the {} candidates use ttl {:?}. Statements per \
         interval are the library's calls (counted by `tenure::backend::CountingBackend`) times the \
         statements of one batch; {}",
        plan.scale_intervals,
        crowd.candidates,
        plan.opts.ttl,
        match target.engine {
            Engine::Postgres => "the server-side figures are deltas of pg_stat_user_tables for the run's own lease table (scans = sequential and index scans of it: a renewal probes the index once per name of its IN list; writes = rows written) and of pg_stat_database.xact_commit (whole database: other clients count too).",
            Engine::MySql => "the server-side figures are deltas of the server's global Questions / Com_update / Com_commit: other clients of the server count too.",
            Engine::Sqlite => "SQLite has no server-side counter: the wrapper's count is the only one.",
        }
    )];
    Ok((rows, notes))
}

fn at_most_f(v: f64, limit: f64, all_held: bool) -> Verdict {
    Verdict::from(v <= limit && all_held)
}

fn server_per_interval(engine: Engine, held: &Held) -> String {
    let get = |k: &str| {
        held.server
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| *v as f64 / held.intervals)
    };
    match engine {
        Engine::Postgres => format!(
            "{} statements on the lease table, {} rows written, {} commits (db-wide) per interval",
            secs_free(get("scans")),
            count(get("writes")),
            secs_free(get("xact_commit"))
        ),
        Engine::MySql => format!(
            "{} UPDATEs, {} queries (server-wide) per interval",
            secs_free(get("com_update")),
            secs_free(get("questions"))
        ),
        Engine::Sqlite => "-".into(),
    }
}

/// A per-interval figure with one decimal.
fn secs_free(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.1}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_per_batch_follow_the_chunks() {
        assert_eq!(statements_per_batch(Engine::Postgres, 10_000), 4);
        assert_eq!(statements_per_batch(Engine::Postgres, 100_000), 4);
        assert_eq!(statements_per_batch(Engine::MySql, 10_000), 7);
        assert_eq!(statements_per_batch(Engine::MySql, 100_000), 7);
        assert_eq!(statements_per_batch(Engine::Sqlite, 100_000), 5);
        assert_eq!(statements_per_batch(Engine::Sqlite, 1), 4);
        let held = Held {
            batches: 6,
            statements_per_batch: 5,
            intervals: 3.0,
            ..Held::default()
        };
        assert_eq!(held.statements_per_interval(), 10.0);
    }
}
