//! `etcd-lock-failover-async`: the etcd workload (`crate::etcd`: `etcdctl lock` holders against
//! one `tenure serve --etcd-listen`, each holder's command writing a register under the fence
//! `tenure fence-sql --etcd` prints) on a Patroni cluster with asynchronous replication, reached
//! through HAProxy, whose primary fails over losing commits:
//!
//! 1. the workload runs until the register has writes;
//! 2. the primary's WAL stream is cut, and its revision read on it directly (the replica has at
//!    most that one);
//! 3. the run waits until a holder has written under a lock taken after the cut: a lock and
//!    writes on the primary alone, which the failover will lose;
//! 4. the primary's clients are cut (HAProxy's connections to it hold every byte), its
//!    register and revision read on it directly until they stand still — the highest
//!    revision it handed out, and its whole register — and it is SIGKILLed (Patroni and
//!    PostgreSQL); Patroni promotes a replica (a new timeline, a new epoch of the database);
//! 5. the run waits for a write through HAProxy on another member (the database's failover
//!    time), then for a holder's write under a lock taken after the failover (tenure's), and
//!    writes a key with `etcdctl put -w json` for a revision after the failover;
//! 6. the clients stop; the register the promoted replica kept goes through the etcd
//!    workload's checker (`etcd::check`: its writes never go down in revision), and the three
//!    histories through [`etcd_revisions`](super::etcd_revisions): no revision handed out
//!    twice, none the failover lost held again, every acknowledged write in a register.
//!
//! What this history can prove and what it cannot: the register lives in the failing
//! database, so the writes the failover lost are lost from it — the old primary's register
//! read just before the kill and the holders' own log (`holders.tsv`, outside the database,
//! with CLOCK_MONOTONIC times and revisions) are what still show them. The register's check
//! covers the writes the database kept, which is all the database's readers will ever see. A
//! lost holder and a later holder do work at the same time (the lost one's lock key is gone
//! from the promoted replica, so the lock passes while it still runs): the lost holder's next
//! write fails (its connection was to the old primary) or is refused by the fence, but its writes acknowledged before the kill were in the old
//! primary only, and a resource outside the database that took them would have seen a lock
//! whose state went back — etcd's own lock would be as lost with a lost etcd quorum.
//! `docs/safety.md` says so.

use super::cluster::{wait_until, Wait};
use super::database::{wait_writable, Database};
use super::etcd_revisions::{self, Around};
use super::scenario::HaOutcome;
use crate::clock;
use crate::dbserver;
use crate::etcd::check::{self, Write};
use crate::etcd::child::{ChildConfig, Conn, HOLDERS_LOG};
use crate::etcd::clients::{ClientConfig, Clients};
use crate::etcd::db::Last;
use crate::etcd::serve::Serves;
use crate::proxy;
use crate::runner::Settings;
use std::path::Path;
use std::time::Duration;
use tenure::BackendKind;

