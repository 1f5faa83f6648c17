//! One scenario from start to end: its private directory, the cluster (built once more if
//! the first build fails), the nodes, the fault ([`failover`](super::failover),
//! [`readonly`](super::readonly) or [`spread`](super::spread)), then the history through the
//! checker and the notes on where the database ended.

use super::database::Database;
use super::scenario::{ClusterKind, DbFault, HaOutcome, HaScenario, ALL};
use super::{failover, readonly, spread};
use crate::checker::{self, Verdict};
use crate::clock;
use crate::dbserver;
use crate::event::Kind;
use crate::runner::cluster::Cluster;
use crate::runner::Settings;
use crate::scenario::{Fault, Scenario, Workload};
use crate::target::Target;
use rand::SeedableRng;
use std::time::Duration;
use tenure::BackendKind;

/// The longest one scenario may take, cluster build (twice, if the first fails) and teardown
/// included.
pub const SCENARIO_LIMIT: Duration = Duration::from_secs(360);

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

/// Builds the scenario's cluster. The cluster is the stage, not what is tested: a build that
/// fails (a state transfer that did not finish, say) is tried once more, and said.
async fn build(
    scenario: &HaScenario,
    dir: &std::path::Path,
    outcome: &mut HaOutcome,
) -> Result<Database, String> {
    match Database::start(scenario.cluster, &dir.join("cluster-1")).await {
        Ok(db) => Ok(db),
        Err(e) => {
            outcome.notes.push(format!(
                "the first cluster build failed ({e}); its logs are in cluster-1; built again"
            ));
            Database::start(scenario.cluster, &dir.join("cluster")).await
        }
    }
}

async fn drive(
    scenario: &HaScenario,
    settings: &Settings,
    seed: u64,
    dir: &std::path::Path,
    outcome: &mut HaOutcome,
) -> Result<(), String> {
    if scenario.fault == DbFault::OnTenure {
        // Patroni on tenure: no tenure nodes, the cluster's DCS is tenure serve.
        let dcs = scenario.cluster.dcs();
        return super::on_tenure::drive(dcs, &dir.join("cluster"), outcome).await;
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut db = build(scenario, dir, outcome).await?;
    if scenario.fault == DbFault::EtcdLock {
        // etcdctl lock on tenure serve: no tenure nodes, holders of etcd's lock recipe.
        return super::etcd_lock::drive(settings, seed, &mut db, dir, outcome).await;
    }
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
        priorities: false,
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
            let mut c = Cluster::prepare(&target, settings, dir, &nodes, Vec::new()).await?;
            c.epochs = scenario.epochs();
            for slot in 0..settings.nodes {
                c.spawn(slot)?;
            }
            failover::fail_over(scenario, c, &mut db, &url, &mut rng, outcome).await?
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
    if scenario.fault == DbFault::LossyFailover {
        let gained = |after: bool| {
            history.iter().filter_map(move |e| match e.kind {
                Kind::Gained { term, .. } if (e.t > fault_at) == after => Some(term),
                _ => None,
            })
        };
        let show = |t: Option<u64>| t.map_or("-".to_string(), |t| t.to_string());
        outcome.notes.push(format!(
            "terms: the highest gained before the primary was killed {}, the first after it {}",
            show(gained(false).max()),
            show(gained(true).next())
        ));
    }
    let acquisitions = leases.get(&c.name).map_or(&[][..], Vec::as_slice);
    if scenario.fault != DbFault::Spread {
        outcome.verdict = checker::check(&history, acquisitions, &scenario.expect());
    }
    let haproxy_first = matches!(db, Database::Galera(_) | Database::Replication(_));
    if haproxy_first && scenario.fault != DbFault::Spread {
        let now = db
            .primary()
            .await
            .map_or("-".to_string(), |i| db.member(i).0);
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
