//! The `ha` profile: tenure on a highly available database. A private Patroni cluster (three
//! PostgreSQL instances, etcd, HAProxy routing to the primary) is built for each scenario; the
//! tenure nodes point at HAProxy; the nemesis hits the *database* (its primary killed, a
//! switchover, a failover that loses commits) while a tenure leader renews; the checker tests
//! the history as in every other scenario. See `docs/safety.md`.
//!
//! Each scenario measures two failover times from the fault's start: the database's (the first
//! write through HAProxy that commits on another member) and tenure's (the first tenure gained
//! after the fault).
//!
//! The read-only scenarios ([`readonly`]) point the nodes straight at one server that refuses
//! writes (a Patroni replica, a MariaDB with `read_only`), then make it writable and read-only
//! again.

pub mod galera;
pub mod patroni;
pub mod procs;
mod readonly;
mod spread;

use crate::checker::{self, Expect, Verdict};
use crate::clock;
use crate::dbserver;
use crate::event::{self, Kind};
use crate::runner::cluster::Cluster;
use crate::runner::{Settings, Target};
use crate::scenario::{Fault, Scenario, Workload};
use galera::Galera;
use patroni::Patroni;
use rand::{Rng, SeedableRng};
use std::fmt::Write;
use std::path::PathBuf;
use std::time::Duration;
use tenure::BackendKind;
use tokio::time::sleep;

/// What the nemesis does to the database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DbFault {
    /// SIGKILL the primary member whole (Patroni, PostgreSQL and its children) while a tenure
    /// leader renews: Patroni fails over after its ttl.
    KillPrimary,
    /// A switchover by Patroni (`POST /switchover`) to a replica (in synchronous mode, the
    /// synchronous standby).
    Switchover,
    /// A partition of the primary (clients, WAL stream and etcd; not its REST API) while a
    /// tenure leader renews: Patroni demotes it and promotes a replica; the partition heals
    /// after tenure has a new leader.
    Partition,
    /// The lossy failover: the primary's WAL stream is cut, the tenure leader is killed so that
    /// a new tenure begins on the primary alone, then the primary is killed and Patroni
    /// promotes a replica. With `synchronous_mode: false` the new tenure's commit is lost and
    /// its term is handed out again (the negative control); with `true` it never commits.
    LossyFailover,
    /// The nodes point straight at a replica (not HAProxy): they must not lead, and say
    /// "read-only"; a switchover promotes it and they lead; a second switchover demotes it
    /// under its leader, which steps down by its deadline.
    Standby,
    /// The nodes point at one MariaDB after `SET GLOBAL read_only = 1`: the same three steps,
    /// with `read_only = 0` and `1` again.
    ReadOnly,
    /// Galera with each tenure node on its own member (the lock workload): writes spread
    /// across nodes, which tenure must warn about (`spread.rs`). The checker is not asserted:
    /// the premise, one writer node, is broken on purpose.
    Spread,
}

/// The database cluster a scenario builds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterKind {
    /// Patroni with `synchronous_mode: true`.
    PatroniSync,
    /// Patroni with `synchronous_mode: false` (the negative control).
    PatroniAsync,
    /// MariaDB Galera, HAProxy sending everything to the first available node.
    Galera,
    /// One MariaDB server (a one-node Galera, built the same way).
    MariaDb,
}

#[derive(Clone, Copy, Debug)]
pub struct HaScenario {
    pub name: &'static str,
    pub fault: DbFault,
    pub cluster: ClusterKind,
    /// The checker must find a violation (the premise "the database keeps its commits" is
    /// broken on purpose).
    pub negative_control: bool,
}

