//! Spreading (issue 29): M members of one group of N shards, each a process of its own
//! (`tenure-bench spread-member`, printing a JSON line whenever the shards it owns change and
//! its call counts every renew interval). The benchmark SIGKILLs a member and times how long
//! the others take to own every shard again, balanced; then starts a new member and times how
//! long the group takes to balance over it, counting the shards that changed owner (the
//! minimum is the new member's share, ⌈N/M⌉ at most). In between, each member's database calls
//! per renew interval, counted in the member by [`CountingBackend`](tenure::backend::CountingBackend),
//! and the statements they sent, counted from sqlx's own log of every statement it runs (its
//! `sqlx::query` events; which of `BEGIN` and `COMMIT` sqlx logs differs by driver: neither on
//! SQLite, `COMMIT` on PostgreSQL, both on MySQL/MariaDB).

use crate::db::Target;
use crate::plan::Plan;
use crate::report::{percentile, secs_summary, Row, Summary, Verdict};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure::backend::CountingBackend;
use tenure::{Spread, Store, StoreOptions, Timing};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// The sizes measured: members × shards, and the kill-and-join trials of each.
const SIZES: &[(usize, u32, usize)] = &[(3, 64, 8), (10, 1000, 4)];
/// How long a group may take to settle before the trial counts as failed.
const SETTLE_WITHIN: Duration = Duration::from_secs(90);

/// What a member prints: the shards it owns now, or its counts so far.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Line {
    Owned(BTreeSet<u32>),
    Counts {
        ms: u64,
        transactions: u64,
        batches: u64,
        applies: u64,
        renewed: u64,
        /// Statements sqlx logged (see the module's doc for `BEGIN` and `COMMIT`).
        statements: u64,
    },
}

