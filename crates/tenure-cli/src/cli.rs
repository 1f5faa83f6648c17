//! The command line, as clap parses it. Values are validated again (by the library) before
//! anything touches the database.

use crate::supervise::Isolation;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::time::Duration;

const EXIT_CODES: &str = "\
Exit codes:
  0    success (tenure run: the command's own status is passed through)
  1    leader --am-i: the candidate does not lead
  64   usage or configuration error (bad name, id, prefix, URL, timing; missing tables)
  69   database unreachable, or it refused the credentials (also: CMD exited
       but its release failed; the name stays held until its lease expires)
  70   internal error
  73   not acquired: --no-wait or --timeout gave up
  75   leadership lost while the command ran, or given up after failed health checks
       (it was stopped)
  128+N  tenure run: the command was killed by signal N";

/// Leader election and cluster locks on the database you already run.
#[derive(Debug, Parser)]
#[command(name = "tenure", version = env!("TENURE_VERSION"), after_help = EXIT_CODES)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub global: Global,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Args)]
pub(crate) struct Global {
    /// Database URL: postgres://…, mysql://… (mariadb://…) or sqlite://PATH. Default: an SQLite
    /// file in the state directory ($XDG_STATE_HOME/tenure/tenure.db, else
    /// ~/.local/state/tenure/tenure.db).
    #[arg(
        long,
        env = "TENURE_DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    pub database_url: Option<String>,

    /// PostgreSQL: a direct URL of the same database to LISTEN on for lease changes, for when
    /// --database-url goes through a transaction-mode pooler (`?pooler=transaction`, e.g.
    /// PgBouncer), where LISTEN cannot work; without it followers there poll every renew
    /// interval.
    #[arg(long, env = "TENURE_NOTIFY_URL", global = true, hide_env_values = true)]
    pub notify_url: Option<String>,

    /// Prefix of tenure's table names.
    #[arg(
        long,
        env = "TENURE_TABLE_PREFIX",
        global = true,
        default_value = "tenure_"
    )]
    pub table_prefix: String,

    /// Do not create missing tables (for users without DDL rights; see `tenure migrate --print`).
    #[arg(long, global = true)]
    pub no_create: bool,

    /// Print machine-readable JSON (JSON lines for `watch`).
    #[arg(long, global = true)]
    pub json: bool,

    /// More log output (-v: debug, -vv: trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,

    /// Less log output (-q: warnings only, -qq: errors only).
    #[arg(short, long, action = clap::ArgAction::Count, global = true, conflicts_with = "verbose")]
    pub quiet: u8,

    /// Log format on stderr.
    #[arg(long, value_enum, default_value = "human", global = true)]
    pub log_format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Campaign for NAME and run CMD while this process leads.
    Run(RunArgs),
    /// Run CMD under the cluster lock NAME (or one of N permits with -n N).
    Lock(LockArgs),
    /// Run CMD on every tick of a schedule, on exactly one node of all that run this line.
    Every(EveryArgs),
    /// Share the N shards of GROUP with the other live members and run one CMD per shard
    /// this member owns.
    Spread(SpreadArgs),
    /// Show who leads NAME.
    Leader(LeaderArgs),
    /// Show every name: holder, term, since, time left, paused, handover target, live
    /// candidates; every spreading group with live members: each member's shards, the
    /// unowned and the paused ones; and, where etcd's API was used on the database, its
    /// revision, live leases and lock/election keys with their owners.
    Status,
    /// Show the candidates of NAME: priority, observer or not, metadata, last seen, leader.
    Candidates(CandidatesArgs),
    /// Print one line per change of NAME until interrupted.
    Watch(WatchArgs),
    /// Show the transitions of NAME, newest first.
    History(HistoryArgs),
    /// Force a re-election of NAME (nobody starts before the current lease would expire).
    Demote(DemoteArgs),
    /// Hand NAME over to CANDIDATE.
    Handover(HandoverArgs),
    /// Pause NAME: its leader steps down and nobody acquires until resumed (for a spreading
    /// group's name: the whole group, whatever joins while it is paused).
    Pause(NameArg),
    /// Resume a paused NAME (for a spreading group's name: the whole group).
    Resume(NameArg),
    /// Create tenure's tables, or print the DDL for a DBA.
    Migrate(MigrateArgs),
    /// Print the fence statement for the database's dialect, for programs in any language:
    /// parameters name, holder, term; one row means the tenure is still yours and a takeover
    /// now waits for your commit, no row means roll back (needs no connection).
    FenceSql(FenceSqlArgs),
    /// Serve the HTTP API, Prometheus metrics, leader-check and a status page; with
    /// --campaign, campaign for those names as a sidecar.
    Serve(ServeArgs),
    /// Print the shell completion script for SHELL (bash, zsh, fish, elvish, powershell).
    Completions(CompletionsArgs),
    /// Print the manual page of tenure or of one command (roff), write them all to a
    /// directory, or print every command's --help as one Markdown page.
    Man(ManArgs),
}