/// How long any one wait may take (a loaded 2-core machine): each ends at its event.
const BOUND: Duration = Duration::from_secs(60);
const EVERY: Duration = Duration::from_millis(100);
/// How long the runs in progress may take to end at the end (a holder's work is 0.8 s); then
/// they are SIGKILLed. A waiter started before the failover was seen to wait on past it
/// until killed (its etcdctl watches for the deletion of a key below its own, which the
/// failover may have taken with it: a liveness matter of the recipe, left to the grace).
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The run on a Patroni cluster `db`; its notes, times and violations go into `outcome`.
pub(super) async fn drive(
    settings: &Settings,
    seed: u64,
    db: &mut Database,
    dir: &Path,
    outcome: &mut HaOutcome,
) -> Result<(), String> {
    let missing = crate::etcd::missing();
    if !missing.is_empty() {
        return Err(format!("cannot run here; missing: {}", missing.join("; ")));
    }
    let bin = super::dcs::tenure_binary().ok_or("no tenure binary")?;
    let admin = db.admin_url();
    dbserver::prepare(BackendKind::Postgres, &admin).await?;
    let url = dbserver::suite_url(&admin)?;
    let table = format!("tf_etcd_{seed:016x}");
    let (mut conn, kind) = Conn::admin(&url).await?;
    conn.create(kind, &table).await?;
    drop(conn);
    let fence = crate::etcd::fence_sql(&bin, &url)?;
    let serves = Serves::start(&bin, &url, 1, dir).await?;
    let config = ClientConfig {
        exe: settings.exe.clone(),
        name: format!("faults-{table}"),
        ttl_s: settings.ttl.as_secs().max(2),
        child: ChildConfig {
            url: url.clone(),
            table: table.clone(),
            holder: String::new(),
            client: 0,
            work: crate::etcd::WORK,
            fence_sql: Some(fence),
            dir: dir.to_path_buf(),
        },
    };
    let clients = Clients::start(&config, settings.nodes, |_| serves.endpoints(0));
    let endpoint = serves.endpoints(0);
    let run = Run {
        url: &url,
        table: &table,
        endpoint: &endpoint,
    };
    let failed_over = run.fail_over(db, outcome).await;
    let seen = clients.stop(STOP_GRACE).await;
    drop(serves);
    if let Ok(seen) = seen.lock() {
        outcome.notes.push(format!(
            "etcdctl lock runs: {} completed, {} ended otherwise (the fence refused a lost \
             holder, or a connection was lost in the failover){}",
            seen.completed,
            seen.failed,
            seen.last_failure
                .as_ref()
                .map_or(String::new(), |f| format!("; last: {f}"))
        ));
    }
    let (around, old) = failed_over?;
    let (kept, refused) = fresh(&url).await?.history(&table).await?;
    let log = etcd_revisions::parse(
        &std::fs::read_to_string(dir.join(HOLDERS_LOG))
            .map_err(|e| format!("{HOLDERS_LOG}: {e}"))?,
    );
    let _ = std::fs::write(dir.join("history-kept.tsv"), tsv(&kept));
    let _ = std::fs::write(dir.join("history-old-primary.tsv"), tsv(&old));
    outcome.issued = log.len();
    outcome.verdict = check::check(&kept, refused, true);
    let found = etcd_revisions::check(&log, &old, &kept, &around);
    outcome.verdict.violations.extend(found.violations);
    let lost: Vec<String> = found
        .lost
        .iter()
        .map(|w| format!("{} {} at {}", w.holder, w.phase, w.rev))
        .collect();
    outcome.notes.push(format!(
        "register: {} writes kept by the promoted replica (revisions never went down), {} \
         refused by the fence; {} writes lost with the old primary ({})",
        kept.len(),
        refused,
        lost.len(),
        lost.join(", ")
    ));
    let timeline = db
        .roles()
        .await
        .ok()
        .and_then(|roles| roles.into_iter().find(|r| r.role == "leader"))
        .and_then(|r| r.timeline);
    outcome.notes.push(format!(
        "revisions: {} at the cut, {} the highest the old primary handed out; after the \
         failover a put got {} and the locks taken {} (timeline {}: floor {})",
        around.at_cut,
        around.before_kill,
        around.probe,
        found
            .new_after
            .iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        timeline.map_or("-".into(), |t| t.to_string()),
        timeline.map_or("-".into(), |t| ((t - 1) << 40).to_string()),
    ));
    if found.new_after.is_empty() {
        outcome
            .notes
            .push("error: no lock was taken after the failover".into());
    }
    Ok(())
}

/// What the steps share.
struct Run<'a> {
    /// The suite's database through HAProxy.
    url: &'a str,
    table: &'a str,
    /// `tenure serve`'s etcd endpoint.
    endpoint: &'a str,
}