/// Every scenario of the profile, in order.
pub const ALL: &[HaScenario] = &[
    HaScenario {
        name: "kill-primary",
        fault: DbFault::KillPrimary,
        cluster: ClusterKind::PatroniSync,
        negative_control: false,
    },
    HaScenario {
        name: "switchover",
        fault: DbFault::Switchover,
        cluster: ClusterKind::PatroniSync,
        negative_control: false,
    },
    HaScenario {
        name: "partition",
        fault: DbFault::Partition,
        cluster: ClusterKind::PatroniSync,
        negative_control: false,
    },
    HaScenario {
        name: "lossy-failover",
        fault: DbFault::LossyFailover,
        cluster: ClusterKind::PatroniSync,
        negative_control: false,
    },
    HaScenario {
        name: "lossy-failover",
        fault: DbFault::LossyFailover,
        cluster: ClusterKind::PatroniAsync,
        negative_control: true,
    },
    HaScenario {
        name: "kill-primary",
        fault: DbFault::KillPrimary,
        cluster: ClusterKind::Galera,
        negative_control: false,
    },
    HaScenario {
        name: "switchover",
        fault: DbFault::Switchover,
        cluster: ClusterKind::Galera,
        negative_control: false,
    },
    HaScenario {
        name: "partition",
        fault: DbFault::Partition,
        cluster: ClusterKind::Galera,
        negative_control: false,
    },
    HaScenario {
        name: "standby",
        fault: DbFault::Standby,
        cluster: ClusterKind::PatroniSync,
        negative_control: false,
    },
    HaScenario {
        name: "read-only",
        fault: DbFault::ReadOnly,
        cluster: ClusterKind::MariaDb,
        negative_control: false,
    },
    HaScenario {
        name: "spread",
        fault: DbFault::Spread,
        cluster: ClusterKind::Galera,
        negative_control: false,
    },
];

impl HaScenario {
    pub fn cluster_name(&self) -> &'static str {
        match self.cluster {
            ClusterKind::PatroniSync => "patroni sync",
            ClusterKind::PatroniAsync => "patroni async",
            ClusterKind::Galera => "galera",
            ClusterKind::MariaDb => "mariadb",
        }
    }

    /// The scenario's name with its cluster, as `--only` takes it: `kill-primary`,
    /// `lossy-failover-async`, `galera-kill-primary`, `read-only` (one MariaDB).
    pub fn id(&self) -> String {
        match self.cluster {
            ClusterKind::PatroniSync | ClusterKind::MariaDb => self.name.to_string(),
            ClusterKind::PatroniAsync => format!("{}-async", self.name),
            ClusterKind::Galera => format!("galera-{}", self.name),
        }
    }

    /// No pause and a healthy clock: one believer at a time is asserted (I2); no failover
    /// bound, since the database's own failover comes first.
    fn expect(&self) -> Expect {
        Expect {
            exclusive: true,
            control_must_fail: false,
            failover_bound: None,
        }
    }
}

/// The result of one scenario.
#[derive(Debug)]
pub struct HaOutcome {
    pub scenario: HaScenario,
    pub seed: u64,
    pub verdict: Verdict,
    pub issued: usize,
    /// Fault start → the first write through HAProxy that committed on another member.
    pub db_failover: Option<Duration>,
    /// Fault start → the first tenure gained after it.
    pub tenure_failover: Option<Duration>,
    pub notes: Vec<String>,
    pub ran: bool,
    pub dir: Option<PathBuf>,
    pub took: Duration,
}

impl HaOutcome {
    /// The term violations (I1) the checker found: for the negative control, what it must
    /// find (a term handed out twice, or lowered).
    pub fn caught(&self) -> usize {
        self.verdict
            .violations
            .iter()
            .filter(|v| v.invariant == "I1")
            .count()
    }

    pub fn passed(&self) -> bool {
        let errors = self.notes.iter().any(|n| n.starts_with("error"));
        let checked = if self.scenario.negative_control {
            self.caught() > 0
        } else if self.scenario.fault == DbFault::Spread {
            // The premise is broken on purpose; its notes say what must hold.
            true
        } else {
            self.verdict.violations.is_empty()
        };
        self.ran && !errors && checked
    }
}

