//! The run: start etcd and ZooKeeper, measure each once, then every benchmark per backend, and
//! print one table per backend. Everything started is killed, and every table of the run dropped, also
//! on error and on Ctrl-C.

use crate::curve::{self, Curve, LeasePoint};
use crate::db::{self, Engine, Target};
use crate::etcd::{Etcd, Http};
use crate::failover::{Contender, Scenario, Setup};
use crate::footprint::{self, Database};
use crate::locks::{self, lock_name, System, Throughput};
use crate::procs::Proc;
use crate::raw::Raw;
use crate::report::{
    at_least, at_most, count, millis_summary, ratio, secs_summary, times, Row, Summary, Table,
    Verdict,
};
use crate::scale::{self, Held};
use crate::zookeeper::{self, ZooKeeper};
use crate::{seeds, Options};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tenure::{Locks, Store, StoreOptions};
use tokio::process::Command;

/// What to run, after `--quick` and `--only`.
struct Plan {
    opts: Options,
    trials: usize,
    lock_run: Duration,
    leases: usize,
    scale_intervals: u32,
    candidates: usize,
    crowd_window: Duration,
    footprint_trials: usize,
    curve_run: Duration,
    curve_leases: Vec<usize>,
    dir: PathBuf,
    tenure: PathBuf,
    bench: PathBuf,
}

impl Plan {
    fn wants(&self, what: &str) -> bool {
        self.opts.only.iter().any(|o| o == what)
    }
}

/// A peer's figures (etcd, ZooKeeper), measured once and set beside every backend's.
struct Peer {
    /// `etcd`, `ZooKeeper`.
    name: &'static str,
    /// What was measured, for the note under every table.
    about: String,
    /// How it elects, hands over and takes a lock, as the tables name it.
    elects: &'static str,
    hands_over: &'static str,
    locks: &'static str,
    crash: Option<Summary>,
    handover: Option<Summary>,
    locks1: Option<Throughput>,
    locks8: Option<Throughput>,
}

impl Peer {
    fn new(name: &'static str, elects: &'static str, hands_over: &'static str) -> Peer {
        Peer {
            name,
            about: String::new(),
            elects,
            hands_over,
            locks: "",
            crash: None,
            handover: None,
            locks1: None,
            locks8: None,
        }
    }
}

pub async fn main(opts: Options) -> Result<(), String> {
    for b in &opts.backends {
        Engine::parse(b)
            .ok_or_else(|| format!("unknown backend {b:?} (postgres, mysql, sqlite)"))?;
    }
    for o in &opts.only {
        if ![
            "failover",
            "handover",
            "locks",
            "scale",
            "footprint",
            "curve",
        ]
        .contains(&o.as_str())
        {
            return Err(format!(
                "unknown benchmark {o:?} (failover, handover, locks, scale, footprint, curve)"
            ));
        }
    }
    let bench = std::env::current_exe().map_err(|e| e.to_string())?;
    let tenure = opts
        .tenure_bin
        .clone()
        .unwrap_or_else(|| bench.with_file_name("tenure"));
    if !tenure.is_file() {
        return Err(format!(
            "no tenure binary at {}: run `cargo build --release -p tenure-cli -p tenure-bench` \
             first, or pass --tenure-bin",
            tenure.display()
        ));
    }
    let tmp = tempfile::Builder::new()
        .prefix("tenure-bench-")
        .tempdir()
        .map_err(|e| e.to_string())?;
    let run_id: String = (0..6)
        .map(|_| (b'a' + rand::random::<u8>() % 26) as char)
        .collect();
    let prefix = format!("tb_{run_id}_");
    let targets: Vec<Target> = opts
        .backends
        .iter()
        .filter_map(|b| Engine::parse(b))
        .map(|engine| Target {
            engine,
            url: match engine {
                Engine::Postgres => opts.postgres_url.clone(),
                Engine::MySql => opts.mysql_url.clone(),
                Engine::Sqlite => db::sqlite_url(tmp.path(), "bench.db"),
            },
            prefix: prefix.clone(),
        })
        .collect();
    let quick = opts.quick;
    let plan = Plan {
        trials: if quick {
            opts.trials.min(3)
        } else {
            opts.trials
        },
        lock_run: Duration::from_secs_f64(if quick { 1.0 } else { opts.lock_seconds }),
        leases: if quick {
            opts.leases.min(1000)
        } else {
            opts.leases
        },
        scale_intervals: if quick { 2 } else { 3 },
        candidates: if quick {
            opts.candidates.min(50)
        } else {
            opts.candidates
        },
        crowd_window: Duration::from_secs(if quick { 2 } else { 5 }),
        footprint_trials: if quick { 2 } else { 5 },
        curve_run: Duration::from_secs_f64(if quick { 1.0 } else { opts.curve_seconds }),
        curve_leases: curve::LEASES
            .iter()
            .copied()
            .filter(|&n| !quick || n <= 10_000)
            .collect(),
        dir: tmp.path().to_path_buf(),
        tenure,
        bench,
        opts,
    };
    eprintln!(
        "tenure-bench: run {run_id}, tables {prefix}*, temporary files in {}",
        plan.dir.display()
    );
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| e.to_string())?;
    if plan.opts.keep_files {
        eprintln!("tenure-bench: keeping {}", plan.dir.display());
    }
    let outcome = tokio::select! {
        r = run(&plan, &targets) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".to_string()),
        _ = terminate.recv() => Err("terminated".to_string()),
    };
    // The run's future is dropped by now: its processes are killed. Drop its tables.
    for t in &targets {
        for p in ["", "s_", "c_"].iter().chain(curve::PREFIXES.iter()) {
            db::drop_tables(&Target {
                prefix: format!("{}{p}", t.prefix),
                ..t.clone()
            })
            .await;
        }
    }
    if plan.opts.keep_files {
        let _ = tmp.keep();
    }
    outcome
}