/// Every duration flag: humantime's syntax, at most [`tenure::validate::MAX_DURATION`] (each
/// flag's own rule, such as the ttl's, is checked where it is used).
pub(crate) fn duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s)
        .map_err(|e| format!("{e}; expected a duration such as 500ms, 10s or 2m"))?;
    if d > tenure::validate::MAX_DURATION {
        return Err(format!(
            "{s} is out of range: at most 100 years (3153600000s)"
        ));
    }
    Ok(d)
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The election's name.
    pub name: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    /// Published while leading (e.g. this node's address), for `tenure leader`.
    #[arg(long)]
    pub metadata: Option<String>,
    /// After CMD exits or leadership is lost, campaign again and rerun CMD when elected (after
    /// a health step-down: once the health check passes again).
    #[arg(long)]
    pub keep_campaigning: bool,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub health: HealthArgs,
    // Last: its help heading would also head the flags after it.
    #[command(flatten)]
    pub standing: StandingArgs,
    #[command(flatten)]
    pub command: CommandArgs,
    #[command(flatten)]
    pub watching: crate::watching::WatchingArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SpreadArgs {
    /// The group's name: its shards are the leases GROUP/0 … GROUP/N-1.
    pub group: String,
    /// How many shards the group has, 1 to 1000000 (members restarted with another N share
    /// each shard among the members whose N covers it; see docs/guides/cli.md).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(tenure::spread::MAX_SHARDS)))]
    pub shards: u32,
    /// At most K shards on this member, 1 to 1000000 (shards beyond every member's cap stay
    /// unowned).
    #[arg(long, value_name = "K",
          value_parser = clap::value_parser!(u32).range(1..=i64::from(tenure::spread::MAX_SHARDS)))]
    pub max_per_member: Option<u32>,
    /// This member's weight: shares are proportional to it (1 to 2147483647).
    #[arg(long, default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(i32::MAX)))]
    pub weight: u32,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    #[command(flatten)]
    pub command: CommandArgs,
    #[command(flatten)]
    pub watching: crate::watching::WatchingArgs,
}

/// The lease a command campaigns with (`run`, `lock`, `every`, `serve --campaign`).
#[derive(Debug, Args)]
pub(crate) struct LeaseArgs {
    /// Lease ttl: how long a crashed holder keeps its lease (renewed every ttl/4).
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub ttl: Duration,
    /// Candidate id, the holder id on the lease. Default: <hostname>-<pid>-<4 random chars>.
    #[arg(long)]
    pub candidate: Option<String>,
}

/// Which candidate should lead (`run`, `every`, `serve --campaign`): see `tenure candidates`.
#[derive(Debug, Args)]
#[command(next_help_heading = "Candidates")]
pub(crate) struct StandingArgs {
    /// This candidate's priority, higher preferred (-2147483648 to 2147483647). A priority
    /// counts once its candidate has campaigned for --settle since it started, and not while
    /// it backs off (its tenures kept ending by expiry: its ttl, doubling up to 32 ttls). A
    /// vacant or expired lease waits for a campaigning candidate whose higher priority counts
    /// (at most its renew interval plus database timeout after it was last seen), and a leader
    /// hands over to one: its command stopped first, no overlap. Equal priorities change
    /// nothing.
    #[arg(
        long,
        default_value_t = 0,
        value_name = "N",
        allow_negative_numbers = true
    )]
    pub priority: i32,
    /// How long a candidate must have campaigned since it started (a restart begins again,
    /// whatever its --candidate) before its priority counts here: before this leader hands
    /// over to it. Longer than a flapping candidate's runs, it never takes the lead. Default:
    /// one renew interval (ttl/4).
    #[arg(long, value_parser = duration, value_name = "DUR")]
    pub settle: Option<Duration>,
}

/// How CMD is supervised while the lease is held (`run`, `lock`, `every`).
#[derive(Debug, Args)]
pub(crate) struct SuperviseArgs {
    /// How long CMD gets between SIGTERM and SIGKILL when tenure stops it (the lease lost or
    /// about to expire). Default: ttl/10.
    #[arg(long, value_parser = duration)]
    pub grace: Option<Duration>,
    /// How every process CMD starts is tied to the tenure: pid-namespace (CMD under tenure's
    /// own init in a PID namespace: the kernel kills the whole namespace with it), subreaper (a
    /// keeper that adopts orphans and kills the whole tree), or auto (pid-namespace where
    /// allowed). See docs/supervision.md.
    #[arg(long, value_enum, env = "TENURE_ISOLATION", default_value = "auto")]
    pub isolation: Isolation,
}

