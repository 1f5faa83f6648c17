//! The spreading workload (issue 29; real databases only: the in-memory backend has no
//! transactions): every holder is also a member of one group of [`SHARDS`] shards, in rounds —
//! it joins (half the time with the id of its earlier rounds, as a restarted process would),
//! hands each shard it is given to a task of its own, and after a while leaves cleanly or is
//! dropped; then it joins again. Each shard guard is registered with the checker like a lock
//! guard, so the same invariants hold per shard: one unlost guard per shard, no (shard, term)
//! twice, terms that rise, lost stays lost.

use crate::checker::{Checker, Probe};
use crate::workload::{ms, Plan};
use rand::rngs::StdRng;
use rand::Rng;
use std::sync::Arc;
use tenure::{ShardGuard, Spread, Store};
use tokio::task::JoinSet;
use tokio::time::{sleep, sleep_until, Instant};

/// Shards in the group: more than members, so that members own several and moves are common.
pub(crate) const SHARDS: u32 = 5;

/// The group's name.
pub(crate) fn group(plan: &Plan) -> String {
    format!("{}grp", plan.prefix)
}

/// Holder `h`'s membership, round after round until the plan ends.
pub(crate) async fn member(
    plan: Arc<Plan>,
    checker: Arc<Checker>,
    store: Store,
    h: usize,
    mut rng: StdRng,
) {
    let mut round = 0;
    while Instant::now() < plan.end {
        round += 1;
        let id = if rng.gen_bool(0.5) {
            format!("p{h}-member")
        } else {
            format!("p{h}-member-{round}")
        };
        let joined = Spread::new(store.clone(), group(&plan), SHARDS)
            .expect("a valid group")
            .member(&id)
            .ttl(plan.ttl)
            .join()
            .await;
        let mut member = match joined {
            Ok(member) => member,
            Err(e) => {
                checker.event(format!("{id} join failed: {e}"));
                sleep(ms(rng.gen_range(50..300))).await;
                continue;
            }
        };
        checker.event(format!("{id} joined (round {round})"));
        let stay = sleep(ms(rng.gen_range(300..3000)));
        tokio::pin!(stay);
        let mut shards = JoinSet::new();
        loop {
            tokio::select! {
                () = &mut stay => break,
                guard = member.next() => match guard {
                    Some(guard) => {
                        let owner = format!("{id}/{round}");
                        let task = hold(checker.clone(), owner, guard, plan.fork(rng.gen()), plan.end);
                        shards.spawn(task);
                    }
                    None => break,
                },
            }
        }
        if rng.gen_bool(0.5) {
            member.leave().await;
            checker.event(format!("{id} left"));
        } else {
            drop(member);
            checker.event(format!("{id} dropped"));
        }
        // Every shard task ends: its guard was surrendered (lost), or its time ran out.
        while shards.join_next().await.is_some() {}
    }
}

/// Holds a shard until it is lost, or for a while (then releases or drops it).
async fn hold(
    checker: Arc<Checker>,
    owner: String,
    guard: ShardGuard,
    mut rng: StdRng,
    end: Instant,
) {
    let guard = Arc::new(guard);
    let (name, term) = (guard.name().to_string(), guard.term());
    let id = checker.register(&name, term, &owner, Probe::Shard(guard.clone()));
    let until = if rng.gen_bool(0.3) {
        Instant::now() + ms(rng.gen_range(0..1500))
    } else {
        end
    };
    let lost = tokio::select! {
        biased;
        () = guard.lost() => true,
        () = sleep_until(until) => false,
    };
    if lost {
        checker.saw_lost(id);
        sleep(ms(rng.gen_range(0..200))).await;
    }
    // Its end (release, drop) marks it lost before any await: nothing to watch.
    checker.retire(id);
    let guard = Arc::try_unwrap(guard).expect("only this task holds the guard");
    let what = if rng.gen_bool(0.5) {
        format!("release: {:?}", guard.release().await)
    } else {
        drop(guard);
        "drop".to_string()
    };
    checker.event(format!("{owner} ended {name} term {term}: {what}"));
}
