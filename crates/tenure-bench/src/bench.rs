//! The run: start etcd and ZooKeeper, measure each once, then every benchmark per backend, and
//! print one table per backend. Everything started is killed, and every table of the run dropped, also
//! on error and on Ctrl-C.
//!
//! Each benchmark's rows are made beside its measurement: [`failover`] (crash failover and
//! handover), [`locks`] (lock cycles), [`scale`], [`footprint`], [`curve`] (the cost curve).

use crate::curve::{self, Curve};
use crate::db::{self, Engine, Target};
use crate::etcd::{Etcd, Http};
use crate::failover::{self, Contender, Scenario, Setup};
use crate::footprint;
use crate::locks::{self, System};
use crate::peer::Peer;
use crate::plan::Plan;
use crate::report::{cycles, Row, Table, Throughput, Verdict};
use crate::scale;
use crate::zookeeper::{self, ZooKeeper};
use crate::Options;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// The whole run; its tables on stdout, progress on stderr.
pub(crate) async fn main(opts: Options) -> Result<(), String> {
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
            "spread",
            "etcd-api",
        ]
        .contains(&o.as_str())
        {
            return Err(format!(
                "unknown benchmark {o:?} (failover, handover, locks, scale, footprint, curve, \
                 spread, etcd-api)"
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
    let plan = Plan::new(opts, tmp.path().to_path_buf(), tenure, bench);
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
        for p in ["", "s_", "c_", crate::etcd_api::PREFIX]
            .iter()
            .chain(curve::PREFIXES.iter())
        {
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
    let elections_or_locks =
        plan.wants("failover") || plan.wants("handover") || plan.wants("locks");
    if elections_or_locks || plan.wants("etcd-api") {
        peers.push(measure_etcd(plan).await?);
    }
    if elections_or_locks {
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
            failover::measure(
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
            failover::measure(
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
    elections(plan, &mut f, contender.clone()).await?;
    if plan.wants("etcd-api") && f.handover.is_none() {
        // The etcd API's handoff is set beside etcd's.
        let setup = Setup {
            contender,
            bench: plan.bench.clone(),
            ttl: plan.opts.ttl,
            dir: plan.dir.clone(),
            name: "etcd-handover".into(),
        };
        f.handover = Some(
            failover::measure(&setup, Scenario::Handover, plan.trials, "etcd handover").await?,
        );
    }
    if plan.wants("etcd-api") {
        let w =
            crate::etcd_api::watch_latency(&etcd.endpoint, &etcd.endpoint, "watched", 200).await?;
        eprintln!(
            "  etcd watch latency: {}",
            crate::report::millis_summary(&w)
        );
        f.watch = Some(w);
    }
    if plan.wants("locks") || plan.wants("etcd-api") {
        let http = Http::new(&etcd.endpoint);
        let lease = http.grant(60).await?;
        let system = Arc::new(System::Etcd {
            http: Box::new(http),
            lease,
        });
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
        match failover::crash_rows(plan, target, peers, ttl).await {
            Ok(rows) => t.rows.extend(rows),
            Err(e) => t
                .rows
                .push(Row::new("crash failover", format!("error: {e}")).goal("", Verdict::Miss)),
        }
    }
    if plan.wants("handover") {
        match failover::handover_rows(plan, target, peers).await {
            Ok(rows) => t.rows.extend(rows),
            Err(e) => t
                .rows
                .push(Row::new("graceful handover", format!("error: {e}"))),
        }
    }
    if plan.wants("locks") {
        match locks::rows(plan, target, peers).await {
            Ok(rows) => t.rows.extend(rows),
            Err(e) => t
                .rows
                .push(Row::new("lock cycles", format!("error: {e}")).goal("", Verdict::Miss)),
        }
    }
    if plan.wants("scale") {
        match scale::rows(plan, target).await {
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
        match footprint::rows(plan, target).await {
            Ok(rows) => t.rows.extend(rows),
            Err(e) => t
                .rows
                .push(Row::new("footprint", format!("error: {e}")).goal("", Verdict::Miss)),
        }
    }
    if plan.wants("spread") {
        match crate::spread::rows(plan, target).await {
            Ok((rows, notes)) => {
                t.rows.extend(rows);
                t.notes.extend(notes);
            }
            Err(e) => t
                .rows
                .push(Row::new("spread", format!("error: {e}")).goal("", Verdict::Miss)),
        }
    }
    if plan.wants("etcd-api") {
        match crate::etcd_api::rows(plan, target, peers).await {
            Ok(rows) => t.rows.extend(rows),
            Err(e) => t
                .rows
                .push(Row::new("etcd API", format!("error: {e}")).goal("", Verdict::Miss)),
        }
    }
    let mut measured = None;
    if plan.wants("curve") {
        match curve::measure(plan, target).await {
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
