//! etcd's Lock and Election recipes on one backend, under contention and across processes:
//! one holder at a time, the next woken when the holder unlocks or its lease ends, a waiter
//! that gives up leaves no key, an election observed as it changes hands.

use crate::etcd_support::{get, grant, Scoped};
use std::time::Duration;
use tenure::etcd::proto::etcdserverpb::{LeaseRevokeRequest, RangeRequest};
use tenure::etcd::proto::v3electionpb::{
    CampaignRequest, LeaderKey, LeaderRequest, ProclaimRequest, ResignRequest,
};
use tenure::etcd::proto::v3lockpb::{LockRequest, UnlockRequest};
use tenure::etcd::{Error, MIN_LEASE_TTL};
use tenure::Store;
use tokio::time::timeout;

/// A bound for a wake-up that should come within a poll interval (100 ms here) and a few
/// round trips, generous for a loaded machine.
const WAKE: Duration = Duration::from_secs(10);

fn lock(name: &str, lease: i64) -> LockRequest {
    LockRequest {
        name: name.into(),
        lease,
    }
}

async fn keys_under(etcd: &tenure::etcd::Etcd, prefix: &str) -> usize {
    let end = format!("{}0", prefix.trim_end_matches('/'));
    let found = etcd
        .range(&RangeRequest {
            key: prefix.into(),
            range_end: end.into(),
            count_only: true,
            ..RangeRequest::default()
        })
        .await
        .unwrap();
    usize::try_from(found.count).unwrap()
}

/// Two lockers in two processes: the first wins at once, the second waits until the first
/// unlocks, and its key's create revision (its fencing token) is the higher.
pub(crate) async fn etcd_lock_one_holder_and_the_next_on_unlock(store: Store) {
    let s = Scoped::new(store).await;
    let (a, b) = (s.etcd.clone(), s.another().await);
    let (la, lb) = (grant(&a, 60).await, grant(&b, 60).await);
    let held = a.lock(&lock("job", la)).await.unwrap();
    assert_eq!(held.key, format!("job/{la:x}").into_bytes());
    let a_rev = get(&a, &String::from_utf8(held.key.clone()).unwrap())
        .await
        .unwrap()
        .create_revision;
    assert_eq!(held.header.as_ref().unwrap().revision, a_rev);
    let waiting = {
        let b = b.clone();
        tokio::spawn(async move { b.lock(&lock("job", lb)).await })
    };
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!waiting.is_finished(), "the second locker waits");
    // Locking again with the same lease is the same lock (etcd's re-entry by lease).
    assert_eq!(a.lock(&lock("job", la)).await.unwrap().key, held.key);
    a.unlock(&UnlockRequest {
        key: held.key.clone(),
    })
    .await
    .unwrap();
    let next = timeout(WAKE, waiting)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    assert_eq!(next.key, format!("job/{lb:x}").into_bytes());
    let b_rev = get(&b, &String::from_utf8(next.key).unwrap())
        .await
        .unwrap()
        .create_revision;
    assert!(b_rev > a_rev);
    b.store().close().await;
    s.drop_tables().await;
}

/// A holder whose lease is not kept alive loses the lock when the lease ends by the
/// database's clock: the waiter (another process) reaps it and takes the lock.
pub(crate) async fn etcd_lock_holder_lease_end_wakes_the_next(store: Store) {
    let s = Scoped::new(store).await;
    let (a, b) = (s.etcd.clone(), s.another().await);
    let (la, lb) = (grant(&a, MIN_LEASE_TTL).await, grant(&b, 60).await);
    a.lock(&lock("cron", la)).await.unwrap();
    let started = tokio::time::Instant::now();
    let next = timeout(WAKE + Duration::from_secs(2), b.lock(&lock("cron", lb)))
        .await
        .expect("the next holder is let in")
        .unwrap();
    assert_eq!(next.key, format!("cron/{lb:x}").into_bytes());
    assert!(
        started.elapsed() >= Duration::from_millis(500),
        "not before the lease ended"
    );
    assert_eq!(keys_under(&a, "cron/").await, 1);
    b.store().close().await;
    s.drop_tables().await;
}