/// What the scenarios of `kind` need and this machine lacks.
pub fn missing(kind: ClusterKind) -> Vec<String> {
    match kind {
        ClusterKind::Galera | ClusterKind::MariaDb => galera::missing(),
        ClusterKind::PatroniSync | ClusterKind::PatroniAsync => patroni::missing(),
    }
}

/// The longest one scenario may take, cluster build and teardown included.
pub const SCENARIO_LIMIT: Duration = Duration::from_secs(180);

/// Runs the scenarios (all, or those whose [`HaScenario::id`] is in `only`), one at a time.
pub async fn run_all(
    settings: &Settings,
    seed: u64,
    only: &[String],
    mut progress: impl FnMut(&HaOutcome),
) -> Vec<HaOutcome> {
    let mut outcomes = Vec::new();
    for scenario in ALL
        .iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| *o == s.id()))
    {
        let seed = crate::runner::scenario_seed(seed, &scenario.id(), BackendKind::Postgres);
        let outcome = run(scenario, settings, seed).await;
        progress(&outcome);
        outcomes.push(outcome);
    }
    outcomes
}

async fn run(scenario: &HaScenario, settings: &Settings, seed: u64) -> HaOutcome {
    let started = std::time::Instant::now();
    let mut outcome = HaOutcome {
        scenario: *scenario,
        seed,
        verdict: Verdict::default(),
        issued: 0,
        db_failover: None,
        tenure_failover: None,
        notes: Vec::new(),
        ran: false,
        dir: None,
        took: Duration::ZERO,
    };
    let dir = match tempfile::Builder::new()
        .prefix(&format!("tenure-faults-ha-{}-", scenario.id()))
        .tempdir()
    {
        Ok(d) => d,
        Err(e) => {
            outcome.notes.push(format!("error: {e}"));
            return outcome;
        }
    };
    let driven = tokio::time::timeout(
        SCENARIO_LIMIT,
        drive(scenario, settings, seed, dir.path(), &mut outcome),
    )
    .await;
    match driven {
        Ok(Ok(())) => outcome.ran = true,
        Ok(Err(e)) => outcome.notes.push(format!("error: {e}")),
        Err(_) => outcome
            .notes
            .push(format!("error: not done within {SCENARIO_LIMIT:?}")),
    }
    outcome.took = started.elapsed();
    if !outcome.passed() || std::env::var_os("TENURE_FAULTS_KEEP").is_some() {
        outcome.dir = Some(dir.keep());
    }
    outcome
}

