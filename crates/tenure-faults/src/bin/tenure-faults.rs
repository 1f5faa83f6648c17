//! `tenure-faults`: runs the fault-injection scenarios and prints the results table.
//!
//! ```text
//! tenure-faults run [--profile short|long] [--backends sqlite,postgres,mysql,pgbouncer] [--only kill,pause] [--seed N]
//! tenure-faults run --profile ha [--only kill-primary,switchover,partition,lossy-failover,…]
//! ```
//! The `ha` profile builds its own database clusters (Patroni, Galera, a MariaDB pair; see
//! `docs/safety.md`) and ignores `--backends` and the URLs.
//! `node` and `hog` are the processes the runner starts; they are not meant to be run by hand.

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use tenure::BackendKind;
use tenure_faults::profile::{self, Profile};
use tenure_faults::runner::Settings;
use tenure_faults::scenario::Workload;
use tenure_faults::target::Target;
use tenure_faults::{dbserver, etcd, ha, node, report};

#[derive(Parser)]
#[command(about = "Fault injection for tenure: faults, a recorded history and a checker")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Runs the scenarios and prints the results table (exit 1 if any fails).
    Run {
        #[arg(long, value_enum, default_value = "short")]
        profile: Profile,
        /// Comma-separated: sqlite, postgres, mysql, pgbouncer (PostgreSQL through PgBouncer in
        /// transaction mode, `--pgbouncer-url`; process faults only: kill, pause, starve,
        /// clock, locks).
        #[arg(long, value_delimiter = ',', default_value = "sqlite,postgres,mysql")]
        backends: Vec<String>,
        /// Only these scenarios (kill, pause, starve, proxy, sessions, restart, clock, stop-in-tx,
        /// priority-kill, priority-pause, priority-proxy, same-id, locks, locks-same-id,
        /// spread-kill, spread-pause, etcd-lock-kill, etcd-lock-pause, etcd-serve-kill,
        /// etcd-unfenced; with `--profile ha`: kill-primary, switchover,
        /// partition, lossy-failover, lossy-failover-async, lossy-failover-async-no-epochs,
        /// etcd-lock-failover-async, mariadb-async-failover, mariadb-async-failover-no-epochs,
        /// galera-kill-primary, galera-switchover, galera-partition, standby, read-only,
        /// galera-spread).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// The seed of the nemesis's choices (random if not given; printed either way).
        #[arg(long)]
        seed: Option<u64>,
        /// The lease ttl of every node.
        #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
        ttl: Duration,
        #[arg(long, default_value_t = 3)]
        nodes: usize,
        #[arg(
            long,
            env = "TENURE_TEST_POSTGRES_URL",
            default_value = "postgres://postgres@127.0.0.1:5432/test"
        )]
        postgres_url: String,
        #[arg(
            long,
            env = "TENURE_TEST_MYSQL_URL",
            default_value = "mysql://root@127.0.0.1:3306/test"
        )]
        mysql_url: String,
        /// PgBouncer in transaction mode in front of the `--postgres-url` server (see
        /// `scripts/pgbouncer.sh`); its database is replaced by the suite's own.
        #[arg(
            long,
            env = "TENURE_TEST_PGBOUNCER_URL",
            default_value = "postgres://postgres@127.0.0.1:6432/test?pooler=transaction"
        )]
        pgbouncer_url: String,
    },
    /// A node (started by the runner).
    #[command(hide = true)]
    Node {
        #[arg(long)]
        url: String,
        #[arg(long)]
        name: String,
        #[arg(long)]
        id: String,
        /// The candidate / holder id (default: `--id`).
        #[arg(long)]
        candidate: Option<String>,
        #[arg(long, value_enum, default_value = "elector")]
        workload: Workload,
        /// Lock workload: how many lock names.
        #[arg(long, default_value_t = 2)]
        locks: u32,
        /// Lock workload: the semaphore's permits.
        #[arg(long, default_value_t = 2)]
        permits: u32,
        #[arg(long)]
        events: PathBuf,
        #[arg(long)]
        ttl_ms: u64,
        #[arg(long)]
        table: String,
        #[arg(long, default_value_t = 200)]
        work_ms: u64,
        #[arg(long)]
        stop_file: Option<PathBuf>,
        /// The elector's priority (higher preferred).
        #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
        priority: i32,
        /// Mint every term in epoch zero, as tenure did before epochs (the negative controls of
        /// the asynchronous failovers: a term handed out twice must be caught).
        #[arg(long)]
        no_epochs: bool,
    },
    /// The command of an `etcdctl lock` holder (started by etcdctl in the etcd scenarios): two
    /// writes around its work, fenced by `$ETCD_LOCK_KEY`/`$ETCD_LOCK_REV` (exit 3: refused).
    #[command(hide = true)]
    EtcdChild {
        #[arg(long)]
        url: String,
        #[arg(long)]
        table: String,
        #[arg(long)]
        holder: String,
        #[arg(long)]
        client: usize,
        #[arg(long)]
        work_ms: u64,
        /// The statement `tenure fence-sql --etcd` printed; none: the unfenced control.
        #[arg(long)]
        fence_sql: Option<String>,
        #[arg(long)]
        dir: PathBuf,
    },
    /// A busy loop for the CPU-starvation fault (started by the runner).
    #[command(hide = true)]
    Hog {
        #[arg(long)]
        ms: u64,
    },
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Hog { ms } => {
            let until = std::time::Instant::now() + Duration::from_millis(ms);
            let mut x = 0u64;
            while std::time::Instant::now() < until {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            ExitCode::SUCCESS
        }
        Command::EtcdChild {
            url,
            table,
            holder,
            client,
            work_ms,
            fence_sql,
            dir,
        } => {
            let config = etcd::child::ChildConfig {
                url,
                table,
                holder,
                client,
                work: Duration::from_millis(work_ms),
                fence_sql,
                dir,
            };
            let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
            match runtime.block_on(etcd::child::run(config)) {
                Ok(etcd::child::Written::Committed) => ExitCode::SUCCESS,
                Ok(etcd::child::Written::Refused) => {
                    eprintln!(
                        "tenure-faults etcd-child: the fence refused the write: the lock is gone"
                    );
                    ExitCode::from(3)
                }
                Err(e) => {
                    eprintln!("tenure-faults etcd-child: {e}");
                    ExitCode::from(70)
                }
            }
        }
        Command::Node {
            url,
            name,
            id,
            candidate,
            workload,
            locks,
            permits,
            events,
            ttl_ms,
            table,
            work_ms,
            stop_file,
            priority,
            no_epochs,
        } => {
            let config = node::NodeConfig {
                url,
                locks: node::locks::LockSet {
                    base: name.clone(),
                    locks,
                    permits,
                    spread: workload == Workload::Spread,
                },
                name,
                candidate: candidate.unwrap_or_else(|| id.clone()),
                id,
                workload,
                events,
                ttl: Duration::from_millis(ttl_ms),
                table,
                work: Duration::from_millis(work_ms),
                stop_file,
                priority,
                epochs: !no_epochs,
            };
            let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
            match runtime.block_on(node::run(config)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("tenure-faults node: {e}");
                    ExitCode::from(70)
                }
            }
        }
        Command::Run {
            profile,
            backends,
            only,
            seed,
            ttl,
            nodes,
            postgres_url,
            mysql_url,
            pgbouncer_url,
        } => {
            let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
            runtime.block_on(run(
                profile,
                backends,
                only,
                seed,
                ttl,
                nodes,
                [postgres_url, mysql_url, pgbouncer_url],
            ))
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run(
    profile: Profile,
    backends: Vec<String>,
    only: Vec<String>,
    seed: Option<u64>,
    ttl: Duration,
    nodes: usize,
    [postgres_url, mysql_url, pgbouncer_url]: [String; 3],
) -> ExitCode {
    let seed = seed.unwrap_or_else(rand::random);
    if profile == Profile::Ha {
        return run_ha(seed, &only, ttl, nodes).await;
    }
    let mut targets = Vec::new();
    for b in &backends {
        let (kind, url, pooled) = match b.as_str() {
            "sqlite" => (BackendKind::Sqlite, String::new(), false),
            "postgres" => (BackendKind::Postgres, postgres_url.clone(), false),
            "mysql" | "mariadb" => (BackendKind::MySql, mysql_url.clone(), false),
            "pgbouncer" => (BackendKind::Postgres, pgbouncer_url.clone(), true),
            other => {
                eprintln!(
                    "tenure-faults: unknown backend {other:?} (sqlite, postgres, mysql, pgbouncer)"
                );
                return ExitCode::from(64);
            }
        };
        if kind != BackendKind::Sqlite {
            // The suite's database is created on the server itself (behind PgBouncer too).
            let server = if pooled { &postgres_url } else { &url };
            if let Err(e) = dbserver::prepare(kind, server).await {
                eprintln!("tenure-faults: {e}");
                return ExitCode::from(69);
            }
        }
        let url = if kind == BackendKind::Sqlite {
            url
        } else {
            match dbserver::suite_url(&url) {
                Ok(u) => u,
                Err(e) => {
                    eprintln!("tenure-faults: {e}");
                    return ExitCode::from(64);
                }
            }
        };
        targets.push(Target { kind, url, pooled });
    }
    let settings = Settings {
        exe: std::env::current_exe().expect("the current executable"),
        ttl,
        nodes,
        duration: profile.duration(),
    };
    eprintln!(
        "tenure-faults: profile {profile:?}, seed {seed}, ttl {ttl:?}, {nodes} nodes per scenario"
    );
    let outcomes = profile::run_all(&targets, &settings, seed, &only, |o| {
        eprintln!(
            "  {:<11} {:<9} {} in {:.1} s",
            o.scenario,
            report::backend(o),
            if o.passed() { "pass" } else { "FAIL" },
            o.took.as_secs_f64()
        )
    })
    .await;
    println!("{}", report::table(&outcomes));
    print!("{}", report::details(&outcomes));
    if outcomes.iter().all(|o| o.passed()) && !outcomes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The `ha` profile: says what is missing (and fails under `CI=true`), runs the rest.
async fn run_ha(seed: u64, only: &[String], ttl: Duration, nodes: usize) -> ExitCode {
    let unknown: Vec<&String> = only
        .iter()
        .filter(|o| !ha::ALL.iter().any(|s| s.id() == **o))
        .collect();
    if !unknown.is_empty() {
        let known: Vec<String> = ha::ALL.iter().map(|s| s.id()).collect();
        eprintln!(
            "tenure-faults: unknown ha scenario(s) {unknown:?} (known: {})",
            known.join(", ")
        );
        return ExitCode::from(64);
    }
    let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
    let chosen: Vec<&ha::HaScenario> = ha::ALL
        .iter()
        .filter(|s| only.is_empty() || only.contains(&s.id()))
        .collect();
    let mut runnable = Vec::new();
    let mut lacking = false;
    for s in chosen {
        let missing = s.missing();
        if missing.is_empty() {
            runnable.push(s.id());
        } else {
            lacking = true;
            eprintln!(
                "tenure-faults: ha scenario {} cannot run here; missing: {}",
                s.id(),
                missing.join("; ")
            );
        }
    }
    if lacking {
        eprintln!(
            "tenure-faults: install with: apt-get install -y patroni etcd-server haproxy \
             galera-4 mariadb-server rsync (and run as root)"
        );
        if ci {
            eprintln!("tenure-faults: CI=true: every chosen ha scenario must run; failing");
            return ExitCode::from(69);
        }
        if runnable.is_empty() {
            eprintln!("tenure-faults: ha profile SKIPPED");
            return ExitCode::SUCCESS;
        }
    }
    let settings = Settings {
        exe: std::env::current_exe().expect("the current executable"),
        ttl,
        nodes,
        duration: Profile::Ha.duration(),
    };
    eprintln!(
        "tenure-faults: profile ha, seed {seed}, ttl {ttl:?}, {nodes} nodes per scenario, \
         Patroni ttl {} s, at most {:?} per scenario",
        ha::patroni::TTL,
        ha::SCENARIO_LIMIT
    );
    let all = ha::run_all(&settings, seed, &runnable, |o| {
        eprintln!(
            "  {:<21} {:<13} {} in {:.1} s",
            o.scenario.id(),
            o.scenario.cluster_name(),
            if o.passed() { "pass" } else { "FAIL" },
            o.took.as_secs_f64()
        )
    });
    // Interrupted: dropping the running scenario tears its cluster down (its `Drop`) before
    // the process exits.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("a SIGTERM handler");
    let outcomes = tokio::select! {
        outcomes = all => outcomes,
        _ = tokio::signal::ctrl_c() => return interrupted(),
        _ = term.recv() => return interrupted(),
    };
    println!("{}", ha::table(&outcomes));
    print!("{}", ha::details(&outcomes));
    if outcomes.iter().all(|o| o.passed()) && !outcomes.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn interrupted() -> ExitCode {
    eprintln!("tenure-faults: interrupted; the running scenario's cluster was torn down");
    ExitCode::from(130)
}
