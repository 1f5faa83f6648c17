//! Never lead from a read-only server. The nodes point straight at one server (not HAProxy)
//! that refuses writes, then it becomes writable, then read-only again under its leader:
//!
//! - `standby` (Patroni): the server is a replica, the synchronous standby, on its own port. A
//!   switchover promotes it; a second switchover demotes it again.
//! - `read-only` (one MariaDB): `SET GLOBAL read_only = 1` before the nodes start, `= 0`, then
//!   `= 1` under the leader. In MariaDB 10.11 root has READ ONLY ADMIN and could still write:
//!   tenure itself must refuse.
//!
//! Asserted (each failure is an `error:` note): while the server is read-only no node gains a
//! tenure or is answered `acquired`, every node records failed campaigns and the last one says
//! [`REASON`]; once the server is writable a node leads within ttl + max jitter + 1 s of the
//! moment it was (a Patroni member: `pg_is_in_recovery()` is false on its own port); once it is
//! read-only again the leader steps down by its deadline and nobody leads for two ttls. Each
//! read-only window lasts 2.5 ttls, and on until every node's last failed campaign says why
//! (a node slow to start on a busy machine; at most [`SAY_WITHIN`] more). The checker runs on
//! the whole history as in every scenario (I1: terms only rise).

use super::cluster;
use super::database::Database;
use super::patroni::{self, Patroni};
use super::scenario::HaOutcome;
use crate::clock;
use crate::dbserver;
use crate::event::{self, Event, Kind};
use crate::runner::cluster::Cluster;
use std::time::Duration;
use tenure::Timing;
use tokio::time::sleep;

/// What the last failed campaign of each node must say while its server refuses writes.
pub const REASON: &str = "read-only";

/// Slack on "stepped down by its deadline": the node records its step-down after the guard's
/// signal has woken it.
const STEP_DOWN_SLACK: Duration = Duration::from_millis(500);

/// Runs the three steps on `c` (prepared, no node started). Returns the nodes, when the server
/// was asked to become writable and its name.
pub async fn drive(
    mut c: Cluster,
    db: &mut Database,
    outcome: &mut HaOutcome,
) -> Result<(Cluster, u64, String), String> {
    let ttl = c.settings.ttl;
    let timing = Timing::from_ttl(ttl).map_err(|e| e.to_string())?;
    let bound = ttl + timing.max_jitter() + Duration::from_secs(1);
    let member = match &*db {
        Database::Patroni(p) => p.sync_standby().await.ok_or("no synchronous standby")?,
        Database::Galera(_) => 0,
        Database::Replication(_) => return Err("not a read-only scenario's cluster".into()),
    };
    let (server, _) = db.member(member);
    let direct = db.direct_url(member, dbserver::DATABASE);
    let probe = db.direct_url(member, "postgres");

    // 1. Read-only from the start: nobody leads, and the nodes say why.
    c.nemesis.fault_start("read_only", &server);
    if let Database::Galera(g) = &*db {
        g.sql(member, "SET GLOBAL read_only = 1").await?;
    }
    c.url = direct;
    let from = clock::now_ns();
    for slot in 0..c.settings.nodes {
        c.spawn(slot)?;
    }
    sleep(ttl * 2 + ttl / 2).await;
    said_read_only(&c, from).await;

    // 2. Writable: a node leads within the bound.
    let asked = c.nemesis.fault_start("writable", &server);
    let writable_at = match &*db {
        Database::Patroni(p) => promote(p, member, &probe).await?,
        Database::Galera(g) => {
            g.sql(member, "SET GLOBAL read_only = 0").await?;
            clock::now_ns()
        }
        Database::Replication(_) => unreachable!("refused above"),
    };
    c.nemesis.fault_end("read_only", &server);
    outcome.db_failover = Some(clock::between(asked, writable_at));
    let history = merged(&c);
    let notes = never_led(
        &history,
        from,
        asked,
        &format!("while {server} was read-only"),
    );
    outcome.notes.extend(notes);
    let gained = wait_gained(&c, asked, bound + Duration::from_secs(2)).await;
    let Some((leader, term, at)) = gained else {
        outcome.notes.push(format!(
            "error: no node led within {bound:?} of {server} becoming writable"
        ));
        return Ok((c, asked, server));
    };
    let after = at.saturating_sub(writable_at);
    outcome.notes.push(format!(
        "{leader} led (term {term}) {:.2} s after {server} became writable (bound {:.2} s)",
        after as f64 / 1e9,
        bound.as_secs_f64()
    ));
    if Duration::from_nanos(after) > bound {
        outcome.notes.push(format!(
            "error: {leader} led later than {bound:?} after it was writable"
        ));
    }
    sleep(ttl).await;

    // 3. Read-only under the leader: it steps down by its deadline, nobody leads again.
    let demoted = c.nemesis.fault_start("read_only", &server);
    let read_only_at = match &*db {
        Database::Patroni(p) => demote(p, member, &probe).await?,
        Database::Galera(g) => {
            g.sql(member, "SET GLOBAL read_only = 1").await?;
            clock::now_ns()
        }
        Database::Replication(_) => unreachable!("refused above"),
    };
    sleep(ttl * 2 + ttl / 2).await;
    said_read_only(&c, read_only_at).await;
    c.nemesis.fault_end("read_only", &server);
    let history = merged(&c);
    outcome.notes.push(stepped_down(&history, &leader, demoted));
    let notes = never_led(
        &history,
        demoted,
        clock::now_ns(),
        &format!(
            "after {server} turned read-only ({:.2} s after it was asked)",
            clock::between(demoted, read_only_at).as_secs_f64()
        ),
    );
    outcome.notes.extend(notes);
    Ok((c, asked, server))
}

