//! The etcd layer's log on one backend: events in whole revisions with the keys before them,
//! gapless revisions committed in order under writers in several processes, and members.

use crate::etcd_support::{delete, put, Scoped};
use std::collections::BTreeSet;
use std::time::Duration;
use tenure::etcd::proto::etcdserverpb::Member;
use tenure::etcd::proto::mvccpb::event::EventType;
use tenure::etcd::proto::mvccpb::Event;
use tenure::etcd::Etcd;
use tenure::Store;

fn at(e: &Event) -> i64 {
    e.kv.as_ref().unwrap().mod_revision
}

/// The log from a revision on: filtered by key, prefix or everything; `prev_kv` is the key
/// before the event; a limit never splits a revision.
pub(crate) async fn etcd_events_in_whole_revisions(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    put(etcd, "w/a", "1").await; // 2
    put(etcd, "w/a", "2").await; // 3
    delete(etcd, "w/a").await; // 4
    put(etcd, "x", "1").await; // 5
    let one = etcd.events(1, b"w/a", b"", 100).await.unwrap();
    assert_eq!(
        (one.events.len(), one.through, one.revision, one.floor),
        (3, 5, 5, 0)
    );
    let second = &one.events[1];
    assert_eq!(second.r#type, EventType::Put as i32);
    let (kv, prev) = (
        second.kv.as_ref().unwrap(),
        second.prev_kv.as_ref().unwrap(),
    );
    assert_eq!(
        (kv.value.as_slice(), kv.version, kv.create_revision),
        (&b"2"[..], 2, 2)
    );
    assert_eq!((prev.value.as_slice(), prev.mod_revision), (&b"1"[..], 2));
    assert!(one.events[0].prev_kv.is_none(), "created: nothing before");
    let gone = &one.events[2];
    assert_eq!(gone.r#type, EventType::Delete as i32);
    assert_eq!(
        (at(gone), gone.prev_kv.as_ref().unwrap().value.as_slice()),
        (4, &b"2"[..])
    );
    assert_eq!(
        etcd.events(3, b"w/", b"w0", 100)
            .await
            .unwrap()
            .events
            .len(),
        2
    );
    assert!(etcd
        .events(6, b"\0", b"\0", 100)
        .await
        .unwrap()
        .events
        .is_empty());

    // A Txn of three puts is one revision: a limit of two takes it whole, or leaves it.
    let txn = tenure::etcd::proto::etcdserverpb::TxnRequest {
        compare: vec![],
        success: ["t/1", "t/2", "t/3"]
            .iter()
            .map(|k| crate::etcd_txn::put_op(k, "v", 0))
            .collect(),
        failure: vec![],
    };
    etcd.txn(&txn).await.unwrap(); // 6
    let whole = etcd.events(6, b"\0", b"\0", 2).await.unwrap();
    assert_eq!((whole.events.len(), whole.through), (3, 6));
    let before = etcd.events(5, b"\0", b"\0", 2).await.unwrap();
    assert_eq!((before.events.len(), before.through), (1, 5));
    // A run from beyond the current revision does not send its reader back.
    let ahead = etcd.events(9, b"\0", b"\0", 2).await.unwrap();
    assert_eq!(
        (ahead.events.len(), ahead.through, ahead.revision),
        (0, 8, 6)
    );
    s.drop_tables().await;
}

/// Revisions are gapless and committed in order: three processes write at once (Puts and
/// Txns); every write has a revision of its own, together exactly 2..=N+1; and a reader that
/// follows the log meanwhile never sees a revision twice, nor one below what it has seen.
pub(crate) async fn etcd_revisions_are_gapless_under_concurrent_writers(store: Store) {
    let s = Scoped::new(store).await;
    let (b, c) = (s.another().await, s.another().await);
    const WRITES: usize = 25;
    let writer = |etcd: Etcd, name: &'static str| {
        tokio::spawn(async move {
            let mut revisions = Vec::new();
            for i in 0..WRITES {
                let revision = if i % 3 == 0 {
                    let txn = tenure::etcd::proto::etcdserverpb::TxnRequest {
                        compare: vec![],
                        success: vec![
                            crate::etcd_txn::put_op(&format!("{name}/{i}/a"), "v", 0),
                            crate::etcd_txn::put_op(&format!("{name}/{i}/b"), "v", 0),
                        ],
                        failure: vec![],
                    };
                    etcd.txn(&txn).await.unwrap().header.unwrap().revision
                } else {
                    put(&etcd, &format!("{name}/{i}"), "v").await
                };
                revisions.push(revision);
            }
            revisions
        })
    };
    let follower = {
        let etcd = s.etcd.clone();
        tokio::spawn(async move {
            let (mut from, mut seen) = (1, Vec::new());
            while from <= 3 * i64::try_from(WRITES).unwrap() + 1 {
                let run = etcd.events(from, b"\0", b"\0", 7).await.unwrap();
                for event in &run.events {
                    assert!(at(event) >= from, "{} below {from}", at(event));
                }
                seen.extend(run.events.iter().map(at));
                from = run.through + 1;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            seen
        })
    };
    let mut all = Vec::new();
    for handle in [
        writer(s.etcd.clone(), "a"),
        writer(b.clone(), "b"),
        writer(c.clone(), "c"),
    ] {
        all.extend(handle.await.unwrap());
    }
    let total = i64::try_from(3 * WRITES).unwrap();
    let distinct: BTreeSet<i64> = all.iter().copied().collect();
    assert_eq!(distinct.len(), all.len(), "one revision per write: {all:?}");
    assert_eq!(distinct, (2..=total + 1).collect::<BTreeSet<i64>>());
    let seen = follower.await.unwrap();
    let revisions: BTreeSet<i64> = seen.iter().copied().collect();
    assert_eq!(
        revisions,
        (2..=total + 1).collect::<BTreeSet<i64>>(),
        "no gap"
    );
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "in order");
    // Each Txn wrote two keys: two events at its revision, each seen once.
    let txns = (0..WRITES).filter(|i| i % 3 == 0).count();
    assert_eq!(seen.len(), 3 * (WRITES + txns), "no event twice");
    b.store().close().await;
    c.store().close().await;
    s.drop_tables().await;
}

/// Members join, heartbeat, are listed while they live (by the database's clock), and leave.
pub(crate) async fn etcd_members_join_heartbeat_and_leave(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    let member = |id: u64, name: &str| Member {
        id,
        name: name.into(),
        peer_ur_ls: vec![],
        client_ur_ls: vec![format!("http://127.0.0.1:{id}"), "http://[::1]:1".into()],
        is_learner: false,
    };
    let long = Duration::from_secs(60);
    let joined = etcd
        .member_join(&member(u64::MAX, "big"), long)
        .await
        .unwrap();
    assert_eq!(joined.client_ur_ls.len(), 2);
    etcd.member_join(&member(7, "short"), Duration::from_millis(300))
        .await
        .unwrap();
    let ids: Vec<u64> = etcd.members().await.unwrap().iter().map(|m| m.id).collect();
    assert_eq!(ids, [7, u64::MAX]);
    assert!(etcd.member_heartbeat(u64::MAX, long).await.unwrap());
    let now = etcd.store().list().await.unwrap().now;
    crate::common::until_db_passes(etcd.store(), tenure::DbTime(now.0 + 300_000)).await;
    let listed = etcd.members().await.unwrap();
    assert_eq!(listed, vec![member(u64::MAX, "big")]);
    assert!(
        !etcd.member_heartbeat(7, long).await.unwrap(),
        "it had ended: join again"
    );
    etcd.member_leave(u64::MAX).await.unwrap();
    assert!(etcd.members().await.unwrap().is_empty());
    s.drop_tables().await;
}
