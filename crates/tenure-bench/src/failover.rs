//! Crash failover and graceful handover with three candidates, each a process of its own:
//! `tenure run`, `etcdctl lock`, kazoo's Election (ZooKeeper) or the seeds' SQL. Every leader runs (or, for the seeds, is)
//! a child that stamps its start and stop with CLOCK_MONOTONIC.
//!
//! - crash: SIGKILL the leader's supervisor; measure from the instant of the kill to the next
//!   child's start stamp;
//! - handover: SIGTERM the leader's child, which stamps its stop and exits 0; measure from
//!   that stamp to the next child's start stamp.
//!
//! After each trial the dead candidate is replaced, so that three always campaign, and the new
//! leader is left to run for a random 0.5–1 s, so that the kill falls at a random point of its
//! renew cycle.
//!
//! Its rows of the tables ([`crash_rows`], [`handover_rows`]) set tenure's figures on one
//! backend beside the seeds' SQL and the peers'.

use crate::db::Target;
use crate::peer::Peer;
use crate::plan::Plan;
use crate::procs::{ancestor_in, signal_at, Proc, Stamp, Stamps};
use crate::report::{
    at_most, millis_summary, ms, ratio, secs_summary, times, Row, Summary, Verdict,
};
use crate::seeds;
use crate::stages;
use nix::sys::signal::Signal;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;
use tokio::time::Instant;

/// Who campaigns.
#[derive(Clone, Debug)]
pub(crate) enum Contender {
    /// `tenure --database-url URL --table-prefix P run NAME --ttl TTL -- CHILD`.
    Tenure {
        bin: PathBuf,
        url: String,
        prefix: String,
    },
    /// `etcdctl lock --ttl N NAME CHILD`.
    Etcd { etcdctl: PathBuf, endpoint: String },
    /// `zk_peer.py election … -- CHILD` (kazoo's Election recipe).
    ZooKeeper(crate::zookeeper::Kazoo),
    /// `tenure-bench seed-candidate`.
    Seeds { url: String, prefix: String },
}

/// What every scenario needs to start candidates.
pub(crate) struct Setup {
    pub contender: Contender,
    /// This benchmark's own executable (the child and the seeds' candidate).
    pub bench: PathBuf,
    pub ttl: Duration,
    pub dir: PathBuf,
    pub name: String,
}

impl Setup {
    fn child_argv(&self, stamps: &Path) -> Vec<String> {
        vec![
            self.bench.display().to_string(),
            "child".into(),
            "--stamps".into(),
            stamps.display().to_string(),
        ]
    }

    fn ttl_s(&self) -> u64 {
        // A ttl of seconds to minutes: positive and far below u64::MAX.
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        let secs = self.ttl.as_secs_f64().ceil() as u64;
        secs
    }

    fn command(&self, k: usize, stamps: &Path) -> Command {
        match &self.contender {
            Contender::Tenure { bin, url, prefix } => {
                let mut c = Command::new(bin);
                c.arg("--database-url")
                    .arg(url)
                    .arg("--table-prefix")
                    .arg(prefix)
                    .arg("run")
                    .arg(&self.name)
                    .arg("--ttl")
                    .arg(format!("{}ms", self.ttl.as_millis()))
                    .arg("--candidate")
                    .arg(format!("bench-{k}"))
                    .arg("--")
                    .args(self.child_argv(stamps));
                c
            }
            Contender::Etcd { etcdctl, endpoint } => crate::etcd::lock_command(
                etcdctl,
                endpoint,
                self.ttl_s(),
                &self.name,
                &self.child_argv(stamps),
            ),
            Contender::ZooKeeper(kazoo) => {
                kazoo.election_command(&self.name, &format!("bench-{k}"), &self.child_argv(stamps))
            }
            Contender::Seeds { url, prefix } => {
                let mut c = Command::new(&self.bench);
                c.arg("seed-candidate")
                    .arg("--url")
                    .arg(url)
                    .arg("--prefix")
                    .arg(prefix)
                    .arg("--id")
                    .arg(format!("seed-{k}"))
                    .arg("--timeout-s")
                    .arg(self.ttl_s().to_string())
                    .arg("--stamps")
                    .arg(stamps);
                c
            }
        }
    }
}

