//! `tenure-bench`: tenure side by side with etcd, ZooKeeper, the seeds' SQL and raw SQL, on this machine,
//! in one run. Progress on stderr, one table per backend on stdout. See docs/benchmarks.md.
//!
//! ```text
//! cargo build --release -p tenure-cli -p tenure-bench
//! cargo run --release -p tenure-bench -- [--backends postgres,mysql,sqlite] [--quick] …
//! ```

mod bench;
mod child;
mod curve;
mod db;
mod etcd;
mod etcd_api;
mod etcd_leases;
mod failover;
mod footprint;
mod locks;
mod peer;
mod plan;
mod plot;
mod procs;
mod raw;
mod report;
mod scale;
mod seeds;
mod spread;
mod stages;
mod zookeeper;

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[derive(Parser, Debug)]
#[command(
    name = "tenure-bench",
    about = "Benchmarks of tenure against etcd, ZooKeeper, the seeds' SQL and raw SQL",
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    helper: Option<Helper>,
    #[command(flatten)]
    options: Options,
}

/// The benchmark's options.
#[derive(Args, Debug, Clone)]
pub struct Options {
    /// Backends, comma-separated: postgres, mysql, sqlite.
    #[arg(long, default_value = "postgres,mysql,sqlite", value_delimiter = ',')]
    pub backends: Vec<String>,
    /// Benchmarks, comma-separated: failover, handover, locks, scale, footprint, curve, spread, etcd-api (etcd's API on tenure serve beside etcd).
    #[arg(
        long,
        default_value = "failover,handover,locks,scale,footprint,curve,spread,etcd-api",
        value_delimiter = ','
    )]
    pub only: Vec<String>,
    /// Trials of each failover and handover measurement.
    #[arg(long, default_value_t = 20)]
    pub trials: usize,
    /// A small run for a smoke check: 3 trials, short windows, 1,000 leases, 50 candidates.
    #[arg(long)]
    pub quick: bool,
    /// The lease ttl of every elector and lock (etcd: rounded up to whole seconds).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// Seconds of each lock-cycle measurement (after a 0.5 s warm-up).
    #[arg(long, default_value_t = 3.0)]
    pub lock_seconds: f64,
    /// Locks held by one process in the scale benchmark.
    #[arg(long, default_value_t = 10_000)]
    pub leases: usize,
    /// Candidates on one name in one process in the scale benchmark.
    #[arg(long, default_value_t = 200)]
    pub candidates: usize,
    /// Connections of the store's (and the raw SQL's) pool in the cost curve's lock cycles
    /// (SQLite: 1, its one writer).
    #[arg(long, default_value_t = 32)]
    pub curve_pool: u32,
    /// Seconds of each point of the cost curve's lock cycles (after a 0.5 s warm-up).
    #[arg(long, default_value_t = 2.0)]
    pub curve_seconds: f64,
    /// How long one process may take to acquire each size of the cost curve's leases before
    /// that size is reported as not reached.
    #[arg(long, default_value = "300s", value_parser = humantime::parse_duration)]
    pub curve_acquire_within: Duration,
    /// Where the cost curve's plot (PNG) goes. Default: `docs/cost-curve.png` (the published
    /// one, run from the repository's root); a `--quick` run draws none unless given a path.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Draw no plot.
    #[arg(long)]
    pub no_plot: bool,
    /// The TrueType font of the plot's text (Debian's `fonts-dejavu-core`).
    #[arg(
        long,
        default_value = "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"
    )]
    pub plot_font: PathBuf,
    /// Keep the temporary directory (stamps and the logs of every process) for inspection.
    #[arg(long)]
    pub keep_files: bool,
    /// Install a Prometheus recorder (as `tenure --metrics-listen` does) so that the library's
    /// metrics are recorded, not dropped: the A/B of what metrics cost (docs/benchmarks.md).
    #[arg(long)]
    pub metrics: bool,
    /// Also write every figure as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// The `tenure` binary. Default: `tenure` next to this executable.
    #[arg(long)]
    pub tenure_bin: Option<PathBuf>,
    #[arg(long, default_value = "/usr/bin/etcd")]
    pub etcd_bin: PathBuf,
    #[arg(long, default_value = "/usr/bin/etcdctl")]
    pub etcdctl_bin: PathBuf,
    /// etcd's client port (its peer port is this + 10).
    #[arg(long, default_value_t = 23790)]
    pub etcd_port: u16,
    /// Java, to run ZooKeeper.
    #[arg(long, default_value = "/usr/bin/java")]
    pub java: PathBuf,
    /// ZooKeeper's jar (Debian's `zookeeperd`; its manifest names the other jars).
    #[arg(long, default_value = "/usr/share/java/zookeeper.jar")]
    pub zookeeper_jar: PathBuf,
    /// ZooKeeper's client port on 127.0.0.1 (0: a free one).
    #[arg(long, default_value_t = 0)]
    pub zookeeper_port: u16,
    /// The Python that has kazoo (ZooKeeper's Election and Lock recipes).
    #[arg(long, default_value = "python3")]
    pub python: PathBuf,
    #[arg(
        long,
        env = "TENURE_TEST_POSTGRES_URL",
        default_value = "postgres://postgres@127.0.0.1:5432/test"
    )]
    pub postgres_url: String,
    #[arg(
        long,
        env = "TENURE_TEST_MYSQL_URL",
        default_value = "mysql://root@127.0.0.1:3306/test"
    )]
    pub mysql_url: String,
}