/// Switches Patroni over to `member` and returns when its PostgreSQL first said it is no
/// longer a standby (`pg_is_in_recovery()` false on its own port, `probe`).
async fn promote(p: &Patroni, member: usize, probe: &str) -> Result<u64, String> {
    let primary = p.primary().await.ok_or("the cluster names no primary")?;
    let (switched, promoted) = tokio::join!(
        p.switchover(primary, member),
        recovery_is(probe, false, Duration::from_secs(30))
    );
    switched?;
    promoted.ok_or_else(|| format!("{} was not promoted within 30 s", p.members[member].name))
}

/// Switches Patroni over from `member` (to the synchronous standby it has by then) and returns
/// when `member` first answered as a standby again.
async fn demote(p: &Patroni, member: usize, probe: &str) -> Result<u64, String> {
    let until = tokio::time::Instant::now() + Duration::from_secs(20);
    let candidate = loop {
        match p.sync_standby().await {
            Some(s) if s != member => break s,
            _ if tokio::time::Instant::now() >= until => {
                return Err("no synchronous standby to switch over to within 20 s".into())
            }
            _ => sleep(Duration::from_millis(100)).await,
        }
    };
    let (switched, demoted) = tokio::join!(
        p.switchover(member, candidate),
        recovery_is(probe, true, Duration::from_secs(60))
    );
    switched?;
    demoted.ok_or_else(|| format!("{} was not a standby within 60 s", p.members[member].name))
}

/// The first instant (monotonic ns) at which the server at `url` answered `pg_is_in_recovery()`
/// with `standby`, polled every 25 ms for at most `timeout`.
async fn recovery_is(url: &str, standby: bool, timeout: Duration) -> Option<u64> {
    let until = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < until {
        if patroni::in_recovery(url, Duration::from_millis(500)).await == Ok(standby) {
            return Some(clock::now_ns());
        }
        sleep(Duration::from_millis(25)).await;
    }
    None
}

/// How long a window of a read-only server is held open, past its 2.5 ttls, for every node
/// to say why it does not lead (a node process slow to start on a busy machine, say).
const SAY_WITHIN: Duration = Duration::from_secs(60);

