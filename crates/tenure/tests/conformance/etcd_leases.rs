//! The etcd layer's leases on one backend: grant, keep-alive, TimeToLive, Leases, revoke, and
//! expiry by the database's clock (its keys deleted at one revision by a reap).

use crate::common::until_db_passes;
use crate::etcd_support::{current, get, grant, put_leased, revision, Scoped};
use tenure::etcd::proto::etcdserverpb::{
    LeaseGrantRequest, LeaseRevokeRequest, LeaseTimeToLiveRequest, PutRequest,
};
use tenure::etcd::proto::mvccpb::event::EventType;
use tenure::etcd::{Error, MAX_LEASE_TTL, MIN_LEASE_TTL};
use tenure::{DbTime, Store};

fn ttl_of(id: i64) -> LeaseTimeToLiveRequest {
    LeaseTimeToLiveRequest { id, keys: true }
}

/// Grants (a given id, a chosen one, the TTL bounds), keep-alive, TimeToLive with keys,
/// Leases, and a revoke that deletes the lease's keys at one revision.
pub(crate) async fn etcd_lease_grant_keep_alive_revoke(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    let given = etcd
        .lease_grant(&LeaseGrantRequest { ttl: 30, id: 77 })
        .await
        .unwrap();
    assert_eq!((given.id, given.ttl, revision(&given.header)), (77, 30, 1));
    assert!(matches!(
        etcd.lease_grant(&LeaseGrantRequest { ttl: 30, id: 77 })
            .await,
        Err(Error::LeaseExists)
    ));
    let short = etcd
        .lease_grant(&LeaseGrantRequest { ttl: 1, id: 0 })
        .await
        .unwrap();
    assert!(short.id > 0 && short.id != 77);
    assert_eq!(short.ttl, MIN_LEASE_TTL);
    // Before any write (no revision row yet), and the same lease twice in one batch.
    let twice = etcd.lease_keep_alive_many(&[77, 77]).await.unwrap();
    let seen: Vec<(i64, i64, i64)> = twice
        .iter()
        .map(|a| (a.id, a.ttl, revision(&a.header)))
        .collect();
    assert_eq!(seen, [(77, 30, 1), (77, 30, 1)]);
    assert_eq!(
        etcd.lease_grant(&LeaseGrantRequest { ttl: -5, id: 0 })
            .await
            .unwrap()
            .ttl,
        MIN_LEASE_TTL
    );
    assert!(matches!(
        etcd.lease_grant(&LeaseGrantRequest {
            ttl: MAX_LEASE_TTL + 1,
            id: 0
        })
        .await,
        Err(Error::LeaseTtlTooLarge)
    ));
    put_leased(etcd, "l/b", "1", 77).await; // 2
    put_leased(etcd, "l/a", "1", 77).await; // 3
    put_leased(etcd, "other", "1", 0).await; // 4
    let alive = etcd.lease_keep_alive(77).await.unwrap();
    assert_eq!((alive.id, alive.ttl, revision(&alive.header)), (77, 30, 4));
    assert_eq!(
        etcd.lease_keep_alive(5).await.unwrap().ttl,
        0,
        "an unknown lease: TTL 0"
    );
    let many = etcd
        .lease_keep_alive_many(&[77, 5, short.id])
        .await
        .unwrap();
    let ttls: Vec<(i64, i64)> = many.iter().map(|a| (a.id, a.ttl)).collect();
    assert_eq!(ttls, [(77, 30), (5, 0), (short.id, MIN_LEASE_TTL)]);
    let ttl = etcd.lease_time_to_live(&ttl_of(77)).await.unwrap();
    assert_eq!(
        (ttl.granted_ttl, ttl.keys.clone()),
        (30, vec![b"l/a".to_vec(), b"l/b".to_vec()])
    );
    assert!((28..=30).contains(&ttl.ttl), "{}", ttl.ttl);
    let unknown = etcd.lease_time_to_live(&ttl_of(5)).await.unwrap();
    assert_eq!((unknown.id, unknown.ttl), (5, -1));
    let listed = etcd.lease_leases().await.unwrap();
    assert!(listed.leases.iter().any(|l| l.id == 77));

    let revoked = etcd
        .lease_revoke(&LeaseRevokeRequest { id: 77 })
        .await
        .unwrap();
    assert_eq!(
        revision(&revoked.header),
        5,
        "both keys deleted at one revision"
    );
    assert!(get(etcd, "l/a").await.is_none() && get(etcd, "l/b").await.is_none());
    assert!(get(etcd, "other").await.is_some());
    let events = etcd.events(5, b"\0", b"\0", 10).await.unwrap();
    assert_eq!(events.events.len(), 2);
    assert!(events
        .events
        .iter()
        .all(|e| e.r#type == EventType::Delete as i32));
    assert!(matches!(
        etcd.lease_revoke(&LeaseRevokeRequest { id: 77 }).await,
        Err(Error::LeaseNotFound)
    ));
    let put = PutRequest {
        key: "l/a".into(),
        lease: 77,
        ..PutRequest::default()
    };
    assert!(matches!(etcd.put(&put).await, Err(Error::LeaseNotFound)));
    // A revoke of a lease without keys leaves the revision.
    etcd.lease_revoke(&LeaseRevokeRequest { id: short.id })
        .await
        .unwrap();
    assert_eq!(current(etcd).await, 5);
    s.drop_tables().await;
}

/// A lease that is not kept alive ends by the database's clock: from then on it is gone for
/// every call, and a reap (by any process) deletes its keys at one revision.
pub(crate) async fn etcd_lease_expires_by_the_database_clock(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    let lease = grant(etcd, MIN_LEASE_TTL).await;
    let other_lease = grant(etcd, MIN_LEASE_TTL).await;
    let kept = grant(etcd, 60).await;
    put_leased(etcd, "e/1", "v", lease).await; // 2
    put_leased(etcd, "e/2", "v", lease).await; // 3
    put_leased(etcd, "e/3", "v", kept).await; // 4
    put_leased(etcd, "f/1", "v", other_lease).await; // 5
    let granted = etcd.lease_time_to_live(&ttl_of(lease)).await.unwrap();
    assert!(granted.ttl >= 0);
    // Nothing has ended yet: a reap writes nothing.
    let early = etcd.reap(10).await.unwrap();
    assert_eq!((early.leases, early.revision), (0, 5));
    // Wait (by the database's clock) for the end of the lease.
    let now = etcd.store().list().await.unwrap().now;
    until_db_passes(etcd.store(), DbTime(now.0 + MIN_LEASE_TTL * 1_000_000)).await;
    assert_eq!(etcd.lease_keep_alive(lease).await.unwrap().ttl, 0);
    assert_eq!(
        etcd.lease_time_to_live(&ttl_of(lease)).await.unwrap().ttl,
        -1
    );
    assert!(!etcd
        .lease_leases()
        .await
        .unwrap()
        .leases
        .iter()
        .any(|l| l.id == lease));
    let put = PutRequest {
        key: "e/4".into(),
        lease,
        ..PutRequest::default()
    };
    assert!(matches!(etcd.put(&put).await, Err(Error::LeaseNotFound)));
    // Its keys are still there until a reap, by another process here.
    assert!(get(etcd, "e/1").await.is_some());
    let other = s.another().await;
    let reaped = other.reap(10).await.unwrap();
    // Two ended leases: each one's keys at a revision of its own.
    assert_eq!((reaped.leases, reaped.revision), (2, 7));
    assert!(get(etcd, "e/1").await.is_none() && get(etcd, "e/2").await.is_none());
    assert!(get(etcd, "f/1").await.is_none() && get(etcd, "e/3").await.is_some());
    let events = etcd.events(6, b"\0", b"\0", 10).await.unwrap();
    let mut deleted: Vec<(i64, &[u8])> = events
        .events
        .iter()
        .map(|e| {
            let kv = e.kv.as_ref().unwrap();
            (kv.mod_revision, kv.key.as_slice())
        })
        .collect();
    deleted.sort_by_key(|(_, key)| *key);
    assert_eq!(deleted.len(), 3);
    assert_eq!(deleted[0].0, deleted[1].0, "e/1 and e/2 at one revision");
    assert_ne!(deleted[0].0, deleted[2].0, "f/1 at another");
    assert_eq!(etcd.reap(10).await.unwrap().leases, 0);
    other.store().close().await;
    s.drop_tables().await;
}
