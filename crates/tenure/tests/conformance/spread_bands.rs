//! A rolling change of `--shards` (issue 35.6): while members give different shard counts,
//! each shard is shared among the members whose N covers it, so every shard below the
//! largest N is owned — none stays unowned below every member's N — and each member takes
//! only shards below its own N.

use crate::common::unique;
use crate::spread::{join_with, start, Shared, WITHIN};
use std::time::Duration;
use tenure::{Spread, Store};
use tokio::time::{sleep, Instant};

pub(crate) async fn spread_members_with_different_ns_own_every_shard(store: Store) {
    let group = unique("bands");
    let record = Shared::default();
    // Half-way through a change from 5 to 7 shards: two members of each.
    let old = [
        start(join_with(&store, &group, "old-1", 5, None).await, &record),
        start(join_with(&store, &group, "old-2", 5, None).await, &record),
    ];
    let new = [
        start(join_with(&store, &group, "new-1", 7, None).await, &record),
        start(join_with(&store, &group, "new-2", 7, None).await, &record),
    ];
    let spread = Spread::new(store.clone(), &group, 7).unwrap();
    let started = Instant::now();
    loop {
        let seen = spread.assignment().await.unwrap();
        let olds_below_5 = ["old-1", "old-2"].iter().all(|id| {
            seen.members
                .get(*id)
                .is_some_and(|s| s.iter().all(|&i| i < 5))
        });
        let counts: Vec<usize> = seen.members.values().map(Vec::len).collect();
        if seen.unowned.is_empty() && olds_below_5 && counts.iter().all(|&c| c >= 1) {
            assert_eq!(seen.member_shards.get("old-1"), Some(&5));
            assert_eq!(seen.member_shards.get("new-2"), Some(&7));
            break;
        }
        assert!(started.elapsed() < WITHIN, "{seen:?}");
        sleep(Duration::from_millis(20)).await;
    }
    // The old members leave (the rollout ends): the new ones share all 7.
    let [o1, o2] = old;
    o1.leave().await;
    o2.leave().await;
    let started = Instant::now();
    loop {
        let seen = spread.assignment().await.unwrap();
        let mut counts: Vec<usize> = seen.members.values().map(Vec::len).collect();
        counts.sort_unstable();
        if seen.unowned.is_empty() && counts == [3, 4] {
            break;
        }
        assert!(started.elapsed() < WITHIN, "{seen:?}");
        sleep(Duration::from_millis(20)).await;
    }
    let violations = record.lock().unwrap().violations.clone();
    assert!(violations.is_empty(), "{violations:?}");
    for w in new {
        w.leave().await;
    }
}
