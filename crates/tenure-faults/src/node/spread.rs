//! The spreading workload: one [`Spread`] member per node process, joined to the group of the
//! scenario's shards ([`LockSet`] with `spread`), and one task per shard it is handed that runs
//! the two writes of the elector workload under the shard's term (the fenced register and the
//! unfenced control of that shard's slot) until the shard is lost: moved to a member that
//! joined, not renewed in time, or taken from a killed or paused member.
//!
//! Now and then a task lets its shard go early (drops the guard after a few rounds), so that a
//! member takes a shard back or another member takes it. Every shard guard is its own "node"
//! in the history (`n1.2/s3#7`: node, shard, the member's seventh guard), so the checker sees
//! two guards of one shard as two believers and a term handed to two guards as a term gained
//! twice, per shard (I1–I4, as for any lease).

use super::locks::{LockSet, Worker};
use super::NodeConfig;
use crate::event::EventLog;
use crate::resource::Db;
use rand::Rng;
use std::sync::Arc;
use tenure::{ShardGuard, Spread, Store};

/// Runs the workload until the process is told to stop (the caller selects on the signals);
/// then the member is dropped, which surrenders its shards.
pub async fn run(
    config: Arc<NodeConfig>,
    set: LockSet,
    db: Db,
    store: Store,
    log: Arc<EventLog>,
) -> Result<(), String> {
    let mut member = Spread::new(store, &set.base, set.locks)
        .map_err(|e| e.to_string())?
        .member(&config.candidate)
        .ttl(config.ttl)
        .join()
        .await
        .map_err(|e| e.to_string())?;
    let mut guards = 0u64;
    let mut tasks = tokio::task::JoinSet::new();
    while let Some(guard) = member.next().await {
        guards += 1;
        let label = format!("{}/s{}#{guards}", config.id, guard.shard());
        tasks.spawn(hold(guard, label, config.clone(), db.clone(), log.clone()));
        while tasks.try_join_next().is_some() {}
    }
    Err("the member ended".into())
}

/// One shard's tenure: its writes until the shard is lost, or (one time in four) for one to
/// three rounds, after which the guard is dropped and the shard released.
async fn hold(
    guard: ShardGuard,
    label: String,
    config: Arc<NodeConfig>,
    db: Db,
    log: Arc<EventLog>,
) {
    let rounds = {
        let mut rng = rand::thread_rng();
        rng.gen_bool(0.25).then(|| rng.gen_range(1..=3))
    };
    let worker = Worker {
        log: &log,
        config: &config,
        db: &db,
        holder: &config.candidate,
    };
    worker.tenure(&guard, &label, guard.shard(), rounds).await;
}
