//! `tenure spread GROUP --shards N -- CMD`: join the group's members and run one supervised
//! CMD per shard this member owns, as `tenure run` supervises (`lead.rs`): the shard's whole
//! process tree is dead before its lease can move. SIGINT/SIGTERM drain: every shard is asked
//! back, its CMD stopped, its lease released, the registration dropped; then exit 0.

use super::{check_global, check_lease, fence_env};
use crate::cli::{Global, SpreadArgs};
use crate::database;
use crate::exit::Outcome;
use crate::lead::{grace_for, run_while_held, Ended, Job, Signals};
use crate::supervise::Isolation;
use std::time::Duration;
use tenure::{ShardGuard, Spread};
use tokio::task::JoinSet;

pub(super) async fn spread(global: &Global, args: SpreadArgs) -> Outcome {
    check_global(global)?;
    tenure::spread::check(&args.group, args.shards)?;
    let timing = check_lease(&args.lease)?;
    let grace = grace_for(&timing, &args.supervise)?;
    let mut signals = Signals::new()?;
    crate::watching::listen(&args.watching).await?;
    let store = database::open(global, !global.no_create, Some(timing.db_timeout())).await?;
    let fence = fence_env(&store);
    let mut spread = Spread::new(store, &args.group, args.shards)?
        .ttl(args.lease.ttl)
        .weight(args.weight);
    if let Some(k) = args.max_per_member {
        spread = spread.max_per_member(k);
    }
    if let Some(id) = &args.lease.candidate {
        spread = spread.member(id);
    }
    let mut member = spread.join().await?;
    tracing::info!(group = %args.group, shards = args.shards, member = %member.id(), "joined the group");
    let shard = Shard {
        group: args.group.clone(),
        command: args.command.command.clone(),
        grace,
        isolation: args.supervise.isolation,
        fence,
    };
    let mut running = JoinSet::new();
    loop {
        tokio::select! {
            guard = member.next() => match guard {
                Some(guard) => { running.spawn(shard.clone().run(guard)); }
                None => break,
            },
            Some(done) = running.join_next() => {
                if let Err(e) = done {
                    tracing::error!(error = %e, "a shard's supervisor failed");
                }
            }
            signal = signals.recv() => {
                tracing::info!(group = %args.group, %signal, "draining: stopping every shard's command and releasing the shards");
                break;
            }
        }
    }
    // Every guard is asked back: each supervisor stops its command's tree, then the member
    // releases the shard (within a ttl at the latest) and leaves.
    member.leave().await;
    while running.join_next().await.is_some() {}
    tracing::info!(group = %args.group, "left the group");
    Ok(0)
}

/// How to run the command of one shard.
#[derive(Clone)]
struct Shard {
    group: String,
    command: Vec<String>,
    grace: Duration,
    isolation: Isolation,
    fence: Vec<(&'static str, String)>,
}

impl Shard {
    /// Runs the command while `guard` holds. When it exits by itself the shard is released
    /// at once (the member takes it again, with a new term, if it is still its share).
    async fn run(self, guard: ShardGuard) {
        let (shard, term) = (guard.shard(), guard.term());
        let mut env = vec![
            ("TENURE_SHARD", shard.to_string()),
            ("TENURE_SHARDS", guard.shards().to_string()),
            ("TENURE_GROUP", self.group.clone()),
        ];
        env.extend(self.fence.iter().cloned());
        let name = guard.name().to_string();
        let job = Job {
            name: &name,
            command: &self.command,
            grace: self.grace,
            env,
            release_on_exit: true,
            isolation: self.isolation,
            health: None,
        };
        // The drain is the member's: a signal reaches every shard through its guard.
        let Ok(mut signals) = Signals::new() else {
            tracing::error!(name, "cannot listen for signals; not running the shard");
            return;
        };
        match run_while_held(guard, &job, None, &mut signals).await {
            Ok(Ended::Exited(code) | Ended::Interrupted(code)) => {
                tracing::info!(
                    name,
                    term,
                    code,
                    "the shard's command exited; shard released"
                );
            }
            Ok(Ended::Lost | Ended::Unhealthy) => {
                tracing::info!(
                    name,
                    term,
                    "the shard moved or was lost; its command is stopped"
                );
            }
            Ok(Ended::Unreleased(code, e)) => {
                tracing::warn!(name, term, code, error = %e, "the shard's command exited; its release failed, it expires");
            }
            Err(failure) => {
                tracing::error!(name, term, error = %failure.message, "the shard's command could not run");
            }
        }
    }
}
