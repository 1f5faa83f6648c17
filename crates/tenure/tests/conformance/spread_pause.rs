//! Pausing a whole group (issue 29): `Spread::pause` pauses the group and every shard in one
//! transaction; every owner's work stops (its guard reports lost) and each shard is released,
//! nobody takes a shard while the group is paused — a member of a larger N that joins
//! meanwhile included (issue 35.7) — and `Spread::resume` lets the members take them again,
//! each with a higher term.

use crate::common::unique;
use crate::spread::{join, join_with, settle, start, Shared, TTL, WITHIN};
use std::time::Duration;
use tenure::{Effect, Spread, Store};
use tokio::time::{sleep, Instant};

/// Watches for two ttls (several ticks of every member) that no shard starts beyond the
/// `starts` so far.
async fn nothing_starts(record: &Shared, starts: usize) {
    let watch_until = Instant::now() + TTL * 2;
    while Instant::now() < watch_until {
        let now_starts = record.lock().unwrap().starts.clone();
        assert_eq!(
            now_starts.len(),
            starts,
            "a shard started while paused: {now_starts:?}"
        );
        sleep(Duration::from_millis(50)).await;
    }
}

pub(crate) async fn spread_pause_stops_every_shard_until_resumed(store: Store) {
    let group = unique("paused");
    let record = Shared::default();
    let a = start(join(&store, &group, "a").await, &record);
    let b = start(join(&store, &group, "b").await, &record);
    settle(&store, &group, &[&a, &b], 6, &record).await;

    let spread = Spread::new(store.clone(), &group, 12).unwrap();
    let applied = spread.pause("test").await.unwrap();
    assert_eq!(applied.len(), 12);
    assert!(
        applied.iter().all(|x| x.effect == Effect::Paused),
        "{applied:?}"
    );

    // Every owner stops its work and releases: nobody works, nobody holds, all paused.
    let start_at = Instant::now();
    loop {
        let seen = spread.assignment().await.unwrap();
        let working = record.lock().unwrap().working.len();
        let stopped = a.count() == 0 && b.count() == 0 && working == 0;
        if stopped && seen.unowned_count() == 12 && seen.paused_count() == 12 && seen.paused {
            assert!(seen.members.values().all(Vec::is_empty), "{seen:?}");
            break;
        }
        assert!(
            start_at.elapsed() < WITHIN,
            "not stopped: {working} working, {seen:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
    // While paused, for two ttls (several ticks of each member), nobody takes a shard.
    let starts = record.lock().unwrap().starts.len();
    nothing_starts(&record, starts).await;
    for i in 0..12 {
        let history = store
            .history(&tenure::spread::shard_name(&group, i), 1)
            .await
            .unwrap();
        // Nothing after the pause: nobody acquired (the step-down lets the lease expire).
        assert_eq!(
            (history[0].event.as_str(), history[0].actor.as_str()),
            ("paused", "test"),
            "shard {i}: {history:?}"
        );
    }

    let applied = spread.resume("test").await.unwrap();
    assert!(
        applied.iter().all(|x| x.effect == Effect::Resumed),
        "{applied:?}"
    );
    // `settle` checks that no shard had two workers and that every term rose.
    settle(&store, &group, &[&a, &b], 6, &record).await;
    let seen = spread.assignment().await.unwrap();
    assert!(seen.paused_shards.is_empty() && !seen.paused, "{seen:?}");
    a.leave().await;
    b.leave().await;
}

/// A paused group stays paused whatever joins (issue 35.7): the pause is the group's, not
/// only its existing shards', so a member with a larger N that joins meanwhile takes none of
/// its extra shards either; on resume every member takes its share, the newcomer's band
/// included.
pub(crate) async fn spread_a_paused_group_stays_paused_whatever_joins(store: Store) {
    let group = unique("bigger");
    let record = Shared::default();
    let a = start(join_with(&store, &group, "a", 4, None).await, &record);
    let b = start(join_with(&store, &group, "b", 4, None).await, &record);
    let spread = Spread::new(store.clone(), &group, 8).unwrap();
    let started = Instant::now();
    while !(a.count() == 2 && b.count() == 2) {
        assert!(started.elapsed() < WITHIN, "{} {}", a.count(), b.count());
        sleep(Duration::from_millis(20)).await;
    }
    let applied = spread.pause("test").await.unwrap();
    assert_eq!(applied.len(), 4, "the shards whose rows exist: {applied:?}");
    let started = Instant::now();
    while record.lock().unwrap().working.len() + a.count() + b.count() > 0 {
        assert!(started.elapsed() < WITHIN, "the work did not stop");
        sleep(Duration::from_millis(20)).await;
    }
    // c counts 8 shards: 4 to 7 never existed when the group was paused.
    let starts = record.lock().unwrap().starts.len();
    let c = start(join_with(&store, &group, "c", 8, None).await, &record);
    nothing_starts(&record, starts).await;
    let seen = spread.assignment().await.unwrap();
    assert!(seen.paused, "{seen:?}");
    assert_eq!(seen.member_shards.get("c"), Some(&8), "{seen:?}");
    assert_eq!(seen.unowned_count(), 8, "{seen:?}");

    spread.resume("test").await.unwrap();
    // Every shard of the 8 owned again, none twice, a and b only below their N of 4.
    let started = Instant::now();
    loop {
        let seen = spread.assignment().await.unwrap();
        let below = |id: &str| {
            seen.members
                .get(id)
                .is_some_and(|s| s.iter().all(|&i| i < 4))
        };
        if seen.unowned.is_empty() && !seen.paused && below("a") && below("b") {
            break;
        }
        assert!(started.elapsed() < WITHIN, "{seen:?}");
        sleep(Duration::from_millis(20)).await;
    }
    let violations = record.lock().unwrap().violations.clone();
    assert!(violations.is_empty(), "{violations:?}");
    for w in [a, b, c] {
        w.leave().await;
    }
}