async fn drive(
    scenario: &HaScenario,
    settings: &Settings,
    seed: u64,
    dir: &std::path::Path,
    outcome: &mut HaOutcome,
) -> Result<(), String> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // The cluster is the stage, not what is tested: a build that fails (a state transfer that
    // did not finish, say) is tried once more, and said.
    let mut db = match Database::start(scenario.cluster, &dir.join("cluster-1")).await {
        Ok(db) => db,
        Err(e) => {
            outcome.notes.push(format!(
                "the first cluster build failed ({e}); its logs are in cluster-1; built again"
            ));
            Database::start(scenario.cluster, &dir.join("cluster")).await?
        }
    };
    let admin = db.admin_url();
    dbserver::prepare(db.kind(), &admin).await?;
    let url = dbserver::suite_url(&admin)?;
    let target = Target {
        kind: db.kind(),
        url: url.clone(),
        pooled: false,
    };
    let nodes = Scenario {
        name: scenario.name,
        fault: Fault::Kill,
        workload: if scenario.fault == DbFault::Spread {
            Workload::Locks
        } else {
            Workload::Elector
        },
        shared_id: false,
    };
    let (mut c, fault_at, target_name) = match scenario.fault {
        DbFault::Standby | DbFault::ReadOnly => {
            let c = Cluster::prepare(&target, settings, dir, &nodes, Vec::new()).await?;
            readonly::drive(c, &mut db, outcome).await?
        }
        DbFault::Spread => {
            let c = Cluster::prepare(&target, settings, dir, &nodes, Vec::new()).await?;
            spread::drive(c, &db, outcome).await?
        }
        _ => {
            let c = Cluster::start(&target, settings, dir, &nodes, Vec::new()).await?;
            fail_over(scenario, c, &mut db, &url, &mut rng, outcome).await?
        }
    };
    c.stop_all().await;
    if scenario.cluster == ClusterKind::Galera && scenario.fault != DbFault::Spread {
        outcome
            .notes
            .extend(spread::connect_notes(&spread::warned(&c)));
    }
    let (history, leases) = c.collect().await?;
    outcome.issued = history
        .iter()
        .filter(|e| matches!(e.kind, Kind::OpIssued { .. }))
        .count();
    outcome.tenure_failover = history
        .iter()
        .find(|e| e.t > fault_at && matches!(e.kind, Kind::Gained { .. }))
        .map(|e| clock::between(fault_at, e.t));
    let acquisitions = leases.get(&c.name).map_or(&[][..], Vec::as_slice);
    if scenario.fault != DbFault::Spread {
        outcome.verdict = checker::check(&history, acquisitions, &scenario.expect());
    }
    if let (Database::Galera(g), false) = (&db, scenario.fault == DbFault::Spread) {
        let now = g
            .primary()
            .await
            .map_or("-".to_string(), |i| g.nodes[i].name.clone());
        outcome
            .notes
            .push(format!("HAProxy's node {target_name} → {now}"));
    }
    if let Ok(roles) = db.roles().await {
        let leader = roles.iter().find(|r| r.role == "leader");
        outcome.notes.push(format!(
            "database primary {target_name} → {} (timeline {})",
            leader.map_or("-", |r| r.name.as_str()),
            leader
                .and_then(|r| r.timeline)
                .map_or("-".into(), |t| t.to_string())
        ));
    }
    Ok(())
}

