//! The etcd workload's faults, one round at a time, each waiting on what it caused (a file, a
//! process state, a row) within a bound rather than sleeping.
//!
//! - **holder kill**: a holder found working is SIGKILLed — the whole holder (etcdctl and its
//!   command) in even rounds, etcdctl alone in odd ones (its command carries on, its lease is
//!   no longer kept alive). The round ends when another holder has written under a later
//!   revision; that wait is the round's failover time.
//! - **holder pause**: a holder found working is SIGSTOPped (etcdctl and its command) until
//!   another holder has written under a later revision — past the lock's ttl, since the lock
//!   passes only when the paused session's lease has ended — then SIGCONTed; the round ends
//!   when its run has exited. A holder caught outside its work (inside a transaction: it would
//!   hold the register's or SQLite's lock from everyone) is resumed at once and the round retried.
//! - **serve kill**: one of the two `tenure serve` (in turn) is SIGKILLed; the round waits for
//!   two locks taken after it (the clients carried on through the other endpoint), then starts
//!   it again.

use super::clients::{kill_group, Clients};
use super::db::Last;
use super::serve::Serves;
use crate::ha::cluster::{wait_until, Wait};
use crate::scenario::Fault;
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long any one wait of a round may take (a loaded 2-core machine).
const BOUND: Duration = Duration::from_secs(40);
const EVERY: Duration = Duration::from_millis(20);

/// What the rounds need.
pub(super) struct Rig<'a> {
    pub(super) dir: PathBuf,
    pub(super) clients: &'a Clients,
    pub(super) serves: &'a mut Serves,
    pub(super) conn: &'a mut super::child::Conn,
    pub(super) table: String,
}

/// What the rounds did.
#[derive(Debug, Default)]
pub(super) struct Done {
    pub(super) injected: Vec<String>,
    pub(super) failovers: Vec<Duration>,
    /// Pauses undone because the holder had left its work.
    pub(super) retried: usize,
    pub(super) notes: Vec<String>,
}

/// A holder found working: its client, process group, holder id and revision.
struct Working {
    client: usize,
    pgid: i32,
    holder: String,
    rev: i64,
}

fn working(dir: &Path, clients: &Clients) -> Option<Working> {
    let n = clients.seen.lock().ok()?.running.len();
    (0..n).find_map(|client| {
        let pgid = clients.running(client)?;
        let text = std::fs::read_to_string(dir.join(format!("working-{client}"))).ok()?;
        let (holder, rev) = text.split_once(' ')?;
        Some(Working {
            client,
            pgid,
            holder: holder.to_string(),
            rev: rev.trim().parse().ok()?,
        })
    })
}

async fn wait_working(rig: &Rig<'_>) -> Result<Working, String> {
    wait_until("a holder inside its work", BOUND, EVERY, || async {
        working(&rig.dir, rig.clients).ok_or_else(|| Wait::NotYet("none".into()))
    })
    .await
}

/// Waits until a holder other than `holder` has written under a revision above `rev`.
async fn wait_successor(rig: &mut Rig<'_>, holder: &str, rev: i64) -> Result<(), String> {
    let what = format!("a write after {holder}'s revision {rev} by another holder");
    let (conn, table) = (&mut *rig.conn, rig.table.clone());
    let conn = std::sync::Arc::new(tokio::sync::Mutex::new(conn));
    wait_until(&what, BOUND, Duration::from_millis(50), || {
        let (conn, table) = (conn.clone(), table.clone());
        async move {
            match conn.lock().await.last(&table).await? {
                Some((_, h, r)) if h != holder && r > rev => Ok(()),
                last => Err(format!("last write {last:?}").into()),
            }
        }
    })
    .await
}

/// The state letter of `pid` in `/proc` (`T`: stopped).
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.chars().next()
}

/// One round of `fault` (the `round`-th, from 0).
pub(super) async fn round(
    rig: &mut Rig<'_>,
    fault: Fault,
    round: usize,
    done: &mut Done,
) -> Result<(), String> {
    match fault {
        Fault::HolderKill => {
            let w = wait_working(rig).await?;
            let t = Instant::now();
            if round.is_multiple_of(2) {
                kill_group(w.pgid, Signal::SIGKILL);
                done.injected.push("kill holder".into());
            } else {
                let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(w.pgid), Signal::SIGKILL);
                done.injected.push("kill etcdctl".into());
            }
            wait_successor(rig, &w.holder, w.rev).await?;
            done.failovers.push(t.elapsed());
        }
        Fault::HolderPause => loop {
            let w = wait_working(rig).await?;
            let t = Instant::now();
            kill_group(w.pgid, Signal::SIGSTOP);
            let pids: Vec<i32> = std::iter::once(w.pgid)
                .chain(crate::ha::procs::children(w.pgid))
                .collect();
            let stopped = wait_until("the holder stopped", BOUND, EVERY, || async {
                let all = pids.iter().all(|&p| matches!(state(p), Some('T') | None));
                if all {
                    Ok(())
                } else {
                    Err(Wait::NotYet("running".into()))
                }
            })
            .await;
            let file = rig.dir.join(format!("working-{}", w.client));
            if stopped.is_err() || !file.exists() {
                kill_group(w.pgid, Signal::SIGCONT);
                done.retried += 1;
                continue;
            }
            let successor = wait_successor(rig, &w.holder, w.rev).await;
            kill_group(w.pgid, Signal::SIGCONT);
            successor?;
            done.injected.push("pause holder".into());
            done.failovers.push(t.elapsed());
            let clients = rig.clients;
            wait_until("the paused holder's run to end", BOUND, EVERY, || async {
                if clients.running(w.client) == Some(w.pgid) {
                    Err(Wait::NotYet("running".into()))
                } else {
                    Ok(())
                }
            })
            .await?;
            break;
        },
        Fault::ServeKill => {
            let victim = round % rig.serves.serves.len();
            let last: Last = rig.conn.last(&rig.table).await?;
            let rev = last.as_ref().map_or(0, |l| l.2);
            rig.serves.serves[victim].kill();
            done.injected.push(format!("kill serve {victim}"));
            let t = Instant::now();
            // Two locks taken after the kill: two revisions above the last one.
            let table = rig.table.clone();
            let conn = std::sync::Arc::new(tokio::sync::Mutex::new(&mut *rig.conn));
            let seen =
                std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
            wait_until(
                "two locks taken after the kill",
                BOUND,
                Duration::from_millis(50),
                || {
                    let (conn, table, seen) = (conn.clone(), table.clone(), seen.clone());
                    async move {
                        let last = conn.lock().await.last(&table).await?;
                        let mut seen = seen.lock().map_err(|e| e.to_string())?;
                        if let Some((_, _, r)) = last.filter(|l| l.2 > rev) {
                            seen.insert(r);
                        }
                        if seen.len() >= 2 {
                            Ok(())
                        } else {
                            Err(Wait::NotYet(format!("{seen:?}")))
                        }
                    }
                },
            )
            .await?;
            done.failovers.push(t.elapsed());
            rig.serves.serves[victim]
                .start(Duration::from_secs(60))
                .await?;
        }
        other => return Err(format!("not an etcd fault: {other:?}")),
    }
    Ok(())
}