/// Which scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scenario {
    Crash,
    Handover,
}

/// Three candidates, replaced as they die.
struct Field<'a> {
    setup: &'a Setup,
    stamps: Stamps,
    procs: Vec<Proc>,
    spawned: usize,
    log: PathBuf,
    /// Start stamps at or before this instant belong to candidates killed by a restart.
    epoch: i64,
    /// Where `tenure run` writes its stage stamps (handover only; see [`stages`]).
    stages: Option<PathBuf>,
}

impl Field<'_> {
    fn spawn_one(&mut self) -> Result<(), String> {
        let k = self.spawned;
        self.spawned += 1;
        let mut cmd = self.setup.command(k, self.stamps.path());
        if let Some(stages) = &self.stages {
            cmd.env("TENURE_STAGE_STAMPS", stages);
        }
        let proc =
            Proc::spawn(cmd, &self.log).map_err(|e| format!("cannot start candidate {k}: {e}"))?;
        self.procs.push(proc);
        Ok(())
    }

    fn fill(&mut self) -> Result<(), String> {
        while self.procs.len() < 3 {
            self.spawn_one()?;
        }
        Ok(())
    }

    /// Removes (and reaps) the candidate whose pid is `pid`.
    async fn forget(&mut self, pid: i32) {
        if let Some(i) = self.procs.iter().position(|p| p.pid == pid) {
            let p = self.procs.swap_remove(i);
            p.finish(Duration::from_secs(5)).await;
        }
    }

    /// Kills every candidate and starts three new ones (after a failed trial).
    async fn restart(&mut self) -> Result<(), String> {
        for p in self.procs.drain(..) {
            p.finish(Duration::ZERO).await;
        }
        self.epoch = crate::procs::mono_ns();
        self.fill()
    }

    /// The current leader's start stamp, waiting up to `until` for one.
    async fn leader(&mut self, until: Instant) -> Option<Stamp> {
        loop {
            if let Some(s) = self.stamps.current_leader() {
                if s.mono_ns > self.epoch {
                    return Some(s);
                }
            }
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// Runs `trials` trials of `scenario`; each sample is seconds from the kill (crash) or the
/// child's stop (handover) to the next child's start. A trial that does not complete within
/// 3 × ttl + 5 s counts as failed.
pub(crate) async fn measure(
    setup: &Setup,
    scenario: Scenario,
    trials: usize,
    label: &str,
) -> Result<Summary, String> {
    Ok(measure_stages(setup, scenario, trials, label).await?.0)
}

/// [`measure`], and for `tenure run`'s handovers where each trial's milliseconds went.
async fn measure_stages(
    setup: &Setup,
    scenario: Scenario,
    trials: usize,
    label: &str,
) -> Result<(Summary, Vec<stages::Breakdown>), String> {
    // The name is unique per backend and scenario: so are the stamp file and the log.
    let tag = format!("{}-{:?}", setup.name, scenario).to_lowercase();
    let mut field = Field {
        setup,
        stamps: Stamps::new(setup.dir.join(format!("{tag}.stamps"))),
        procs: Vec::new(),
        spawned: 0,
        log: setup.dir.join(format!("{tag}.log")),
        epoch: 0,
        stages: (scenario == Scenario::Handover
            && matches!(setup.contender, Contender::Tenure { .. }))
        .then(|| setup.dir.join(format!("{tag}.stages"))),
    };
    let mut breakdowns = Vec::new();
    let bound = setup.ttl * 3 + Duration::from_secs(5);
    field.fill()?;
    let mut samples = Vec::new();
    let mut failed = 0;
    let mut rng = rand::rngs::StdRng::from_entropy();
    for trial in 1..=trials {
        let Some(leader) = field.leader(Instant::now() + bound).await else {
            eprintln!(
                "  {label} trial {trial}: no leader within {bound:?}; restarting the candidates"
            );
            failed += 1;
            field.restart().await?;
            continue;
        };
        // Let the leader run for a while: a random point of its renew cycle, and the
        // replacement candidate has started campaigning.
        tokio::time::sleep(Duration::from_millis(rng.gen_range(500..1000))).await;
        // The candidate process above the child: `tenure run` (above its keeper and init),
        // etcdctl, kazoo's candidate, the seeds' candidate. Never a pid we did not start.
        let ours: Vec<i32> = field.procs.iter().map(|p| p.pid).collect();
        let Some(supervisor) = ancestor_in(leader.supervisor, &ours) else {
            eprintln!(
                "  {label} trial {trial}: the leader's child (pid {}) is not below a candidate",
                leader.pid
            );
            failed += 1;
            field.restart().await?;
            continue;
        };
        let (from, supervisor) = match scenario {
            Scenario::Crash => (signal_at(supervisor, Signal::SIGKILL), supervisor),
            Scenario::Handover => {
                signal_at(leader.pid, Signal::SIGTERM);
                let stop = field
                    .stamps
                    .wait_for(Instant::now() + bound, |s| {
                        !s.is_start() && s.pid == leader.pid
                    })
                    .await;
                match stop {
                    Some(s) => (s.mono_ns, supervisor),
                    None => {
                        eprintln!("  {label} trial {trial}: the child did not stop");
                        failed += 1;
                        field.restart().await?;
                        continue;
                    }
                }
            }
        };
        let next = field
            .stamps
            .wait_for(Instant::now() + bound, |s| s.is_start() && s.mono_ns > from)
            .await;
        match next {
            Some(s) => {
                let secs = (s.mono_ns - from) as f64 / 1e9;
                eprintln!(
                    "  {label} trial {trial}/{trials}: {:.1} ms (token {} -> {})",
                    secs * 1e3,
                    leader.token,
                    s.token
                );
                samples.push(secs);
                let ours: Vec<i32> = field.procs.iter().map(|p| p.pid).collect();
                if let (Some(path), Some(new)) = (&field.stages, ancestor_in(s.supervisor, &ours)) {
                    let stamps = stages::read(path, new).await;
                    let b = stages::breakdown(&stamps, supervisor, new, from, s.mono_ns);
                    breakdowns.push(b);
                }
            }
            None => {
                eprintln!(
                    "  {label} trial {trial}/{trials}: no new leader within {bound:?} (failed)"
                );
                failed += 1;
                field.restart().await?;
                continue;
            }
        }
        field.forget(supervisor).await;
        field.fill()?;
    }
    for p in field.procs.drain(..) {
        p.finish(Duration::ZERO).await;
    }
    if !breakdowns.is_empty() {
        eprintln!(
            "  {label} stages (median ms): {}",
            stages::describe(&breakdowns)
        );
    }
    Ok((Summary::of(&samples, failed), breakdowns))
}
// === the rows of the tables ===

/// Three `tenure run` candidates of `target` on `name`.
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

/// The crash failover rows of one backend: tenure and the seeds' SQL beside the peers.
pub(crate) async fn crash_rows(
    plan: &Plan,
    target: &Target,
    peers: &[Peer],
    ttl: f64,
) -> Result<Vec<Row>, String> {
    let key = target.engine.key();
    let ours = measure(
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
    let theirs = measure(
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

/// The graceful handover rows of one backend, beside the peers.
pub(crate) async fn handover_rows(
    plan: &Plan,
    target: &Target,
    peers: &[Peer],
) -> Result<Vec<Row>, String> {
    let (ours, breakdowns) = measure_stages(
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
    if !breakdowns.is_empty() {
        rows.push(Row::new(
            "graceful handover by stage, median ms",
            stages::describe(&breakdowns),
        ));
    }
    Ok(rows)
}