/// Modes the benchmark runs itself in.
#[derive(Subcommand, Debug)]
enum Helper {
    /// The supervised child: stamps its start, waits for SIGTERM, stamps its stop.
    #[command(hide = true)]
    Child {
        #[arg(long)]
        stamps: PathBuf,
    },
    /// One candidate of the seeds' election.
    #[command(hide = true)]
    SeedCandidate {
        #[arg(long)]
        url: String,
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        id: String,
        #[arg(long)]
        timeout_s: u64,
        #[arg(long)]
        stamps: PathBuf,
    },
    /// One process holding many locks; prints one JSON line.
    #[command(hide = true)]
    HoldLeases {
        #[arg(long)]
        url: String,
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        leases: usize,
        #[arg(long, value_parser = humantime::parse_duration)]
        at_most: Duration,
        #[arg(long)]
        intervals: u32,
        /// Where to write the JSON answer.
        #[arg(long)]
        out: PathBuf,
    },
    /// One member of a spreading group; prints JSON lines until killed.
    #[command(hide = true)]
    SpreadMember {
        #[arg(long)]
        url: String,
        #[arg(long)]
        prefix: String,
        #[arg(long)]
        group: String,
        #[arg(long)]
        shards: u32,
        #[arg(long)]
        id: String,
        #[arg(long, value_parser = humantime::parse_duration)]
        ttl: Duration,
    },
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn target(url: &str, prefix: &str) -> Result<db::Target, String> {
    let engine = match url.split(':').next() {
        Some("postgres" | "postgresql") => db::Engine::Postgres,
        Some("mysql" | "mariadb") => db::Engine::MySql,
        Some("sqlite") => db::Engine::Sqlite,
        _ => return Err(format!("unsupported URL {url}")),
    };
    Ok(db::Target {
        engine,
        url: url.to_string(),
        prefix: prefix.to_string(),
    })
}

/// With `--metrics`, the Prometheus recorder, its histograms drained every 5 s as the
/// command's upkeep does.
fn install_metrics(on: bool) -> Result<(), String> {
    use metrics_exporter_prometheus::{Matcher, PrometheusBuilder};
    if !on {
        return Ok(());
    }
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(
            Matcher::Suffix("_seconds".into()),
            tenure::telemetry::SECONDS_BUCKETS,
        )
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| e.to_string())?;
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(5));
        handle.run_upkeep();
    });
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.helper {
        Some(Helper::Child { stamps }) => child::run(&stamps).map_err(|e| e.to_string()),
        Some(Helper::SeedCandidate {
            url,
            prefix,
            id,
            timeout_s,
            stamps,
        }) => target(&url, &prefix)
            .and_then(|t| runtime().block_on(seeds::candidate(&t, &id, timeout_s, &stamps))),
        Some(Helper::HoldLeases {
            url,
            prefix,
            leases,
            at_most,
            intervals,
            out,
        }) => target(&url, &prefix).and_then(|t| {
            let held = runtime().block_on(scale::hold_leases(&t, leases, at_most, intervals))?;
            let json = serde_json::to_string(&held).map_err(|e| e.to_string())?;
            std::fs::write(&out, json).map_err(|e| format!("{}: {e}", out.display()))
        }),
        Some(Helper::SpreadMember {
            url,
            prefix,
            group,
            shards,
            id,
            ttl,
        }) => target(&url, &prefix)
            .and_then(|t| runtime().block_on(spread::member(&t, &group, shards, &id, ttl))),
        None => install_metrics(cli.options.metrics)
            .and_then(|()| runtime().block_on(bench::main(cli.options))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tenure-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