/// Whether to wait for the lease (`run`, `lock`). Without either flag: wait without a bound.
#[derive(Debug, Args)]
pub(crate) struct WaitArgs {
    /// Give up at once (exit 73) if the first attempt does not acquire the lease.
    #[arg(long, conflicts_with = "timeout")]
    pub no_wait: bool,
    /// Give up (exit 73) if the lease is not acquired within this long.
    #[arg(long, value_parser = duration)]
    pub timeout: Option<Duration>,
}

/// The supervised command (`run`, `lock`, `every`).
#[derive(Debug, Args)]
pub(crate) struct CommandArgs {
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Leadership follows health (`tenure run` and `tenure lock`).
#[derive(Debug, Args)]
#[command(next_help_heading = "Health checks")]
pub(crate) struct HealthArgs {
    /// A health check, run with `sh -c` every --health-interval while CMD runs (exit 0:
    /// healthy); after --health-failures failures in a row, tenure steps down.
    ///
    /// The check gets CMD's TENURE_* variables. On stepping down, CMD is stopped as on a loss
    /// and the lease is released with the reason in `tenure history`; then `tenure lock` and
    /// `tenure run` exit 75, while `tenure run --keep-campaigning` runs the check as a follower
    /// and campaigns again once it passes (so the check should test what this node needs to
    /// lead, not only CMD).
    #[arg(long, value_name = "CMD")]
    pub health_cmd: Option<String>,
    /// How often the check runs (from the start of one check to the next).
    #[arg(long, default_value = "5s", value_parser = duration, requires = "health_cmd", value_name = "DUR")]
    pub health_interval: Duration,
    /// A check running longer counts as a failure and its process group is killed; at most
    /// --health-interval.
    #[arg(long, default_value = "2s", value_parser = duration, requires = "health_cmd", value_name = "DUR")]
    pub health_timeout: Duration,
    /// Failures in a row that make tenure step down.
    #[arg(long, default_value_t = 3, requires = "health_cmd", value_name = "N")]
    pub health_failures: u32,
}

#[derive(Debug, Args)]
pub(crate) struct LockArgs {
    /// The lock's name.
    pub name: String,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// The lock stays unavailable until this long after it was taken, even once released
    /// (at most 100 years; if the release fails, tenure exits 69 and only the ttl holds it).
    #[arg(long, default_value = "0s", value_parser = duration)]
    pub at_least: Duration,
    /// A semaphore: up to N holders at once (permit i is the lease NAME#i).
    #[arg(short = 'n', long = "permits", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub permits: u32,
    /// Record every acquisition and release in `tenure history`. Without it the history
    /// shows only takeovers of an expired holder, releases after a failed health check and
    /// admin events.
    #[arg(long)]
    pub record_every_cycle: bool,
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    #[command(flatten)]
    pub wait: WaitArgs,
    #[command(flatten)]
    pub health: HealthArgs,
    #[command(flatten)]
    pub command: CommandArgs,
    #[command(flatten)]
    pub watching: crate::watching::WatchingArgs,
}

#[derive(Debug, Args)]
pub(crate) struct EveryArgs {
    /// The interval, e.g. 1s or 5m (ticks fall on multiples of it since the Unix epoch, by the
    /// database's clock); with --cron, a cron expression.
    pub schedule: String,
    /// The schedule's name (also its election's).
    pub name: String,
    /// SCHEDULE is a cron expression (UTC, with seconds: "0 */5 * * * *"), not an interval.
    #[arg(long)]
    pub cron: bool,
    #[command(flatten)]
    pub lease: LeaseArgs,
    #[command(flatten)]
    pub supervise: SuperviseArgs,
    /// At most this many missed ticks are run after an outage; older ones are skipped.
    #[arg(long, default_value_t = 10)]
    pub catch_up: u32,
    // Last: its help heading would also head the flags after it.
    #[command(flatten)]
    pub standing: StandingArgs,
    #[command(flatten)]
    pub command: CommandArgs,
    #[command(flatten)]
    pub watching: crate::watching::WatchingArgs,
}

#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    pub name: String,
    /// Exit 0 if this candidate leads NAME, 1 if not.
    #[arg(long, value_name = "ID")]
    pub am_i: Option<String>,
}

#[derive(Debug, Args)]
pub(crate) struct CandidatesArgs {
    pub name: String,
}

