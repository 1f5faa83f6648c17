//! A group's name is not an election's (issue 29): joining a group named like a held lease
//! is refused, an elector that campaigns for a live group's name is not counted as a member
//! (its registration would otherwise take a share that nobody works on), Consul's acquire
//! keeps the same rule, and a vacant lease gives way to a group (issue 35.5).

use crate::common::unique;
use crate::spread::{join, settle, start, Shared, TTL, WITHIN};
use std::time::Duration;
use tenure::{Elector, Error, Spread, Store, Timing};
use tokio::time::{sleep, Instant};

pub(crate) async fn spread_refuses_a_group_named_like_a_lease(store: Store) {
    let name = unique("taken");
    let op = tenure::Op::Campaign {
        candidate: "node-a".into(),
        term: None,
        ttl_ms: 60_000,
        metadata: None,
        purpose: tenure::Purpose::Election,
    };
    store.apply(&name, &op, "node-a").await.unwrap();
    let err = Spread::new(store.clone(), &name, 4)
        .unwrap()
        .ttl(TTL)
        .join()
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::Invalid { what: "group", .. }),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains(&name) && text.contains("lease"),
        "a clear error naming the group: {text}"
    );
    // Nothing changed: no group, no member, no shard.
    assert!(!tenure::spread::exists(&store, &name).await.unwrap());
    assert!(!tenure::spread::groups(&store)
        .await
        .unwrap()
        .contains_key(&name));
    assert!(store
        .get(&format!("{name}/0"))
        .await
        .unwrap()
        .leases
        .is_empty());
}

pub(crate) async fn spread_counts_no_elector_of_its_name_as_a_member(store: Store) {
    let group = unique("shared");
    let record = Shared::default();
    let a = start(join(&store, &group, "a").await, &record);
    let b = start(join(&store, &group, "b").await, &record);
    settle(&store, &group, &[&a, &b], 6, &record).await;

    // An elector campaigning for the group's name (a collision the joins could not see: it
    // came after them). Once it leads, b leaves: a must take all twelve, not share them with
    // the elector, which never works on a shard.
    let timing = Timing::from_ttl(TTL).unwrap();
    let elector = Elector::builder(store.clone(), &group)
        .timing(timing)
        .candidate("elector")
        .spawn()
        .unwrap();
    let role = elector.role();
    let start_at = Instant::now();
    while !role.borrow().is_leader() {
        assert!(start_at.elapsed() < WITHIN, "the elector never led");
        sleep(Duration::from_millis(20)).await;
    }
    b.leave().await;
    // `settle` also checks the assignment: only a, nothing unowned.
    settle(&store, &group, &[&a], 12, &record).await;
    elector.shutdown().await;
    a.leave().await;
}

/// One rule for names on every path that takes a lease for someone who is not a member
/// (issue 35.5): Consul's `?acquire=` of a live group's name or of one of its shards is
/// refused — Consul's answer to an acquire it cannot grant, nothing written — while a key
/// beyond the group's shards, or the same keys once the group has no live member, are
/// granted. And the operator's way back: a name whose lease Consul held and gave up (vacant,
/// no live holder, no live candidate) becomes a group's.
pub(crate) async fn spread_names_hold_for_consul_and_a_vacant_lease_gives_way(store: Store) {
    use crate::consul::{call, get, put, session};
    use tenure::consul::{Behavior, PutMode, Reply, Request};
    let group = unique("consulgrp");
    let s = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
    // Consul held the group's name first; its session ends and the key goes.
    assert!(put(&store, &group, "x", PutMode::Acquire(s.clone())).await);
    call(&store, Request::DestroySession(s)).await;
    let del = Request::Delete {
        key: group.clone(),
        recurse: false,
        cas: None,
    };
    call(&store, del).await;
    assert!(
        !store.get(&group).await.unwrap().leases.is_empty(),
        "the lease row stays"
    );

    // The vacant lease no longer blocks the group.
    let record = Shared::default();
    let a = start(
        crate::spread::join_with(&store, &group, "a", 2, None).await,
        &record,
    );
    settle_two(&a).await;
    let s = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
    let acquire = |key: &str| Request::Put {
        key: key.to_string(),
        value: b"mine".to_vec(),
        flags: 0,
        mode: PutMode::Acquire(s.clone()),
    };
    for key in [group.clone(), format!("{group}/0"), format!("{group}/1")] {
        let reply = call(&store, acquire(&key)).await.reply;
        let Reply::Refused(reason) = reply else {
            panic!("{key}: {reply:?}");
        };
        assert!(
            reason.contains(&key) && reason.contains("spreading group"),
            "{reason}"
        );
        assert!(get(&store, &key).await.is_none(), "{key}: nothing written");
    }
    // Not a shard of the group (beyond its N, or not a shard's spelling): an ordinary key.
    for key in [format!("{group}/2"), format!("{group}/01")] {
        assert!(
            put(&store, &key, "v", PutMode::Acquire(s.clone())).await,
            "{key}"
        );
    }
    a.leave().await;
    // No live member: the group's names are ordinary again.
    assert!(
        put(
            &store,
            &format!("{group}/0"),
            "v",
            PutMode::Acquire(s.clone())
        )
        .await
    );
    call(&store, Request::DestroySession(s)).await;
}

/// Waits (bounded) until `w` owns both shards of its group.
async fn settle_two(w: &crate::spread::Worker) {
    let started = Instant::now();
    while w.count() < 2 {
        assert!(started.elapsed() < WITHIN, "{}", w.count());
        sleep(Duration::from_millis(20)).await;
    }
}