/// The failover scenarios: a tenure leader through HAProxy, then the fault on the database,
/// then a new leader. Returns the nodes, when the fault began and the member it hit.
async fn fail_over(
    scenario: &HaScenario,
    mut c: Cluster,
    db: &mut Database,
    url: &str,
    rng: &mut rand::rngs::StdRng,
    outcome: &mut HaOutcome,
) -> Result<(Cluster, u64, String), String> {
    let ttl = c.settings.ttl;
    let leader = c
        .wait_leader(ttl * 4)
        .await
        .ok_or("no tenure leader before the fault")?;
    // A few renewals, then the fault at a random point of the renew cycle.
    sleep(ttl + Duration::from_millis(rng.gen_range(0..ttl.as_millis() as u64 / 4))).await;
    let primary = db.primary().await.ok_or("the cluster names no primary")?;
    let (target_name, old_port) = db.member(primary);
    let fault_at = match (&mut *db, scenario.fault) {
        (db, DbFault::KillPrimary) => {
            let t = start(&c, "primary_kill", &target_name);
            db.kill(primary);
            end(&c, "primary_kill", &target_name);
            t
        }
        (Database::Patroni(db), DbFault::Switchover) => {
            let candidate = if db.sync {
                db.sync_standby().await.ok_or("no synchronous standby")?
            } else {
                (0..db.members.len())
                    .find(|&i| i != primary)
                    .ok_or("no replica")?
            };
            let t = start(&c, "switchover", &target_name);
            db.switchover(primary, candidate).await?;
            end(&c, "switchover", &target_name);
            t
        }
        (Database::Galera(db), DbFault::Switchover) => {
            // Galera has no manager: the planned move of the writer is a clean shutdown of the
            // node HAProxy sends to; it leaves the cluster and HAProxy takes the next.
            let t = start(&c, "shutdown", &target_name);
            db.shutdown(primary).await?;
            end(&c, "shutdown", &target_name);
            t
        }
        (Database::Patroni(db), DbFault::Partition) => {
            let t = start(&c, "partition", &target_name);
            db.partition(primary, true);
            t
        }
        (Database::Galera(db), DbFault::Partition) => {
            let t = start(&c, "partition", &target_name);
            db.isolate(primary, true).await?;
            t
        }
        (Database::Patroni(db), DbFault::LossyFailover) => {
            let before = highest_term(&c);
            start(&c, "replication_cut", &target_name);
            db.cut_replication(primary, true);
            let id = c.nodes[leader].id.clone();
            start(&c, "kill", &id);
            c.kill(leader).await;
            end(&c, "kill", &id);
            // A new tenure on the primary alone: at once with asynchronous replication; never
            // with synchronous replication (its commit waits for the cut standby).
            let newer = wait_for(ttl * 3, || highest_term(&c) > before).await;
            outcome.notes.push(if newer {
                format!(
                    "a tenure (term {}) began on {target_name} after its WAL stream was cut",
                    highest_term(&c)
                )
            } else {
                format!("no tenure began on {target_name} after its WAL stream was cut")
            });
            if newer {
                // Let it write under its term.
                sleep(ttl / 2).await;
            }
            let slot = c.nodes[leader].slot;
            c.spawn(slot)?;
            let t = start(&c, "primary_kill", &target_name);
            db.kill(primary);
            end(&c, "primary_kill", &target_name);
            t
        }
        (Database::Galera(_), fault) => {
            return Err(format!("{fault:?} is not a Galera scenario"));
        }
        (_, fault @ (DbFault::Standby | DbFault::ReadOnly | DbFault::Spread)) => {
            return Err(format!("{fault:?} is not a failover scenario"));
        }
    };
    outcome.db_failover =
        wait_writable(db.kind(), url, old_port, fault_at, Duration::from_secs(60)).await;
    if outcome.db_failover.is_none() {
        return Err("the database did not fail over within 60 s".into());
    }
    if scenario.fault == DbFault::KillPrimary {
        let slot = c.nodes[leader].slot;
        if !c.nodes[leader].alive {
            c.spawn(slot)?;
        }
    }
    if c.wait_leader(Duration::from_secs(60)).await.is_none() {
        return Err("no tenure leader within 60 s of the database's failover".into());
    }
    // Let the new tenure work.
    sleep(ttl).await;
    if scenario.fault == DbFault::Partition {
        match &*db {
            // Held bytes (the old leader's last statements) now reach the old primary.
            Database::Patroni(db) => db.partition(primary, false),
            Database::Galera(db) => db.isolate(primary, false).await?,
        }
        end(&c, "partition", &target_name);
        sleep(ttl).await;
    }
    Ok((c, fault_at, target_name))
}

fn start(c: &Cluster, fault: &str, target: &str) -> u64 {
    let t = clock::now_ns();
    c.nemesis.record_at(
        t,
        Kind::FaultStart {
            fault: fault.into(),
            target: target.into(),
        },
    );
    t
}

fn end(c: &Cluster, fault: &str, target: &str) {
    c.nemesis.record(Kind::FaultEnd {
        fault: fault.into(),
        target: target.into(),
    });
}

/// The highest term any node has gained so far.
fn highest_term(c: &Cluster) -> u64 {
    c.nodes
        .iter()
        .flat_map(|n| event::read(&n.events).unwrap_or_default())
        .filter_map(|e| match e.kind {
            Kind::Gained { term, .. } => Some(term),
            _ => None,
        })
        .max()
        .unwrap_or(0)
}

async fn wait_for(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let until = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < until {
        if done() {
            return true;
        }
        sleep(Duration::from_millis(50)).await;
    }
    done()
}

