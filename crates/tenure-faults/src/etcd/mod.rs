//! etcd's API under faults: `etcdctl lock` holders against `tenure serve --etcd-listen` on the
//! scenario's database, each holder's command writing under the fence of its lock (see
//! `docs/safety.md`, "etcd workloads").
//!
//! One scenario: the register tables created ([`child::setup_sql`]), one `tenure serve` (two
//! for `etcd-serve-kill`; [`serve`]) on the database, `settings.nodes` clients each running
//! `etcdctl lock --ttl T NAME tenure-faults etcd-child …` in a loop ([`clients`]), the
//! statement `tenure fence-sql --etcd` prints given to every command ([`child`]), rounds of
//! the fault ([`nemesis`]) until the duration is used up, the clients stopped, and the
//! register's history through the checker ([`check`]): the fenced writes never go down in
//! revision; the unfenced control (`etcd-unfenced`) must be caught doing so.

pub mod check;
pub mod child;
pub mod clients;
pub(crate) mod db;
mod nemesis;
pub mod serve;

use crate::ha::dcs::tenure_binary;
use crate::ha::procs;
use crate::runner::{Outcome, Settings};
use crate::scenario::{Fault, Scenario, Workload};
use crate::target::Target;
use child::{ChildConfig, Conn};
use clients::{ClientConfig, Clients};
use serve::Serves;
use std::path::Path;
use std::time::Duration;
use tenure::BackendKind;

/// How long each holder's command works between its two writes.
pub(crate) const WORK: Duration = Duration::from_millis(800);

/// What an etcd scenario needs and this machine lacks.
pub fn missing() -> Vec<String> {
    let mut missing = Vec::new();
    if procs::which("etcdctl").is_none() {
        missing.push("etcdctl (Debian's etcd-client)".to_string());
    }
    if tenure_binary().is_none() {
        missing.push(
            "the tenure command beside tenure-faults (cargo build -p tenure-cli) or TENURE_BIN"
                .to_string(),
        );
    }
    missing
}

/// The statement `tenure fence-sql --etcd` prints for `url`'s database.
pub(crate) fn fence_sql(bin: &Path, url: &str) -> Result<String, String> {
    let out = std::process::Command::new(bin)
        .args(["--database-url", url, "fence-sql", "--etcd"])
        .output()
        .map_err(|e| format!("tenure fence-sql: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "tenure fence-sql --etcd: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::trim)
        .rfind(|l| !l.is_empty() && !l.starts_with("--"))
        .map(|l| l.trim_end_matches(';').to_string())
        .ok_or_else(|| "tenure fence-sql --etcd printed no statement".into())
}

/// Runs the etcd `scenario` on `target`; its results go into `outcome`.
pub async fn drive(
    scenario: &Scenario,
    target: &Target,
    settings: &Settings,
    seed: u64,
    dir: &Path,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let missing = missing();
    if !missing.is_empty() {
        return Err(format!("cannot run here; missing: {}", missing.join("; ")));
    }
    let bin = tenure_binary().ok_or("no tenure binary")?;
    let url = match target.kind {
        BackendKind::Sqlite => format!("sqlite://{}", dir.join("etcd.db").display()),
        _ => target.url.clone(),
    };
    let table = format!("tf_etcd_{seed:016x}");
    let (mut conn, kind) = Conn::admin(&url).await?;
    conn.create(kind, &table).await?;
    let fenced = scenario.workload == Workload::EtcdLock;
    let fence = if fenced {
        Some(fence_sql(&bin, &url)?)
    } else {
        None
    };
    let result = run(
        scenario, settings, dir, &bin, &url, &table, fence, &mut conn, outcome,
    )
    .await;
    let history = conn.history(&table).await;
    if kind != BackendKind::Sqlite {
        if let Err(e) = conn.drop_tables(&table).await {
            outcome
                .notes
                .push(format!("the tables of {table} were left: {e}"));
        }
    }
    result?;
    let (writes, refused) = history?;
    let lines: Vec<String> = writes
        .iter()
        .map(|w| format!("{}\t{}\t{}\t{}", w.seq, w.holder, w.rev, w.phase))
        .collect();
    let _ = std::fs::write(dir.join("history.tsv"), lines.join("\n"));
    let faults = outcome.verdict.faults;
    let failovers = std::mem::take(&mut outcome.verdict.failovers);
    outcome.verdict = check::check(&writes, refused, fenced);
    outcome.verdict.faults = faults;
    outcome.verdict.failovers = failovers;
    outcome.issued = writes.len() + refused;
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn run(
    scenario: &Scenario,
    settings: &Settings,
    dir: &Path,
    bin: &Path,
    url: &str,
    table: &str,
    fence_sql: Option<String>,
    conn: &mut Conn,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let n_serves = if scenario.fault == Fault::ServeKill {
        2
    } else {
        1
    };
    let mut serves = Serves::start(bin, url, n_serves, dir).await?;
    let config = ClientConfig {
        exe: settings.exe.clone(),
        name: format!("faults-{table}"),
        ttl_s: settings.ttl.as_secs().max(2),
        child: ChildConfig {
            url: url.to_string(),
            table: table.to_string(),
            holder: String::new(),
            client: 0,
            work: WORK,
            fence_sql,
            dir: dir.to_path_buf(),
        },
    };
    // Each client's first endpoint in turn: the clients spread over the serves.
    let clients = Clients::start(&config, settings.nodes, |i| serves.endpoints(i));
    let mut done = nemesis::Done::default();
    let started = tokio::time::Instant::now();
    let mut result = Ok(());
    let mut rounds = 0;
    while rounds < scenario.min_rounds() || started.elapsed() < settings.duration {
        let mut rig = nemesis::Rig {
            dir: dir.to_path_buf(),
            clients: &clients,
            serves: &mut serves,
            conn: &mut *conn,
            table: table.to_string(),
        };
        if let Err(e) = nemesis::round(&mut rig, scenario.fault, rounds, &mut done).await {
            result = Err(e);
            break;
        }
        rounds += 1;
    }
    let seen = clients.stop(Duration::from_secs(20)).await;
    drop(serves);
    if let Ok(seen) = seen.lock() {
        outcome.notes.push(format!(
            "etcdctl lock runs: {} completed, {} ended otherwise (killed, refused by the fence, \
             or a connection lost){}",
            seen.completed,
            seen.failed,
            seen.last_failure
                .as_ref()
                .map_or(String::new(), |f| format!("; last: {f}"))
        ));
    }
    if done.retried > 0 {
        outcome.notes.push(format!(
            "{} pauses found the holder outside its work and were undone and retried",
            done.retried
        ));
    }
    outcome.notes.append(&mut done.notes);
    outcome.verdict.faults = done.injected.len();
    outcome.verdict.failovers = done.failovers;
    outcome.injected = done.injected;
    result
}
