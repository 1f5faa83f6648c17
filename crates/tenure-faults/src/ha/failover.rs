//! The failover scenarios: a tenure leader through HAProxy, then a fault on the database (its
//! primary killed, a switchover, a partition, a failover that loses commits), then a new
//! leader. The database's failover is measured by [`wait_writable`], tenure's from the
//! history.

use super::database::{wait_writable, Database};
use super::replication::Replication;
use super::scenario::{DbFault, HaOutcome, HaScenario};
use super::{galera, patroni};
use crate::event::{self, Kind};
use crate::runner::cluster::Cluster;
use rand::Rng;
use std::time::Duration;
use tokio::time::sleep;

/// The failover scenarios: a tenure leader through HAProxy, then the fault on the database,
/// then a new leader. Returns the nodes, when the fault began and the member it hit.
/// How long the nodes may take to elect a leader (at their start, after a fault): generous,
/// for a loaded machine; a wait ends as soon as one leads.
const LEADER_WITHIN: Duration = Duration::from_secs(60);

pub(super) async fn fail_over(
    scenario: &HaScenario,
    mut c: Cluster,
    db: &mut Database,
    url: &str,
    rng: &mut rand::rngs::StdRng,
    outcome: &mut HaOutcome,
) -> Result<(Cluster, u64, String), String> {
    let ttl = c.settings.ttl;
    let leader = c
        .wait_leader(LEADER_WITHIN)
        .await
        .ok_or_else(|| format!("no tenure leader within {LEADER_WITHIN:?} of the nodes' start"))?;
    // A few renewals, then the fault at a random point of the renew cycle.
    sleep(
        ttl + Duration::from_millis(
            rng.gen_range(0..u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX) / 4),
        ),
    )
    .await;
    let primary = db.primary().await.ok_or("the cluster names no primary")?;
    let (target_name, old_port) = db.member(primary);
    let fault_at = match (&mut *db, scenario.fault) {
        (db, DbFault::KillPrimary) => {
            let t = c.nemesis.fault_start("primary_kill", &target_name);
            db.kill(primary);
            c.nemesis.fault_end("primary_kill", &target_name);
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
            let t = c.nemesis.fault_start("switchover", &target_name);
            db.switchover(primary, candidate).await?;
            c.nemesis.fault_end("switchover", &target_name);
            t
        }
        (Database::Galera(db), DbFault::Switchover) => {
            // Galera has no manager: the planned move of the writer is a clean shutdown of the
            // node HAProxy sends to; it leaves the cluster and HAProxy takes the next.
            let t = c.nemesis.fault_start("shutdown", &target_name);
            db.shutdown(primary).await?;
            c.nemesis.fault_end("shutdown", &target_name);
            t
        }
        (Database::Patroni(db), DbFault::Partition) => {
            let t = c.nemesis.fault_start("partition", &target_name);
            db.partition(primary, true);
            t
        }
        (Database::Galera(db), DbFault::Partition) => {
            let t = c.nemesis.fault_start("partition", &target_name);
            db.isolate(primary, true).await?;
            t
        }
        (Database::Patroni(db), DbFault::LossyFailover) => {
            c.nemesis.fault_start("replication_cut", &target_name);
            db.cut_replication(primary, true);
            // With synchronous replication the tenure never begins: watch for three ttls.
            let within = if db.sync { ttl * 3 } else { LEADER_WITHIN };
            let lost = lost_tenure(&mut c, leader, within, &target_name, outcome).await?;
            if !lost && !db.sync {
                return Err(NOTHING_LOST.into());
            }
            let t = c.nemesis.fault_start("primary_kill", &target_name);
            db.kill(primary);
            c.nemesis.fault_end("primary_kill", &target_name);
            t
        }
        (Database::Replication(db), DbFault::LossyFailover) => {
            // The replica has everything so far (the epoch row among it), then applies nothing
            // more: the primary's next commits reach its relay log only.
            db.caught_up(Duration::from_secs(30)).await?;
            c.nemesis.fault_start("replication_cut", &target_name);
            db.stop_applying().await?;
            if !lost_tenure(&mut c, leader, LEADER_WITHIN, &target_name, outcome).await? {
                return Err(NOTHING_LOST.into());
            }
            let t = c.nemesis.fault_start("primary_kill", &target_name);
            db.kill(primary);
            c.nemesis.fault_end("primary_kill", &target_name);
            // orchestrator promotes once it has seen the primary dead for a while; here after
            // Patroni's ttl, so that both asynchronous failovers take about as long.
            let replica = db.nodes[1 - primary].name.clone();
            wait_dead(db, primary, Duration::from_secs(patroni::TTL)).await;
            c.nemesis.fault_start("promote", &replica);
            db.promote().await?;
            c.nemesis.fault_end("promote", &replica);
            t
        }
        (Database::Galera(_), fault) => {
            return Err(format!("{fault:?} is not a Galera scenario"));
        }
        (Database::Replication(_), fault) => {
            return Err(format!("{fault:?} is not a scenario of the MariaDB pair"));
        }
        (
            _,
            fault @ (DbFault::Standby
            | DbFault::ReadOnly
            | DbFault::Spread
            | DbFault::OnTenure
            | DbFault::EtcdLock),
        ) => {
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
    if c.wait_leader(LEADER_WITHIN).await.is_none() {
        return Err(format!(
            "no tenure leader within {LEADER_WITHIN:?} of the database's failover"
        ));
    }
    // Let the new tenure work.
    sleep(ttl).await;
    if scenario.fault == DbFault::Partition {
        match &*db {
            // Held bytes (the old leader's last statements) now reach the old primary.
            Database::Patroni(db) => db.partition(primary, false),
            Database::Galera(db) => db.isolate(primary, false).await?,
            Database::Replication(_) => {}
        }
        c.nemesis.fault_end("partition", &target_name);
        sleep(ttl).await;
    }
    Ok((c, fault_at, target_name))
}

/// Why an asynchronous failover scenario that lost no tenure would prove nothing.
const NOTHING_LOST: &str =
    "no tenure began on the primary alone: the failover would have lost no term";

/// The tenure leader (node `leader`) is killed, so that a new tenure begins on the primary
/// alone, whose replicas no longer receive (or apply) its commits: with asynchronous
/// replication at once, as soon as a node's campaign takes the expired lease (waited for up to
/// `within`); with synchronous replication never. Then the killed node's slot is started again.
/// Returns whether that tenure began.
async fn lost_tenure(
    c: &mut Cluster,
    leader: usize,
    within: Duration,
    primary: &str,
    outcome: &mut HaOutcome,
) -> Result<bool, String> {
    let ttl = c.settings.ttl;
    let before = highest_term(c);
    let id = c.nodes[leader].id.clone();
    c.nemesis.fault_start("kill", &id);
    c.kill(leader).await;
    c.nemesis.fault_end("kill", &id);
    let newer = wait_for(within, || highest_term(c) > before).await;
    outcome.notes.push(if newer {
        format!(
            "a tenure (term {}) began on {primary} after its replicas stopped receiving its \
             commits",
            highest_term(c)
        )
    } else {
        format!("no tenure began on {primary} after its replicas stopped receiving its commits")
    });
    if newer {
        // Let it write under its term.
        sleep(ttl / 2).await;
    }
    let slot = c.nodes[leader].slot;
    c.spawn(slot)?;
    Ok(newer)
}

/// Waits until server `i` of the pair has failed every check for `dead_for` without a break
/// (checked every 250 ms), as orchestrator confirms a dead primary before it recovers.
async fn wait_dead(db: &Replication, i: usize, dead_for: Duration) {
    let url = db.direct_url(i, "mysql");
    let mut since = tokio::time::Instant::now();
    while since.elapsed() < dead_for {
        if galera::writable(&url).await {
            since = tokio::time::Instant::now();
        }
        sleep(Duration::from_millis(250)).await;
    }
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
