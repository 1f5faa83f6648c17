//! A group's name is not an election's (issue 29): joining a group named like a lease is
//! refused, and an elector that campaigns for a live group's name is not counted as a member
//! (its registration would otherwise take a share that nobody works on).

use crate::common::unique;
use crate::spread::{join, settle, start, Shared};
use std::time::Duration;
use tenure::{Elector, Error, Spread, Store, Timing};
use tokio::time::{sleep, Instant};

const TTL: Duration = Duration::from_millis(2_000);
const WITHIN: Duration = Duration::from_secs(40);

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