impl Run<'_> {
    /// Steps 1-5 (see the module's docs): the revisions around the failover and the old
    /// primary's register.
    async fn fail_over(
        &self,
        db: &mut Database,
        outcome: &mut HaOutcome,
    ) -> Result<(Around, Vec<Write>), String> {
        let Database::Patroni(pg) = db else {
            return Err("etcd-lock-failover runs on Patroni".into());
        };
        self.wait_last("the register's first writes", |l| {
            l.as_ref().is_some_and(|l| l.0 >= 2)
        })
        .await?;
        let primary = pg.primary().await.ok_or("the cluster names no primary")?;
        let (name, old_port) = (
            pg.members[primary].name.clone(),
            pg.members[primary].pg_port,
        );
        let direct = pg.direct_url(primary, &dbserver::database());

        pg.cut_replication(primary, true);
        let at_cut = fresh(&direct).await?.revision().await?;
        let (_, holder, rev) = self
            .wait_last("a write under a lock taken after the cut", |l| {
                l.as_ref().is_some_and(|l| l.2 > at_cut)
            })
            .await?
            .ok_or("no write")?;
        outcome.notes.push(format!(
            "{name}'s WAL stream cut at revision {at_cut}; {holder} took the lock at revision \
             {rev} and wrote on {name} alone"
        ));

        pg.members[primary]
            .client_proxy
            .set(proxy::Fault::Blackhole);
        let (before_kill, old) = self.stand_still(&direct).await?;
        let fault_at = clock::now_ns();
        pg.kill(primary);
        outcome.db_failover =
            wait_writable(BackendKind::Postgres, self.url, old_port, fault_at, BOUND).await;
        if outcome.db_failover.is_none() {
            return Err(format!("the database did not fail over within {BOUND:?}"));
        }
        let (_, holder, rev) = self
            .wait_last("a write under a lock taken after the failover", |l| {
                l.as_ref().is_some_and(|l| l.2 > before_kill)
            })
            .await?
            .ok_or("no write")?;
        outcome.tenure_failover = Some(clock::between(fault_at, clock::now_ns()));
        outcome.notes.push(format!(
            "{name} killed at revision {before_kill}; the first lock after the failover \
             written under: {holder} at revision {rev}"
        ));
        let probe = self.put_revision().await?;
        Ok((
            Around {
                at_cut,
                before_kill,
                probe,
            },
            old,
        ))
    }

    /// Waits until the register's last write (through HAProxy) satisfies `done`.
    async fn wait_last(&self, what: &str, done: impl Fn(&Last) -> bool) -> Result<Last, String> {
        let done = &done;
        wait_until(what, BOUND, EVERY, || async move {
            let last = fresh(self.url).await?.last(self.table).await?;
            if done(&last) {
                Ok(last)
            } else {
                Err(Wait::NotYet(format!("last write {last:?}")))
            }
        })
        .await
    }

    /// The old primary's revision and register, read on it directly (its clients cut) until
    /// two reads 250 ms apart agree: nothing more commits on it.
    async fn stand_still(&self, direct: &str) -> Result<(i64, Vec<Write>), String> {
        let mut conn = fresh(direct).await?;
        let until = tokio::time::Instant::now() + BOUND;
        let mut before = (conn.revision().await?, conn.history(self.table).await?.0);
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = (conn.revision().await?, conn.history(self.table).await?.0);
            if now == before {
                return Ok(now);
            }
            if tokio::time::Instant::now() > until {
                return Err(format!("the old primary still moved after {BOUND:?}"));
            }
            before = now;
        }
    }

    /// A key written with `etcdctl put -w json` through `tenure serve`: its revision.
    async fn put_revision(&self) -> Result<i64, String> {
        wait_until("a put after the failover", BOUND, EVERY, || async {
            let out = tokio::process::Command::new("etcdctl")
                .arg(format!("--endpoints={}", self.endpoint))
                .args(["--dial-timeout=2s", "--command-timeout=5s", "-w", "json"])
                .args(["put", "tenure-faults/after-failover", "1"])
                .env("ETCDCTL_API", "3")
                .output()
                .await
                .map_err(|e| Wait::Never(format!("etcdctl: {e}")))?;
            let text = String::from_utf8_lossy(&out.stdout);
            header_revision(&text).ok_or_else(|| {
                Wait::NotYet(format!(
                    "{text:.200} {:.200}",
                    String::from_utf8_lossy(&out.stderr)
                ))
            })
        })
        .await
    }
}

/// `header.revision` of etcdctl's JSON output.
fn header_revision(json: &str) -> Option<i64> {
    let v: serde_json::Value = serde_json::from_str(json.trim()).ok()?;
    v["header"]["revision"].as_i64()
}

/// A new connection (the runner's: the failover breaks the old ones).
async fn fresh(url: &str) -> Result<Conn, String> {
    Ok(Conn::admin(url).await?.0)
}

fn tsv(writes: &[Write]) -> String {
    writes
        .iter()
        .map(|w| format!("{}\t{}\t{}\t{}\n", w.seq, w.holder, w.rev, w.phase))
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_etcdctls_header_revision() {
        let json =
            r#"{"header":{"cluster_id":1,"member_id":2,"revision":1099511627790,"raft_term":3}}"#;
        assert_eq!(super::header_revision(json), Some(1_099_511_627_790));
        assert_eq!(
            super::header_revision("Error: context deadline exceeded"),
            None
        );
    }
}