async fn run(plan: &Plan, targets: &[Target]) -> Result<(), String> {
    println!("{}", machine(plan, targets).await);
    let mut peers = Vec::new();
    let mut notes = Vec::new();
    if plan.wants("failover") || plan.wants("handover") || plan.wants("locks") {
        peers.push(measure_etcd(plan).await?);
        match measure_zookeeper(plan).await {
            Ok(zk) => peers.push(zk),
            Err(e) => {
                eprintln!("tenure-bench: skipping ZooKeeper: {e}");
                notes.push(format!("ZooKeeper was skipped: {e}."));
            }
        }
    }
    for p in &peers {
        notes.push(format!(
            "{} was measured once in this run, before the backends; its figures are repeated in \
             every table.",
            p.about
        ));
    }
    let mut tables = Vec::new();
    let mut curves = Vec::new();
    for target in targets {
        eprintln!("== {}", target.engine.title());
        let (mut table, curve) = backend(plan, target, &peers).await;
        table.notes.extend(notes.iter().cloned());
        println!("{}", table.render());
        tables.push(table);
        curves.extend(curve);
    }
    let plot = match (&plan.opts.plot, plan.opts.quick) {
        (Some(path), _) => Some(path.clone()),
        (None, false) => Some(PathBuf::from("docs/cost-curve.png")),
        (None, true) => None,
    };
    match plot.filter(|_| !curves.is_empty() && !plan.opts.no_plot) {
        Some(path) => match crate::plot::draw(&curves, &path, &plan.opts.plot_font) {
            Ok(()) => eprintln!("tenure-bench: cost curve drawn to {}", path.display()),
            Err(e) => eprintln!("tenure-bench: no plot ({e}); the tables above have its figures"),
        },
        None if !curves.is_empty() && plan.opts.quick && !plan.opts.no_plot => {
            eprintln!("tenure-bench: a quick run draws no plot unless given --plot PATH");
        }
        None => {}
    }
    if let Some(path) = &plan.opts.json {
        let all = serde_json::json!({ "tables": tables, "curves": curves });
        let json = serde_json::to_string_pretty(&all).map_err(|e| e.to_string())?;
        std::fs::write(path, json).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The machine, the versions and the command, as printed above the tables.
async fn machine(plan: &Plan, targets: &[Target]) -> String {
    let sh = |cmd: &str| {
        std::process::Command::new("sh")
            .arg("-c")
            .arg(cmd)
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    let mut out = String::from("## Machine\n\n```text\n");
    out.push_str(&format!("$ nproc\n{}\n", sh("nproc")));
    out.push_str(&format!("$ free -g\n{}\n", sh("free -g")));
    out.push_str(&format!("$ uname -r\n{}\n", sh("uname -r")));
    for t in targets {
        out.push_str(&format!("{}: {}\n", t.engine.title(), db::version(t).await));
    }
    out.push_str(&format!(
        "etcd: {}\n",
        sh(&format!(
            "{} --version | head -1",
            plan.opts.etcd_bin.display()
        ))
    ));
    out.push_str(&format!(
        "ZooKeeper: {} (Debian), kazoo {}\n",
        sh("dpkg-query -W -f='${Version}' zookeeper 2>/dev/null || echo missing"),
        sh(&format!(
            "{} -c 'import kazoo.version as v; print(v.__version__)' 2>/dev/null || echo missing",
            plan.opts.python.display()
        ))
    ));
    out.push_str("```\n\n");
    let args: Vec<String> = std::env::args().skip(1).collect();
    out.push_str(&format!(
        "Command: `tenure-bench {}` (ttl {:?}, {} trials per failover/handover figure)\n",
        args.join(" "),
        plan.opts.ttl,
        plan.trials
    ));
    out
}

/// Crash failover and graceful handover of a peer's candidates.
async fn elections(plan: &Plan, peer: &mut Peer, contender: Contender) -> Result<(), String> {
    let key = peer.name.to_lowercase();
    let setup = |name: String| Setup {
        contender: contender.clone(),
        bench: plan.bench.clone(),
        ttl: plan.opts.ttl,
        dir: plan.dir.clone(),
        name,
    };
    if plan.wants("failover") {
        peer.crash = Some(
            crate::failover::measure(
                &setup(format!("{key}-crash")),
                Scenario::Crash,
                plan.trials,
                &format!("{key} crash"),
            )
            .await?,
        );
    }
    if plan.wants("handover") {
        peer.handover = Some(
            crate::failover::measure(
                &setup(format!("{key}-handover")),
                Scenario::Handover,
                plan.trials,
                &format!("{key} handover"),
            )
            .await?,
        );
    }
    Ok(())
}

fn log_cycles(peer: &Peer, t: &Throughput) {
    eprintln!(
        "  {} lock cycles, {} task(s): {}",
        peer.name.to_lowercase(),
        t.tasks,
        cycles(t)
    );
}

async fn measure_etcd(plan: &Plan) -> Result<Peer, String> {
    eprintln!("== etcd");
    let etcd = Etcd::start(
        &plan.opts.etcd_bin,
        plan.opts.etcd_port,
        &plan.dir.join("etcd.log"),
    )
    .await?;
    let mut f = Peer::new("etcd", "etcdctl lock --ttl", "etcdctl lock");
    f.locks = "etcd txn + delete";
    f.about = format!("etcd {} (its own data dir, fsync on)", etcd.version);
    let contender = Contender::Etcd {
        etcdctl: plan.opts.etcdctl_bin.clone(),
        endpoint: etcd.endpoint.clone(),
    };
    elections(plan, &mut f, contender).await?;
    if plan.wants("locks") {
        let http = Http::new(&etcd.endpoint);
        let lease = http.grant(60).await?;
        let system = Arc::new(System::Etcd { http, lease });
        let warmup = Duration::from_millis(500);
        let one = locks::measure(system.clone(), 1, warmup, plan.lock_run).await;
        log_cycles(&f, &one);
        let eight = locks::measure(system, 8, warmup, plan.lock_run).await;
        log_cycles(&f, &eight);
        f.locks1 = Some(one);
        f.locks8 = Some(eight);
    }
    etcd.stop().await;
    Ok(f)
}

async fn measure_zookeeper(plan: &Plan) -> Result<Peer, String> {
    eprintln!("== ZooKeeper");
    let tools = zookeeper::Tools {
        java: &plan.opts.java,
        jar: &plan.opts.zookeeper_jar,
        python: &plan.opts.python,
        port: plan.opts.zookeeper_port,
    };
    let zk = ZooKeeper::start(&tools, plan.opts.ttl, &plan.dir).await?;
    let mut f = Peer::new("ZooKeeper", "kazoo Election", "kazoo Election");
    f.locks = "kazoo Lock (ZooKeeper)";
    f.about = format!(
        "ZooKeeper {} (standalone, its own data dir, fsync on, every session timeout = ttl, \
         tickTime ttl/10) with kazoo {} (its Election and Lock recipes; one Python process per \
         candidate and per lock task, each its own session)",
        zk.version, zk.kazoo
    );
    elections(plan, &mut f, Contender::ZooKeeper(zk.client.clone())).await?;
    if plan.wants("locks") {
        let warmup = Duration::from_millis(500);
        let one = zk.lock_cycles(1, warmup, plan.lock_run, &plan.dir).await?;
        log_cycles(&f, &one);
        let eight = zk.lock_cycles(8, warmup, plan.lock_run, &plan.dir).await?;
        log_cycles(&f, &eight);
        f.locks1 = Some(one);
        f.locks8 = Some(eight);
    }
    zk.stop().await;
    Ok(f)
}

/// Every benchmark on one backend; a benchmark that fails is a row saying so. The cost curve
/// also comes back as such, for the plot.
async fn backend(plan: &Plan, target: &Target, peers: &[Peer]) -> (Table, Option<Curve>) {
    let mut t = Table::new(format!(
        "{} (ttl {:?})",
        target.engine.title(),
        plan.opts.ttl
    ));
    let ttl = plan.opts.ttl.as_secs_f64();
    if plan.wants("failover") {
        match failover_rows(plan, target, peers, ttl).await {
            Ok(rows) => t.rows.extend(rows),
            Err(e) => t
                .rows
                .push(Row::new("crash failover", format!("error: {e}")).goal("", Verdict::Miss)),
        }
    }
    if plan.wants("handover") {
        match handover_rows(plan, target, peers).await {
            Ok(rows) => t.rows.extend(rows),
            Err(e) => t
                .rows
                .push(Row::new("graceful handover", format!("error: {e}"))),
        }
    }
    if plan.wants("locks") {
        match lock_rows(plan, target, peers).await {
            Ok(rows) => t.rows.extend(rows),
            Err(e) => t
                .rows
                .push(Row::new("lock cycles", format!("error: {e}")).goal("", Verdict::Miss)),
        }
    }
    if plan.wants("scale") {
        match scale_rows(plan, target).await {
            Ok((rows, notes)) => {
                t.rows.extend(rows);
                t.notes.extend(notes);
            }
            Err(e) => t
                .rows
                .push(Row::new("scale", format!("error: {e}")).goal("", Verdict::Miss)),
        }
    }
    if plan.wants("footprint") {
        match footprint_rows(plan, target).await {
            Ok(rows) => t.rows.extend(rows),
            Err(e) => t
                .rows
                .push(Row::new("footprint", format!("error: {e}")).goal("", Verdict::Miss)),
        }
    }
    let mut measured = None;
    if plan.wants("curve") {
        match cost_curve(plan, target).await {
            Ok(c) => {
                t.rows.extend(curve::rows(&c));
                t.notes.push(format!(
                    "Cost curve ({}): lock cycles through one store with a pool of {} \
                     connection(s), {:.0} s per point, beside raw SQL through a pool of the \
                     same size; leases held by one process with at_most 20 s (renewed every 5 s), \
                     watched for 2 renew intervals, each size on its own tables.",
                    target.engine.title(),
                    c.pool,
                    plan.curve_run.as_secs_f64()
                ));
                measured = Some(c);
            }
            Err(e) => t.rows.push(Row::new("cost curve", format!("error: {e}"))),
        }
    }
    (t, measured)
}

/// The cost curve of one backend: lock cycles at [`curve::TASKS`], then each size of leases.
async fn cost_curve(plan: &Plan, target: &Target) -> Result<Curve, String> {
    let key = target.engine.key();
    let pool = curve::pool_size(target.engine, plan.opts.curve_pool);
    let cycles = curve::cycles(target, pool, plan.curve_run).await?;
    let mut leases = Vec::new();
    for (i, &n) in plan.curve_leases.iter().enumerate() {
        let prefix = format!("{}{}", target.prefix, curve::PREFIXES[1 + i]);
        let within = plan.opts.curve_acquire_within;
        let point =
            match hold_leases(plan, target, &prefix, n, Duration::from_secs(20), 2, within).await {
                Ok(held) => {
                    eprintln!(
                    "  {key} curve, {n} leases: taken in {:.1} s, {:.1} statements per interval, \
                     CPU {:.2} s, RSS {} kB, {} still held",
                    held.acquire_s,
                    held.statements_per_interval(),
                    held.cpu_s,
                    held.rss_kb,
                    held.still_held
                );
                    LeasePoint {
                        leases: n,
                        held: Some(held),
                        error: None,
                    }
                }
                Err(e) => {
                    eprintln!("  {key} curve, {n} leases: {e}");
                    LeasePoint {
                        leases: n,
                        held: None,
                        error: Some(e),
                    }
                }
            };
        leases.push(point);
    }
    Ok(Curve {
        backend: target.engine.title().to_string(),
        pool,
        cycles,
        leases,
    })
}

fn tenure_setup(plan: &Plan, target: &Target, name: &str) -> Setup {
    Setup {
        contender: Contender::Tenure {
            bin: plan.tenure.clone(),
            url: target.url.clone(),
            prefix: target.prefix.clone(),
        },
        bench: plan.bench.clone(),
        ttl: plan.opts.ttl,
        dir: plan.dir.clone(),
        name: name.into(),
    }
}

async fn failover_rows(
    plan: &Plan,
    target: &Target,
    peers: &[Peer],
    ttl: f64,
) -> Result<Vec<Row>, String> {
    let key = target.engine.key();
    let ours = crate::failover::measure(
        &tenure_setup(plan, target, &format!("{key}-crash")),
        Scenario::Crash,
        plan.trials,
        &format!("{key} tenure crash"),
    )
    .await?;
    seeds::prepare(target).await?;
    let seed_setup = Setup {
        contender: Contender::Seeds {
            url: target.url.clone(),
            prefix: target.prefix.clone(),
        },
        bench: plan.bench.clone(),
        ttl: plan.opts.ttl,
        dir: plan.dir.clone(),
        name: format!("{key}-seeds"),
    };
    let theirs = crate::failover::measure(
        &seed_setup,
        Scenario::Crash,
        plan.trials,
        &format!("{key} seeds crash"),
    )
    .await?;
    let limit = ttl + 0.2;
    let mut verdicts = vec![at_most(ours.p99, limit)];
    let measure = "crash failover p50 / p99";
    let mut goal = format!("p99 ≤ ttl + 0.2 s = {limit:.1} s");
    if let Some(e) = peers
        .iter()
        .find(|p| p.name == "etcd")
        .and_then(|p| p.crash.as_ref())
    {
        verdicts.push(Verdict::from(
            matches!((ours.p99, e.p99), (Some(a), Some(b)) if a <= b),
        ));
        goal.push_str(" and ≤ etcd");
    }
    let crashes: Vec<(&Peer, &Summary)> = peers
        .iter()
        .filter_map(|p| p.crash.as_ref().map(|s| (p, s)))
        .collect();
    let mut rows: Vec<Row> = crashes
        .iter()
        .map(|(p, s)| {
            Row::new(measure, secs_summary(&ours)).against(
                p.elects,
                secs_summary(s),
                format!("p99 {}", times(ratio(ours.p99, s.p99))),
            )
        })
        .collect();
    if rows.is_empty() {
        rows.push(Row::new(measure, secs_summary(&ours)));
    }
    rows[0] = rows[0].clone().goal(goal, Verdict::all(&verdicts));
    rows.push(Row::new(measure, secs_summary(&ours)).against(
        "seeds' SQL (1 s poll)",
        secs_summary(&theirs),
        format!("p99 {}", times(ratio(ours.p99, theirs.p99))),
    ));
    let frac = |s: &Summary| {
        format!(
            "{} / {}",
            times(s.p50.map(|v| v / ttl)),
            times(s.p99.map(|v| v / ttl))
        )
    };
    let mut who: Vec<&str> = crashes.iter().map(|(p, _)| p.name).collect();
    let mut figures: Vec<String> = crashes.iter().map(|(_, s)| frac(s)).collect();
    who.push("seeds' SQL");
    figures.push(frac(&theirs));
    rows.push(Row::new("crash failover as × ttl", frac(&ours)).against(
        who.join("; "),
        figures.join("; "),
        "",
    ));
    Ok(rows)
}

async fn handover_rows(plan: &Plan, target: &Target, peers: &[Peer]) -> Result<Vec<Row>, String> {
    let ours = crate::failover::measure(
        &tenure_setup(plan, target, &format!("{}-handover", target.engine.key())),
        Scenario::Handover,
        plan.trials,
        &format!("{} tenure handover", target.engine.key()),
    )
    .await?;
    let measure = "graceful handover p50 / p99";
    let mut rows: Vec<Row> = peers
        .iter()
        .filter_map(|p| {
            let e = p.handover.as_ref()?;
            Some(Row::new(measure, millis_summary(&ms(&ours))).against(
                p.hands_over,
                millis_summary(&ms(e)),
                format!("p99 {}", times(ratio(ours.p99, e.p99))),
            ))
        })
        .collect();
    if rows.is_empty() {
        rows.push(Row::new(measure, millis_summary(&ms(&ours))));
    }
    // Every backend wakes its followers at a release: NOTIFY on PostgreSQL, the doorbell
    // file on SQLite, the named-lock bells on MySQL.
    rows[0] = rows[0]
        .clone()
        .goal("p99 ≤ 50 ms", at_most(ours.p99, 0.050));
    Ok(rows)
}

/// A summary in seconds as one in milliseconds.
fn ms(s: &Summary) -> Summary {
    Summary {
        p50: s.p50.map(|v| v * 1e3),
        p99: s.p99.map(|v| v * 1e3),
        ..s.clone()
    }
}

fn cycles(t: &Throughput) -> String {
    let mut s = format!(
        "{}/s (p50 {:.2} ms, p99 {:.2} ms)",
        count(Some(t.per_second)),
        t.p50_ms.unwrap_or(f64::NAN),
        t.p99_ms.unwrap_or(f64::NAN)
    );
    if t.errors > 0 {
        s.push_str(&format!(
            " [{} errors: {}]",
            t.errors,
            t.first_error.as_deref().unwrap_or("?")
        ));
    }
    s
}

async fn lock_rows(plan: &Plan, target: &Target, peers: &[Peer]) -> Result<Vec<Row>, String> {
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
    let mut rows = Vec::new();
    for tasks in [1, 8] {
        let ours = locks::measure(tenure.clone(), tasks, warmup, plan.lock_run).await;
        eprintln!(
            "  {key} tenure lock cycles, {tasks} task(s): {}",
            cycles(&ours)
        );
        let base = locks::measure(raw.clone(), tasks, warmup, plan.lock_run).await;
        eprintln!(
            "  {key} raw SQL lock cycles, {tasks} task(s): {}",
            cycles(&base)
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
    if let System::Raw(raw) = &*raw {
        raw.close().await;
    }
    Ok(rows)
}

/// Runs `tenure-bench hold-leases` (`leases` locks with ttl `at_most` on tables `prefix`,
/// watched for `intervals` renew intervals) and reads its answer; gives up on it once it has
/// taken longer than `acquire_within` plus its window.
#[allow(clippy::too_many_arguments)]
async fn hold_leases(
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

async fn scale_rows(plan: &Plan, target: &Target) -> Result<(Vec<Row>, Vec<String>), String> {
    let key = target.engine.key();
    let at_most = Duration::from_secs(10);
    let prefix = format!("{}s_", target.prefix);
    let held = hold_leases(
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
            format!("{:.1} s with 8 tasks", held.acquire_s),
        ),
    ];
    let crowd_target = Target {
        prefix: format!("{}c_", target.prefix),
        ..target.clone()
    };
    let crowd = scale::crowd(
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

async fn footprint_rows(plan: &Plan, target: &Target) -> Result<Vec<Row>, String> {
    let (db, label) = match target.engine {
        Engine::Sqlite => (
            Database::SqliteDefault {
                state_home: plan.dir.join("state"),
            },
            "the SQLite default",
        ),
        _ => (
            Database::Url {
                url: target.url.clone(),
                prefix: target.prefix.clone(),
            },
            "this backend",
        ),
    };
    let f = footprint::measure(
        &plan.tenure,
        &plan.bench,
        &db,
        &plan.dir,
        plan.footprint_trials,
        target.engine.key(),
    )
    .await?;
    let rss_mib = f.rss_kb.map(|k| k as f64 / 1024.0);
    Ok(vec![
        Row::new(
            "`tenure run` supervisor RSS while leading",
            rss_mib.map_or("-".into(), |m| format!("{m:.1} MiB")),
        )
        .goal("≤ 15 MiB", at_most(rss_mib, 15.0)),
        Row::new(
            format!("`tenure run` start → child started ({label}) p50 / p99"),
            millis_summary(&ms(&f.startup)),
        ),
    ])
}