/// A waiter that gives up (its future dropped) deletes its key, so it holds up nobody; a
/// waiter whose lease is revoked gets etcd's "session is expired".
pub(crate) async fn etcd_lock_waiter_that_gives_up_leaves_no_key(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    let (la, lb, lc) = (
        grant(etcd, 60).await,
        grant(etcd, 60).await,
        grant(etcd, 60).await,
    );
    let held = etcd.lock(&lock("gate", la)).await.unwrap();
    let gave_up = timeout(Duration::from_millis(500), etcd.lock(&lock("gate", lb))).await;
    assert!(gave_up.is_err(), "it waited");
    let bound = tokio::time::Instant::now() + WAKE;
    while keys_under(etcd, "gate/").await != 1 {
        assert!(
            tokio::time::Instant::now() < bound,
            "the abandoned key was not deleted"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let waiting = {
        let etcd = etcd.clone();
        tokio::spawn(async move { etcd.lock(&lock("gate", lc)).await })
    };
    let bound = tokio::time::Instant::now() + WAKE;
    while keys_under(etcd, "gate/").await != 2 {
        assert!(
            tokio::time::Instant::now() < bound,
            "the third waiter put no key"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    etcd.lease_revoke(&LeaseRevokeRequest { id: lc })
        .await
        .unwrap();
    // The holder goes too: the waiter finds its own key gone.
    etcd.unlock(&UnlockRequest { key: held.key }).await.unwrap();
    let expired = timeout(WAKE, waiting).await.expect("it returns").unwrap();
    assert!(matches!(expired, Err(Error::SessionExpired)), "{expired:?}");
    s.drop_tables().await;
}

/// An election: the first campaigner leads, the second waits; an observer sees the leader,
/// its proclaimed value and the next leader after a resign; a stale leader key can neither
/// proclaim nor lead.
pub(crate) async fn etcd_election_campaign_observe_and_resign(store: Store) {
    let s = Scoped::new(store).await;
    let (a, b) = (s.etcd.clone(), s.another().await);
    let (la, lb) = (grant(&a, 60).await, grant(&b, 60).await);
    let who = LeaderRequest { name: "db".into() };
    assert!(matches!(a.leader(&who).await, Err(Error::NoLeader)));
    let mut observer = b.observe(&who);
    let campaign = |lease: i64, value: &str| CampaignRequest {
        name: "db".into(),
        lease,
        value: value.into(),
    };
    let first = a.campaign(&campaign(la, "10.0.0.1")).await.unwrap();
    let leader = first.leader.clone().unwrap();
    assert_eq!(leader.key, format!("db/{la:x}").into_bytes());
    let seen = timeout(WAKE, observer.next())
        .await
        .expect("observed")
        .unwrap();
    assert_eq!(seen.kv.unwrap().value, b"10.0.0.1");
    let second = {
        let b = b.clone();
        tokio::spawn(async move { b.campaign(&campaign(lb, "10.0.0.2")).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!second.is_finished(), "the second campaigner waits");
    a.proclaim(&ProclaimRequest {
        leader: Some(leader.clone()),
        value: "10.0.0.1:5432".into(),
    })
    .await
    .unwrap();
    let seen = timeout(WAKE, observer.next())
        .await
        .expect("observed")
        .unwrap();
    assert_eq!(seen.kv.unwrap().value, b"10.0.0.1:5432");
    assert_eq!(
        a.leader(&who).await.unwrap().kv.unwrap().value,
        b"10.0.0.1:5432"
    );
    a.resign(&ResignRequest {
        leader: Some(leader.clone()),
    })
    .await
    .unwrap();
    let next = timeout(WAKE, second)
        .await
        .expect("the next leads")
        .unwrap()
        .unwrap();
    assert_eq!(next.leader.unwrap().key, format!("db/{lb:x}").into_bytes());
    let seen = timeout(WAKE, observer.next())
        .await
        .expect("observed")
        .unwrap();
    assert_eq!(seen.kv.unwrap().value, b"10.0.0.2");
    let stale = ProclaimRequest {
        leader: Some(LeaderKey { ..leader }),
        value: "x".into(),
    };
    assert!(matches!(a.proclaim(&stale).await, Err(Error::NotLeader)));
    assert!(matches!(
        a.proclaim(&ProclaimRequest {
            leader: None,
            value: vec![]
        })
        .await,
        Err(Error::MissingLeaderKey)
    ));
    b.store().close().await;
    s.drop_tables().await;
}

/// A write through a store signals that store's own listeners at once on every backend that
/// signals at all (its watch hub, its recipes' waiters): MySQL's named locks carry only leases
/// across processes, so there the store echoes its own commits (other processes poll).
pub(crate) async fn etcd_write_signals_its_own_store(store: Store) {
    let s = Scoped::new(store).await;
    if s.store().backend().subscribe().is_none() {
        return; // no change signals here (a pooler without a notify URL, Galera): all poll
    }
    let mut changes = s.store().changes();
    crate::etcd_support::put(&s.etcd, "signalled", "v").await;
    timeout(
        WAKE,
        changes.changed(|t| t == tenure::Topic::Layer(tenure::etcd::TOPIC)),
    )
    .await
    .expect("the write signalled its own store");
    s.drop_tables().await;
}