/// Counts the statements sqlx runs in this process: its `sqlx::query` events, one per
/// statement (at its statements' level, or its slow statements' level, never both).
struct Statements(Arc<AtomicU64>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() == "sqlx::query" {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Installs the statement counter for this process; its count.
fn count_statements() -> Result<Arc<AtomicU64>, String> {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::Layer;
    let count = Arc::new(AtomicU64::new(0));
    let only_sqlx = tracing_subscriber::filter::Targets::new()
        .with_target("sqlx::query", tracing::Level::TRACE);
    let subscriber =
        tracing_subscriber::registry().with(Statements(count.clone()).with_filter(only_sqlx));
    tracing::subscriber::set_global_default(subscriber).map_err(|e| e.to_string())?;
    Ok(count)
}

/// `tenure-bench spread-member`: joins `group` as `id` and prints [`Line`]s until killed.
pub(crate) async fn member(
    target: &Target,
    group: &str,
    shards: u32,
    id: &str,
    ttl: Duration,
) -> Result<(), String> {
    let statements = count_statements()?;
    let mut options = StoreOptions::default().table_prefix(target.prefix.clone());
    options.max_connections = 3;
    let backend = tenure::backend::connect(&target.url, &options)
        .await
        .map_err(|e| e.to_string())?;
    let counting = Arc::new(CountingBackend::new(backend));
    let store = Store::from_backend(counting.clone(), options.timeout);
    store.migrate().await.map_err(|e| e.to_string())?;
    let mut member = Spread::new(store, group, shards)
        .map_err(|e| e.to_string())?
        .member(id)
        .ttl(ttl)
        .join()
        .await
        .map_err(|e| e.to_string())?;
    let mut owned = member.owned();
    let interval = Timing::from_ttl(ttl)
        .map_err(|e| e.to_string())?
        .renew_interval();
    let mut report = tokio::time::interval(interval);
    let started = Instant::now();
    let print = |line: &Line| println!("{}", serde_json::to_string(line).unwrap_or_default());
    loop {
        tokio::select! {
            guard = member.next() => {
                let Some(guard) = guard else { return Err("the member ended".into()) };
                // The work: hold the shard until it is lost or moved, then let it go.
                tokio::spawn(async move {
                    guard.lost().await;
                    drop(guard);
                });
            }
            changed = owned.changed() => {
                changed.map_err(|e| e.to_string())?;
                print(&Line::Owned(owned.borrow_and_update().clone()));
            }
            _ = report.tick() => {
                let c = counting.counts();
                let ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
                print(&Line::Counts {
                    ms,
                    transactions: c.transactions,
                    batches: c.batches,
                    applies: c.applies,
                    renewed: c.renewed,
                    statements: statements.load(Ordering::Relaxed),
                });
            }
        }
    }
}

/// What the parent knows of each member, from its lines.
#[derive(Default)]
struct Seen {
    owned: BTreeMap<String, BTreeSet<u32>>,
    /// Per member, its count lines in order.
    counts: BTreeMap<String, Vec<Line>>,
}

/// The figures of one size.
#[derive(Clone, Debug, Default, Serialize)]
pub(crate) struct Figures {
    pub members: usize,
    pub shards: u32,
    pub settle_s: Option<f64>,
    pub after_death_s: Vec<f64>,
    pub after_join_s: Vec<f64>,
    pub failed: usize,
    /// Shards that changed owner at each join, and the minimum (the new member's share).
    pub moved: Vec<usize>,
    pub minimum: usize,
    /// Per member and renew interval, in the steady state: its transactions (ticks), batched
    /// renewals, other calls (takes and releases), and the statements sqlx sent for them.
    pub ticks_per_interval: f64,
    pub batches_per_interval: f64,
    pub others_per_interval: f64,
    pub statements_per_interval: f64,
}

struct Group {
    target: Target,
    plan_bench: std::path::PathBuf,
    name: String,
    shards: u32,
    ttl: Duration,
    seen: Arc<Mutex<Seen>>,
    live: Vec<(String, Child)>,
    next: usize,
}

impl Group {
    fn spawn(&mut self) -> Result<(), String> {
        self.next += 1;
        let id = format!("m{}", self.next);
        let mut child = Command::new(&self.plan_bench)
            .arg("spread-member")
            .args(["--url", &self.target.url, "--prefix", &self.target.prefix])
            .args(["--group", &self.name, "--shards", &self.shards.to_string()])
            .args(["--id", &id, "--ttl", &format!("{}ms", self.ttl.as_millis())])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("spread-member: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let seen = self.seen.clone();
        let who = id.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let Ok(line) = serde_json::from_str::<Line>(&line) else {
                    continue;
                };
                let mut seen = seen
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                match line {
                    Line::Owned(set) => {
                        seen.owned.insert(who.clone(), set);
                    }
                    counts @ Line::Counts { .. } => {
                        seen.counts.entry(who.clone()).or_default().push(counts);
                    }
                }
            }
        });
        self.live.push((id, child));
        Ok(())
    }

    /// Who owns each shard, if the live members own every shard once and are balanced
    /// (⌊N/M⌋ or ⌈N/M⌉ each).
    fn balanced(&self) -> Option<BTreeMap<u32, String>> {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let m = self.live.len();
        let n = self.shards as usize;
        let (low, high) = (n / m, n.div_ceil(m));
        let mut owner = BTreeMap::new();
        for (id, _) in &self.live {
            let owned = seen.owned.get(id)?;
            if owned.len() < low || owned.len() > high {
                return None;
            }
            for &s in owned {
                if owner.insert(s, id.clone()).is_some() {
                    return None;
                }
            }
        }
        (owner.len() == n).then_some(owner)
    }

    /// Waits until balanced; the time it took and the owners then.
    async fn settle(&self, from: Instant) -> Option<(f64, BTreeMap<u32, String>)> {
        while from.elapsed() < SETTLE_WITHIN {
            if let Some(owners) = self.balanced() {
                return Some((from.elapsed().as_secs_f64(), owners));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        None
    }

    /// Per member and renew interval over the last four reports of every live member:
    /// [transactions, batches, other calls, statements].
    fn rates(&self, interval: Duration) -> [f64; 4] {
        let seen = self
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut sums = [0.0; 4];
        let mut members = 0.0;
        let counts = |line: &Line| match *line {
            Line::Counts {
                ms,
                transactions,
                batches,
                applies,
                statements,
                ..
            } => Some((ms, [transactions, batches, applies, statements])),
            Line::Owned(_) => None,
        };
        for (id, _) in &self.live {
            let Some(lines) = seen.counts.get(id) else {
                continue;
            };
            let first = lines.len().checked_sub(4).and_then(|i| counts(&lines[i]));
            let last = lines.last().and_then(counts);
            let (Some((m0, c0)), Some((m1, c1))) = (first, last) else {
                continue;
            };
            let intervals = (m1 - m0) as f64 / interval.as_millis() as f64;
            if intervals <= 0.0 {
                continue;
            }
            for (sum, (a, b)) in sums.iter_mut().zip(c0.iter().zip(c1)) {
                *sum += (b - a) as f64 / intervals;
            }
            members += 1.0;
        }
        if members > 0.0 {
            for sum in &mut sums {
                *sum /= members;
            }
        }
        sums
    }
}

/// One size: settle, count the steady state, then kill and join `trials` times.
async fn measure(
    plan: &Plan,
    target: &Target,
    members: usize,
    shards: u32,
    trials: usize,
) -> Result<Figures, String> {
    let ttl = plan.opts.ttl;
    let interval = Timing::from_ttl(ttl)
        .map_err(|e| e.to_string())?
        .renew_interval();
    let mut group = Group {
        target: target.clone(),
        plan_bench: plan.bench.clone(),
        name: format!("bench-spread-{members}x{shards}"),
        shards,
        ttl,
        seen: Arc::default(),
        live: Vec::new(),
        next: 0,
    };
    let started = Instant::now();
    for _ in 0..members {
        group.spawn()?;
    }
    let mut figures = Figures {
        members,
        shards,
        minimum: (shards as usize).div_ceil(members),
        ..Figures::default()
    };
    let Some((settle_s, _)) = group.settle(started).await else {
        return Err(format!(
            "{members} members did not balance {shards} shards within {SETTLE_WITHIN:?}"
        ));
    };
    figures.settle_s = Some(settle_s);
    // The steady state: four reports of every member after it settled.
    tokio::time::sleep(interval * 5).await;
    let [ticks, batches, others, statements] = group.rates(interval);
    figures.ticks_per_interval = ticks;
    figures.batches_per_interval = batches;
    figures.others_per_interval = others;
    figures.statements_per_interval = statements;
    for trial in 0..trials {
        eprintln!(
            "tenure-bench: spread {members}x{shards}: trial {} of {trials}",
            trial + 1
        );
        let victim = trial % group.live.len();
        let (_, mut child) = group.live.remove(victim);
        let killed = Instant::now();
        let _ = child.start_kill();
        let _ = child.wait().await;
        match group.settle(killed).await {
            Some((s, _)) => figures.after_death_s.push(s),
            None => {
                figures.failed += 1;
                continue;
            }
        }
        let Some(before) = group.balanced() else {
            figures.failed += 1;
            continue;
        };
        let joined = Instant::now();
        group.spawn()?;
        match group.settle(joined).await {
            Some((s, after)) => {
                figures.after_join_s.push(s);
                let moved = after
                    .iter()
                    .filter(|(k, v)| before.get(k) != Some(v))
                    .count();
                figures.moved.push(moved);
            }
            None => figures.failed += 1,
        }
    }
    for (_, mut child) in group.live.drain(..) {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    Ok(figures)
}

/// The rows of every size on `target`.
pub(crate) async fn rows(plan: &Plan, target: &Target) -> Result<(Vec<Row>, Vec<String>), String> {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for &(members, shards, trials) in SIZES {
        let trials = if plan.opts.quick { 2 } else { trials };
        let f = measure(plan, target, members, shards, trials).await?;
        let size = format!("{members} members × {shards} shards");
        let death = Summary::of(&f.after_death_s, f.failed);
        let join = Summary::of(&f.after_join_s, 0);
        rows.push(Row::new(
            format!("spread {size}: balanced again after a SIGKILL, p50 / p99"),
            secs_summary(&death),
        ));
        rows.push(Row::new(
            format!("spread {size}: balanced again after a join, p50 / p99"),
            secs_summary(&join),
        ));
        let moved: Vec<f64> = f.moved.iter().map(|&m| m as f64).collect();
        let most = percentile(&moved, 100.0);
        rows.push(
            Row::new(
                format!(
                    "spread {size}: shards moved per join (max of {})",
                    f.moved.len()
                ),
                most.map_or("-".into(), |m| format!("{m:.0}")),
            )
            .goal(
                format!("≤ {} (the minimum)", f.minimum),
                Verdict::from(most.is_some_and(|m| m <= f.minimum as f64)),
            ),
        );
        let transactions = f.ticks_per_interval + f.batches_per_interval + f.others_per_interval;
        rows.push(
            Row::new(
                format!("spread {size}: transactions (statements) per renew interval per member"),
                format!(
                    "{transactions:.2} ({:.1} statements; {:.2} ticks, {:.2} renew batches, {:.2} other calls)",
                    f.statements_per_interval,
                    f.ticks_per_interval,
                    f.batches_per_interval,
                    f.others_per_interval
                ),
            )
            .goal("1 transaction", Verdict::from(transactions <= 1.05)),
        );
        notes.push(format!(
            "Spread {size} ({}): each member a process of its own (ttl {:?}); settled in {:.2} s from the start; {} kill-and-join trials ({} failed). p99 of so few trials is their maximum. Per interval and member, in the steady state after it settled (its last four reports): its transactions and calls counted by CountingBackend in the member, and the statements sqlx sent for them counted from sqlx's log of every statement it runs (which logs COMMIT on PostgreSQL, BEGIN and COMMIT on MySQL/MariaDB, neither on SQLite).",
            target.engine.title(),
            plan.opts.ttl,
            f.settle_s.unwrap_or_default(),
            f.after_death_s.len() + f.failed,
            f.failed
        ));
    }
    Ok((rows, notes))
}
