//! Patroni *on* tenure: a three-member Patroni cluster (asynchronous replication) whose DCS is
//! `tenure serve` — its Consul API or its etcd API, on a SQLite file of its own beside the
//! cluster, with its defaults, as a new user would start it — at Patroni's short `ttl: 10`. The tour: bootstrap,
//! an idle minute's cost, a switchover, the leader's Patroni and PostgreSQL SIGKILLed, and
//! `tenure serve` killed and restarted. Every member's REST API is polled every 200 ms
//! throughout: two members that say they are the running primary at once is a violation.

use super::cluster;
use super::dcs::DcsKind;
use super::patroni::{Patroni, Setup};
use super::procs::http;
use super::scenario::HaOutcome;
use crate::checker::Violation;
use serde_json::Value;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// Patroni's timing here (s): its ttl, its loop, its retry timeout (`loop_wait + 2 ×
/// retry_timeout ≤ ttl`, as Patroni asks).
const TTL: u64 = 10;
const LOOP_WAIT: u64 = 2;
const RETRY_TIMEOUT: u64 = 3;
/// How long the idle cluster's requests are counted.
const IDLE: Duration = Duration::from_secs(20);
/// The idle cost this scenario holds the server to: single digits of requests a second for
/// the whole cluster (the loop of 126 a second per replica before issue 36).
const IDLE_LIMIT: f64 = 10.0;
/// How long `tenure serve` stays down: past Patroni's ttl, so the leader must demote.
const DCS_DOWN: Duration = Duration::from_secs(TTL + 5);
/// How long each step may take (a loaded 2-core machine).
const STEP: Duration = Duration::from_secs(90);