/// Waits (at most [`SAY_WITHIN`]) until every node's last failed campaign after `since` says
/// [`REASON`]. A node that never does is an error of [`never_led`], which names it.
async fn said_read_only(c: &Cluster, since: u64) {
    let _ = cluster::wait_until(
        "every node's last failed campaign to say read-only",
        SAY_WITHIN,
        Duration::from_millis(100),
        || async {
            let history = merged(c);
            let silent: Vec<&str> = c
                .nodes
                .iter()
                .map(|n| n.id.as_str())
                .filter(|id| {
                    let last = history.iter().rev().find_map(|e| match &e.kind {
                        Kind::CampaignFailed { error } if e.t > since && e.node == *id => {
                            Some(error)
                        }
                        _ => None,
                    });
                    !last.is_some_and(|error| error.contains(REASON))
                })
                .collect();
            if silent.is_empty() {
                Ok(())
            } else {
                Err(format!("not yet from {}", silent.join(", ")).into())
            }
        },
    )
    .await;
}

fn merged(c: &Cluster) -> Vec<Event> {
    event::merge(
        c.nodes
            .iter()
            .map(|n| event::read(&n.events).unwrap_or_default()),
    )
}

/// Waits up to `timeout` for the first tenure gained after `since`: (node, term, when).
async fn wait_gained(c: &Cluster, since: u64, timeout: Duration) -> Option<(String, u64, u64)> {
    let until = tokio::time::Instant::now() + timeout;
    loop {
        let first = merged(c).into_iter().find_map(|e| match e.kind {
            Kind::Gained { term, .. } if e.t > since => Some((e.node, term, e.t)),
            _ => None,
        });
        if first.is_some() || tokio::time::Instant::now() >= until {
            return first;
        }
        sleep(Duration::from_millis(25)).await;
    }
}

/// The notes on the window `from..until` in which the server refused writes: an `error:` for
/// each tenure gained or `acquired` answer, for each node without a failed campaign, and for
/// each node whose last failure does not say [`REASON`]; else one line with an example.
fn never_led(history: &[Event], from: u64, until: u64, when: &str) -> Vec<String> {
    let window: Vec<&Event> = history
        .iter()
        .filter(|e| e.t > from && e.t <= until)
        .collect();
    let mut notes = Vec::new();
    for e in &window {
        match &e.kind {
            Kind::Gained { term, .. } => {
                notes.push(format!("error: {} gained term {term} {when}", e.node));
            }
            Kind::CampaignAnswered { effect, term } if effect == "acquired" => {
                notes.push(format!(
                    "error: {} was answered acquired (term {term}) {when}",
                    e.node
                ));
            }
            _ => {}
        }
    }
    let mut nodes: Vec<&str> = window.iter().map(|e| e.node.as_str()).collect();
    nodes.sort_unstable();
    nodes.dedup();
    let (mut failed, mut said) = (0, 0);
    let mut example = None;
    for node in nodes {
        let errors: Vec<&str> = window
            .iter()
            .filter(|e| e.node == node)
            .filter_map(|e| match &e.kind {
                Kind::CampaignFailed { error } => Some(error.as_str()),
                _ => None,
            })
            .collect();
        failed += errors.len();
        said += errors.iter().filter(|e| e.contains(REASON)).count();
        match errors.last() {
            None => notes.push(format!("error: {node} recorded no failed campaign {when}")),
            Some(last) if !last.contains(REASON) => notes.push(format!(
                "error: {node}'s last failed campaign {when} does not say {REASON:?}: {last}"
            )),
            Some(last) => example = example.or(Some(*last)),
        }
    }
    if notes.is_empty() {
        notes.push(format!(
            "nobody led {when}: {said} of {failed} failed campaigns said {REASON:?}, e.g. \"{}\"",
            example.unwrap_or("-")
        ));
    }
    notes
}

