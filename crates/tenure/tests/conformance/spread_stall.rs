//! A member whose database calls stall past its ttl (a partition, or a process paused; issue
//! 29): its work stops by its local deadline, before its shards' leases expire, so the other
//! members take them with no shard worked on twice; each shard's terms rise; when the stall
//! ends the member believes in none of its old shards and the group settles again.

use crate::common::unique;
use crate::spread::{join, settle, start, Shared};
use crate::stalling::stalling;
use std::time::Duration;
use tenure::Store;
use tokio::time::{sleep, Instant};

/// The members' ttl (`spread.rs`: 2 s).
const TTL: Duration = Duration::from_millis(2_000);

pub(crate) async fn spread_a_stalled_member_stops_before_its_shards_move(store: Store) {
    let group = unique("stalled");
    let record = Shared::default();
    let (stall, stalled_store) = stalling(&store);
    let a = start(join(&stalled_store, &group, "a").await, &record);
    let b = start(join(&store, &group, "b").await, &record);
    let c = start(join(&store, &group, "c").await, &record);
    settle(&store, &group, &[&a, &b, &c], 4, &record).await;
    let mine: Vec<u32> = a.owned.borrow().iter().copied().collect();
    let terms_before = {
        let r = record.lock().unwrap();
        mine.iter().map(|s| r.last_term[s]).collect::<Vec<u64>>()
    };

    // a's calls hang from now on, for well over its ttl.
    stall.send(true).unwrap();
    let stalled_at = Instant::now();
    // b and c take a's shards (`settle` fails on any shard worked on by two at once, or on a
    // term that did not rise), and a's work on them stopped.
    settle(&store, &group, &[&b, &c], 6, &record).await;
    {
        let r = record.lock().unwrap();
        let a_works: Vec<_> = r.working.iter().filter(|(_, (id, _))| id == "a").collect();
        assert!(a_works.is_empty(), "a still works: {a_works:?}");
        for (s, before) in mine.iter().zip(&terms_before) {
            assert!(
                r.last_term[s] > *before,
                "shard {s}: {before} then {}",
                r.last_term[s]
            );
        }
    }
    // Keep a stalled for at least two ttls in all.
    let until = stalled_at + TTL * 2;
    while Instant::now() < until {
        sleep(Duration::from_millis(50)).await;
    }

    // The stall ends: a takes part again, from nothing; never a second believer.
    stall.send(false).unwrap();
    settle(&store, &group, &[&a, &b, &c], 4, &record).await;
    let violations = record.lock().unwrap().violations.clone();
    assert!(violations.is_empty(), "{violations:?}");
    for w in [a, b, c] {
        w.leave().await;
    }
}