/// From `since` (monotonic ns), how long until a write through `url` committed on a server
/// other than the one on `old_port`: a probe starts every 100 ms (each waits up to 2 s, so a
/// probe stuck on the old primary does not hide a new one), for at most `timeout`.
async fn wait_writable(
    kind: BackendKind,
    url: &str,
    old_port: u16,
    since: u64,
    timeout: Duration,
) -> Option<Duration> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let until = tokio::time::Instant::now() + timeout;
    let mut probes = tokio::task::JoinSet::new();
    loop {
        let tx = tx.clone();
        let url = url.to_string();
        probes.spawn(async move {
            let probe = if kind == BackendKind::MySql {
                galera::write_probe(&url, Duration::from_secs(2)).await
            } else {
                patroni::write_probe(&url, Duration::from_secs(2)).await
            };
            if let Ok(port) = probe {
                if port != old_port {
                    let _ = tx.send(clock::now_ns());
                }
            }
        });
        tokio::select! {
            Some(at) = rx.recv() => return Some(clock::between(since, at)),
            () = sleep(Duration::from_millis(100)) => {}
        }
        if tokio::time::Instant::now() >= until {
            return None;
        }
    }
}

/// The results as a Markdown table.
pub fn table(outcomes: &[HaOutcome]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| scenario | cluster | ops issued | fenced ok/refused | violations | control caught | I2 overlaps | database failover s | tenure failover s | result |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    let secs = |d: Option<Duration>| d.map_or("-".into(), |d| format!("{:.2}", d.as_secs_f64()));
    for o in outcomes {
        let v = &o.verdict;
        let caught = if o.scenario.negative_control {
            let mut by: std::collections::BTreeMap<&str, usize> = Default::default();
            for x in &v.violations {
                *by.entry(x.invariant).or_default() += 1;
            }
            let list: Vec<String> = by.iter().map(|(i, n)| format!("{i} ×{n}")).collect();
            if list.is_empty() {
                "**no** (must be caught)".to_string()
            } else {
                format!("yes: {}", list.join(", "))
            }
        } else {
            "-".to_string()
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {}/{} | {} | {} | {} | {} | {} | {} |",
            o.scenario.name,
            o.scenario.cluster_name(),
            o.issued,
            v.fenced_accepted,
            v.fenced_rejected,
            v.violations.len(),
            caught,
            v.overlaps,
            secs(o.db_failover),
            secs(o.tenure_failover),
            if o.passed() { "PASS" } else { "FAIL" }
        );
    }
    out
}

/// Notes and violations, one line each, after the table.
pub fn details(outcomes: &[HaOutcome]) -> String {
    let mut out = String::new();
    for o in outcomes {
        let head = format!(
            "{} on {} (seed {})",
            o.scenario.name,
            o.scenario.cluster_name(),
            o.seed
        );
        for note in &o.notes {
            let _ = writeln!(out, "{head}: {note}");
        }
        for x in o.verdict.violations.iter().take(10) {
            let kind = if o.scenario.negative_control {
                "caught"
            } else {
                "VIOLATION"
            };
            let _ = writeln!(out, "{head}: {kind} {}: {}", x.invariant, x.detail);
        }
        if let Some(x) = o.verdict.control.first() {
            let _ = writeln!(
                out,
                "{head}: the unfenced register accepted {} stale write(s), e.g. {}",
                o.verdict.control.len(),
                x.detail
            );
        }
        if let Some(dir) = &o.dir {
            let _ = writeln!(
                out,
                "{head}: histories and cluster logs kept in {}",
                dir.display()
            );
        }
    }
    out
}

/// The cluster a scenario runs on.
enum Database {
    Patroni(Patroni),
    Galera(Galera),
}