#[derive(Debug, Args)]
pub(crate) struct WatchArgs {
    pub name: String,
    /// How often to read the lease (PostgreSQL also wakes on NOTIFY).
    #[arg(long, default_value = "500ms", value_parser = duration)]
    pub interval: Duration,
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    pub name: String,
    /// How many transitions to show.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub limit: u32,
}

#[derive(Debug, Args)]
pub(crate) struct DemoteArgs {
    pub name: String,
    /// End the lease now instead of keeping its expiry (unsafe unless writes are fenced).
    #[arg(long)]
    pub now: bool,
}

#[derive(Debug, Args)]
pub(crate) struct HandoverArgs {
    pub name: String,
    /// A live candidate of NAME (`tenure candidates NAME`); its tenure stands: priorities do
    /// not hand it back (the next tenure follows them again).
    pub candidate: String,
    /// Install CANDIDATE with a new term now (unsafe unless writes are fenced: the old leader
    /// may overlap for up to one renew interval).
    #[arg(long)]
    pub now: bool,
    /// CANDIDATE is a process not yet started: hand over although it is not a live candidate
    /// (the lease stays reserved for it for one ttl).
    #[arg(long)]
    pub unregistered: bool,
}

#[derive(Debug, Args)]
pub(crate) struct NameArg {
    pub name: String,
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Print the DDL instead of running it (needs no connection).
    #[arg(long)]
    pub print: bool,
}

#[derive(Debug, Args)]
pub(crate) struct FenceSqlArgs {
    /// The dialect; default: the one the database URL names (SQLite without one).
    #[arg(long, value_enum)]
    pub dialect: Option<Dialect>,
    /// The fence for etcd locks taken through `tenure serve`'s etcd API instead: parameters the
    /// lock's key and a revision at which it was held ($ETCD_LOCK_KEY and $ETCD_LOCK_REV from
    /// `etcdctl lock`, or a Mutex's Key() and its key's create revision).
    #[cfg(feature = "etcd")]
    #[arg(long)]
    pub etcd: bool,
}

/// A SQL dialect tenure speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Dialect {
    /// PostgreSQL: parameters $1, $2, $3.
    Postgres,
    /// MySQL and MariaDB: parameters ?.
    Mysql,
    /// SQLite: parameters ?.
    Sqlite,
}

impl Dialect {
    pub(crate) fn kind(self) -> tenure::BackendKind {
        match self {
            Dialect::Postgres => tenure::BackendKind::Postgres,
            Dialect::Mysql => tenure::BackendKind::MySql,
            Dialect::Sqlite => tenure::BackendKind::Sqlite,
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// The command whose page to print (e.g. run for tenure-run(1)); default: tenure(1).
    #[arg(conflicts_with_all = ["dir", "markdown"])]
    pub command: Option<String>,
    /// Write every page (tenure.1, tenure-run.1, …) into this directory instead.
    #[arg(long, value_name = "DIR", conflicts_with = "markdown")]
    pub dir: Option<std::path::PathBuf>,
    /// Print every command's --help, verbatim, as one Markdown page instead
    /// (docs/reference/cli.md is this page).
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on. Reads are not authenticated: bind beyond loopback only on purpose.
    #[arg(long, default_value = "127.0.0.1:7070")]
    pub listen: std::net::SocketAddr,
    /// File holding the bearer token for the admin calls (demote, handover, pause, resume).
    /// Without it the admin calls are refused.
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// Campaign for NAME from this process (repeatable); GET /v1/leader-check/NAME answers
    /// 200 only while it leads.
    #[arg(long, value_name = "NAME")]
    pub campaign: Vec<String>,
    #[command(flatten)]
    pub lease: LeaseArgs,
    /// Register for the --campaign names and follow their leaders, but never lead them (a node
    /// that must know the leader and must never be it); GET /v1/leader-check answers 503.
    #[arg(long)]
    pub observe: bool,
    /// Published while leading a campaigned name (e.g. this node's address).
    #[arg(long)]
    pub metadata: Option<String>,
    /// How often the shared watcher reads every lease (PostgreSQL also wakes it on NOTIFY).
    #[arg(long, default_value = "1s", value_parser = duration)]
    pub poll_interval: Duration,
    /// Longest `wait` a blocking query may ask for (longer ones are shortened to it).
    #[arg(long, default_value = "10m", value_parser = duration)]
    pub max_wait: Duration,
    #[cfg(feature = "consul")]
    #[command(flatten)]
    pub consul: crate::serve::ConsulArgs,
    #[cfg(feature = "etcd")]
    #[command(flatten)]
    pub etcd: crate::serve::EtcdArgs,
    #[command(flatten)]
    pub watching: crate::watching::WatchingArgs,
    // Last: its help heading would also head the flags after it.
    #[command(flatten)]
    pub standing: StandingArgs,
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
    }
}