/// The tour on `dcs`; its notes, times and violations go into `outcome`.
pub(super) async fn drive(dcs: DcsKind, dir: &Path, outcome: &mut HaOutcome) -> Result<(), String> {
    let setup = Setup {
        sync: false,
        dcs,
        ttl: TTL,
        loop_wait: LOOP_WAIT,
        retry_timeout: RETRY_TIMEOUT,
    };
    let started = Instant::now();
    let mut cluster = Patroni::start_with(setup, Duration::from_secs(120), dir).await?;
    outcome.notes.push(format!(
        "bootstrap on tenure serve ({dcs:?}): healthy after {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let (stop, primaries) = poll_primaries(&cluster);

    let before = cluster.dcs.requests().await?;
    tokio::time::sleep(IDLE).await;
    let after = cluster.dcs.requests().await?;
    let rate = (after - before) / IDLE.as_secs_f64();
    outcome.notes.push(format!(
        "idle: {rate:.1} requests/s to tenure serve from 3 members (loop_wait {LOOP_WAIT} s), \
         over {} s",
        IDLE.as_secs()
    ));
    if rate >= IDLE_LIMIT {
        outcome.notes.push(format!(
            "error: an idle cluster sent {rate:.1} requests/s (at most {IDLE_LIMIT})"
        ));
    }

    let leader = cluster.primary().await.ok_or("no leader after bootstrap")?;
    let candidate = (0..cluster.members.len())
        .find(|&i| i != leader)
        .ok_or("one member")?;
    let t = Instant::now();
    cluster.switchover(leader, candidate).await?;
    wait_primary(
        &cluster,
        |p| p == candidate,
        "the switchover's candidate to lead",
    )
    .await?;
    outcome.notes.push(format!(
        "switchover {} → {}: {:.1} s",
        cluster.members[leader].name,
        cluster.members[candidate].name,
        t.elapsed().as_secs_f64()
    ));

    let leader = candidate;
    let t = Instant::now();
    cluster.kill(leader);
    wait_primary(
        &cluster,
        |p| p != leader,
        "another member to lead after the kill",
    )
    .await?;
    outcome.db_failover = Some(t.elapsed());
    outcome.notes.push(format!(
        "the leader {} SIGKILLed (Patroni and PostgreSQL): a new leader writable after {:.1} s",
        cluster.members[leader].name,
        t.elapsed().as_secs_f64()
    ));

    cluster.dcs.kill();
    tokio::time::sleep(DCS_DOWN).await;
    let t = Instant::now();
    cluster.dcs.restart(Duration::from_secs(30)).await?;
    cluster.wait_healthy(STEP).await?;
    outcome.notes.push(format!(
        "tenure serve SIGKILLed for {} s and restarted: healthy again {:.1} s after the restart",
        DCS_DOWN.as_secs(),
        t.elapsed().as_secs_f64()
    ));

    let _ = stop.send(true);
    let seen = primaries
        .lock()
        .map_or_else(|e| e.into_inner().clone(), |v| v.clone());
    outcome.notes.push(format!(
        "REST API polled {} times: {} with two primaries",
        seen.polls,
        seen.doubles.len()
    ));
    for double in seen.doubles {
        outcome.verdict.violations.push(Violation {
            invariant: "two primaries",
            detail: double,
        });
    }
    Ok(())
}

/// What the poller saw.
#[derive(Clone, Debug, Default)]
struct Primaries {
    polls: u64,
    /// One line per poll that found two running primaries.
    doubles: Vec<String>,
}

/// Polls every member's `GET /patroni` every 200 ms until told to stop.
fn poll_primaries(cluster: &Patroni) -> (watch::Sender<bool>, Arc<Mutex<Primaries>>) {
    let ports: Vec<(String, u16)> = cluster
        .members
        .iter()
        .map(|m| (m.name.clone(), m.rest_port))
        .collect();
    let (stop, mut stopped) = watch::channel(false);
    let seen = Arc::new(Mutex::new(Primaries::default()));
    let sink = seen.clone();
    let started = Instant::now();
    tokio::spawn(async move {
        while !*stopped.borrow() {
            let mut primaries = Vec::new();
            for (name, port) in &ports {
                let answer = http(*port, "GET", "/patroni", None, Duration::from_millis(500));
                if let Ok((_, body)) = answer.await {
                    if is_running_primary(&body) {
                        primaries.push(name.clone());
                    }
                }
            }
            if let Ok(mut seen) = sink.lock() {
                seen.polls += 1;
                if primaries.len() > 1 {
                    seen.doubles.push(format!(
                        "{} at {:.1} s",
                        primaries.join(" and "),
                        started.elapsed().as_secs_f64()
                    ));
                }
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                _ = stopped.changed() => {}
            }
        }
    });
    (stop, seen)
}

/// Whether a member's `GET /patroni` says it runs as the primary.
fn is_running_primary(body: &str) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return false;
    };
    matches!(v["role"].as_str(), Some("master" | "primary")) && v["state"] == "running"
}

/// Waits until the leader Patroni names satisfies `which` and a write through HAProxy commits.
async fn wait_primary(
    cluster: &Patroni,
    which: impl Fn(usize) -> bool,
    what: &str,
) -> Result<(), String> {
    cluster::wait_until(what, STEP, Duration::from_millis(200), || async {
        match cluster.primary().await {
            Some(p) if which(p) => {
                let url = cluster.url("postgres");
                cluster::write_probe(tenure::BackendKind::Postgres, &url, Duration::from_secs(2))
                    .await
                    .map_err(|e| format!("{} leads, no write yet: {e}", cluster.members[p].name))?;
                Ok(())
            }
            other => Err(format!("leader {other:?}").into()),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::is_running_primary;

    #[test]
    fn reads_patronis_role() {
        assert!(is_running_primary(
            r#"{"state": "running", "role": "master"}"#
        ));
        assert!(is_running_primary(
            r#"{"state": "running", "role": "primary"}"#
        ));
        assert!(!is_running_primary(
            r#"{"state": "running", "role": "replica"}"#
        ));
        assert!(!is_running_primary(
            r#"{"state": "starting", "role": "master"}"#
        ));
        assert!(!is_running_primary("not json"));
    }
}