impl Database {
    /// Builds a cluster of `kind`; its logs are copied to `logs` when it is torn down.
    async fn start(kind: ClusterKind, logs: &std::path::Path) -> Result<Database, String> {
        let timeout = Duration::from_secs(60);
        Ok(match kind {
            ClusterKind::Galera => Database::Galera(Galera::start(3, timeout, logs).await?),
            ClusterKind::MariaDb => Database::Galera(Galera::start(1, timeout, logs).await?),
            kind => Database::Patroni(
                Patroni::start(kind == ClusterKind::PatroniSync, timeout, logs).await?,
            ),
        })
    }

    fn kind(&self) -> BackendKind {
        match self {
            Database::Patroni(_) => BackendKind::Postgres,
            Database::Galera(_) => BackendKind::MySql,
        }
    }

    fn admin_url(&self) -> String {
        match self {
            Database::Patroni(p) => p.url("postgres"),
            Database::Galera(g) => g.url("mysql"),
        }
    }

    /// The member clients write to now: Patroni's leader, or HAProxy's first live Galera node.
    async fn primary(&self) -> Option<usize> {
        match self {
            Database::Patroni(p) => p.primary().await,
            Database::Galera(g) => g.primary().await,
        }
    }

    /// The name and server port of member `i`.
    fn member(&self, i: usize) -> (String, u16) {
        match self {
            Database::Patroni(p) => (p.members[i].name.clone(), p.members[i].pg_port),
            Database::Galera(g) => (g.nodes[i].name.clone(), g.nodes[i].port),
        }
    }

    /// A URL of database `db` on member `i` itself, not through HAProxy.
    fn direct_url(&self, i: usize, db: &str) -> String {
        match self {
            Database::Patroni(p) => p.direct_url(i, db),
            Database::Galera(g) => g.direct_url(i, db),
        }
    }

    fn kill(&mut self, i: usize) {
        match self {
            Database::Patroni(p) => p.kill(i),
            Database::Galera(g) => g.kill(i),
        }
    }

    async fn roles(&self) -> Result<Vec<patroni::Role>, String> {
        match self {
            Database::Patroni(p) => p.roles().await,
            Database::Galera(_) => Err("no manager".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checker::Violation;

    fn outcome(negative_control: bool, invariants: &[&'static str]) -> HaOutcome {
        let verdict = Verdict {
            violations: invariants
                .iter()
                .map(|i| Violation {
                    invariant: i,
                    detail: String::new(),
                })
                .collect(),
            ..Verdict::default()
        };
        HaOutcome {
            scenario: HaScenario {
                name: "lossy-failover",
                fault: DbFault::LossyFailover,
                cluster: ClusterKind::PatroniAsync,
                negative_control,
            },
            seed: 0,
            verdict,
            issued: 0,
            db_failover: None,
            tenure_failover: None,
            notes: Vec::new(),
            ran: true,
            dir: None,
            took: Duration::ZERO,
        }
    }

    #[test]
    fn the_control_passes_only_if_a_term_violation_was_caught() {
        assert!(outcome(true, &["I1"]).passed());
        assert!(outcome(true, &["I1", "I2"]).passed());
        assert!(!outcome(true, &[]).passed());
        assert!(
            !outcome(true, &["I4"]).passed(),
            "not the danger it exists to show"
        );
        let mut did_not_run = outcome(true, &["I1"]);
        did_not_run.ran = false;
        assert!(!did_not_run.passed());
    }

    #[test]
    fn a_scenario_on_its_premise_passes_only_without_violations() {
        assert!(outcome(false, &[]).passed());
        assert!(!outcome(false, &["I2"]).passed());
        let mut failed = outcome(false, &[]);
        failed
            .notes
            .push("error: the database did not fail over".into());
        assert!(!failed.passed());
    }

    #[test]
    fn every_scenario_has_its_own_id() {
        let mut ids: Vec<String> = ALL.iter().map(HaScenario::id).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n);
        assert!(ids.contains(&"lossy-failover-async".to_string()));
        assert!(ids.contains(&"galera-kill-primary".to_string()));
    }
}