/// The note on `leader`'s step-down after `since`: an `error:` unless it stepped down by its
/// last deadline (plus [`STEP_DOWN_SLACK`]).
fn stepped_down(history: &[Event], leader: &str, since: u64) -> String {
    let mine = history.iter().filter(|e| e.node == leader);
    let mut deadline = None;
    for e in mine {
        match e.kind {
            Kind::Gained { deadline: d, .. } | Kind::Renewed { deadline: d, .. } => {
                deadline = Some(d);
            }
            Kind::SteppedDown { term } if e.t > since => {
                let Some(d) = deadline else {
                    return format!("error: {leader} stepped down from term {term} it never held");
                };
                let late = e.t.saturating_sub(d);
                let early = d.saturating_sub(e.t);
                let said = format!(
                    "{leader} stepped down from term {term} {:.2} s after the server was asked \
                     to turn read-only, {} ms {} its deadline",
                    clock::between(since, e.t).as_secs_f64(),
                    late.max(early) / 1_000_000,
                    if late > 0 { "after" } else { "before" }
                );
                return if Duration::from_nanos(late) > STEP_DOWN_SLACK {
                    format!("error: {said}")
                } else {
                    said
                };
            }
            _ => {}
        }
    }
    format!("error: {leader} never stepped down after its server turned read-only")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t: u64, node: &str, kind: Kind) -> Event {
        Event {
            t,
            wall_ms: 0,
            node: node.into(),
            lock: None,
            kind,
        }
    }

    fn failed(t: u64, node: &str, error: &str) -> Event {
        at(
            t,
            node,
            Kind::CampaignFailed {
                error: error.into(),
            },
        )
    }

    #[test]
    fn a_window_passes_only_if_nobody_led_and_each_node_last_said_read_only() {
        let ok = vec![
            failed(10, "n1.1", "connection refused"),
            failed(20, "n1.1", "the database is read-only: x"),
            failed(30, "n2.1", "the database is read-only: y"),
        ];
        let notes = never_led(&ok, 0, 100, "here");
        assert_eq!(notes.len(), 1);
        assert!(notes[0].starts_with("nobody led here: 2 of 3"), "{notes:?}");

        let mut gained = ok.clone();
        gained.push(at(
            40,
            "n2.1",
            Kind::Gained {
                term: 1,
                deadline: 90,
                holder: None,
            },
        ));
        assert!(never_led(&gained, 0, 100, "here")[0].starts_with("error: n2.1 gained term 1"));

        let silent = vec![
            failed(10, "n1.1", "read-only"),
            at(20, "n2.1", Kind::CampaignSent),
        ];
        assert!(never_led(&silent, 0, 100, "here")
            .iter()
            .any(|n| n.starts_with("error: n2.1 recorded no failed campaign")));

        let wrong = vec![
            failed(10, "n1.1", "read-only"),
            failed(20, "n1.1", "timed out"),
        ];
        assert!(never_led(&wrong, 0, 100, "here")[0].contains("does not say"));
        // Outside the window nothing counts.
        assert!(never_led(&wrong, 15, 100, "here")[0].starts_with("error:"));
        assert!(!never_led(&wrong, 0, 15, "here")[0].starts_with("error:"));
    }

    #[test]
    fn a_step_down_after_the_deadline_is_an_error() {
        let gained = |d| {
            at(
                10,
                "n1.1",
                Kind::Gained {
                    term: 3,
                    deadline: d,
                    holder: None,
                },
            )
        };
        let down = at(2_000_000_000, "n1.1", Kind::SteppedDown { term: 3 });
        let on_time = vec![gained(2_000_000_000), down.clone()];
        assert!(!stepped_down(&on_time, "n1.1", 5).starts_with("error"));
        let late = vec![gained(1_000_000_000), down];
        assert!(stepped_down(&late, "n1.1", 5).starts_with("error"));
        assert!(stepped_down(&late[..1], "n1.1", 5).starts_with("error"));
    }
}
