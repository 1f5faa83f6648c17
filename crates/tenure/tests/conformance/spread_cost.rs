//! What a spreading member costs (issues 35.4 and 37.4): one transaction per renew interval
//! in a steady state — its tick and the renewal of all its shards folded together, no other
//! call — whatever its number of shards; and a group of a million shards with a cap of two
//! per member settles, reads and ticks at the cost of its few live shards.

use crate::common::unique;
use crate::spread::{join_with, settle, start, Shared, Worker, TTL, WITHIN};
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::CountingBackend;
use tenure::{Spread, Store, Timing};
use tokio::time::{sleep, Instant};

/// Counts `counting`'s calls over `intervals` renew intervals of the members' timing and
/// checks that they were ticks alone: one transaction each (the first and the last interval
/// may each have begun or ended mid-tick), no lease operation or batch or read of their own.
async fn one_transaction_per_interval(counting: &CountingBackend, intervals: u32) {
    let interval = Timing::from_ttl(TTL).unwrap().renew_interval();
    let before = counting.counts();
    let started = Instant::now();
    sleep(interval * intervals).await;
    let spent = counting.counts().since(before);
    let elapsed = started.elapsed();
    let ticks = elapsed.as_secs_f64() / interval.as_secs_f64();
    assert_eq!(
        (spent.applies, spent.batches, spent.reads),
        (0, 0, 0),
        "{spent:?}"
    );
    let transactions = spent.transactions as f64;
    assert!(
        transactions >= ticks.floor() - 1.0 && transactions <= ticks.ceil() + 1.0,
        "{transactions} transactions in {ticks:.1} intervals"
    );
}

pub(crate) async fn spread_costs_one_transaction_per_interval(store: Store) {
    let group = unique("cost");
    let record = Shared::default();
    let counting = Arc::new(CountingBackend::new(store.backend().clone()));
    let counted = Store::from_backend(counting.clone(), Duration::from_secs(10));
    // Alone, it owns and renews all twelve shards at every tick.
    let a = start(join_with(&counted, &group, "a", 12, None).await, &record);
    settle(&store, &group, &[&a], 12, &record).await;
    one_transaction_per_interval(&counting, 8).await;
    // Every shard still believed and worked on, by a alone.
    assert_eq!(a.count(), 12);
    {
        let r = record.lock().unwrap();
        assert_eq!(r.working.len(), 12);
        assert_eq!(r.starts.len(), 12, "no shard lost and taken again");
        assert!(r.violations.is_empty(), "{:?}", r.violations);
    }
    a.leave().await;
}

/// Waits (bounded) until each worker owns `each` shards, all different.
async fn own(workers: &[&Worker], each: usize) {
    let started = Instant::now();
    loop {
        let sets: Vec<_> = workers.iter().map(|w| w.owned.borrow().clone()).collect();
        let all: std::collections::BTreeSet<u32> = sets.iter().flatten().copied().collect();
        if sets.iter().all(|s| s.len() == each) && all.len() == each * workers.len() {
            return;
        }
        assert!(started.elapsed() < WITHIN, "not {each} each: {sets:?}");
        sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn spread_a_million_shards_cost_their_live_rows(store: Store) {
    let group = unique("huge");
    let record = Shared::default();
    let counting = Arc::new(CountingBackend::new(store.backend().clone()));
    let counted = Store::from_backend(counting.clone(), Duration::from_secs(10));
    let n = tenure::spread::MAX_SHARDS;
    let a = start(join_with(&counted, &group, "a", n, Some(2)).await, &record);
    let b = start(join_with(&store, &group, "b", n, Some(2)).await, &record);
    own(&[&a, &b], 2).await;
    one_transaction_per_interval(&counting, 4).await;

    // The assignment is what is live: two members of two shards, the rest as ranges.
    let seen = Spread::new(store.clone(), &group, n)
        .unwrap()
        .assignment()
        .await
        .unwrap();
    assert_eq!(seen.shards, n);
    assert_eq!(
        seen.members.values().map(Vec::len).collect::<Vec<_>>(),
        [2, 2]
    );
    assert_eq!(seen.unowned_count(), u64::from(n) - 4);
    assert!(seen.unowned.len() <= 5, "{:?}", seen.unowned);
    assert_eq!(seen.terms.len(), 4);
    let groups = tenure::spread::groups(&store).await.unwrap();
    assert_eq!(groups.get(&group), Some(&n));
    let violations = record.lock().unwrap().violations.clone();
    assert!(violations.is_empty(), "{violations:?}");
    a.leave().await;
    b.leave().await;
}
