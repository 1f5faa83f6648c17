//! How an etcd write meets the database: it judges a lease by the clock read after it took
//! the revision (a put that waited for another writer sees the lease that ended meanwhile as
//! ended), and it signals other processes (on PostgreSQL from the statement of its first
//! change). What it sends is counted by `tests/etcd_write_cost.rs`.

use crate::common::until_db_passes;
use crate::etcd_support::{grant, put_leased, Scoped};
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::FailingBackend;
use tenure::etcd::proto::etcdserverpb::request_op::Request as Op;
use tenure::etcd::proto::etcdserverpb::{DeleteRangeRequest, PutRequest, RequestOp, TxnRequest};
use tenure::etcd::{Error, Etcd, MIN_LEASE_TTL, TOPIC};
use tenure::{BackendKind, DbTime, Store, Topic};
use tokio::sync::broadcast;
use tokio::time::timeout;

/// How long a signal may take to reach another store (a loaded machine included).
const WAKE: Duration = Duration::from_secs(10);

/// The etcd of `s` through a [`FailingBackend`] (unarmed): another process's, whose
/// transactions can be held open.
fn wrapped(s: &Scoped) -> (Arc<FailingBackend>, Etcd) {
    let failing = Arc::new(FailingBackend::new(s.store().backend().clone()));
    let store = Store::from_backend(failing.clone(), Duration::from_secs(30));
    (failing, Etcd::new(store))
}

fn put(key: &str, lease: i64) -> PutRequest {
    PutRequest {
        key: key.into(),
        value: b"v".to_vec(),
        lease,
        ..PutRequest::default()
    }
}

/// A put that waits for the revision while another writer holds it, and whose lease ends
/// (by the database's clock) meanwhile, is refused: its clock is read after the revision's
/// lock, so it never attaches a key to a lease that had ended before it could write.
pub(crate) async fn etcd_a_put_judges_its_lease_after_taking_the_revision(store: Store) {
    let s = Scoped::new(store).await;
    let (failing, held) = wrapped(&s);
    // The clock through a third store (opened first: opening checks the schema, which a held
    // writer would block): the two puts may hold every connection of a pool.
    let clock = s.another().await;
    // The revision's row exists (the first write creates it, and a writer that meets another
    // creating it runs again from the start, clock included).
    put_leased(&s.etcd, "w/zero", "v", 0).await;
    let lease = grant(&s.etcd, MIN_LEASE_TTL).await;
    let granted = s.store().list().await.unwrap().now;
    failing.hold("etcd_put");
    let first = tokio::spawn(async move { held.put(&put("w/first", 0)).await });
    failing.holding().await;
    // The first put holds the revision, uncommitted; the second waits for it.
    let etcd = s.etcd.clone();
    let second = tokio::spawn(async move { etcd.put(&put("w/second", lease)).await });
    until_db_passes(clock.store(), DbTime(granted.0 + MIN_LEASE_TTL * 1_000_000)).await;
    if second.is_finished() {
        panic!(
            "the second put did not wait for the first: {:?}",
            second.await
        );
    }
    failing.let_go();
    first.await.unwrap().expect("the held put commits");
    let refused = second.await.unwrap();
    assert!(
        matches!(refused, Err(Error::LeaseNotFound)),
        "a lease that ended while the put waited: {refused:?}"
    );
    clock.store().close().await;
    s.drop_tables().await;
}

/// Waits (within [`WAKE`]) for the etcd layer's signal among `rx`'s.
async fn signalled(rx: &mut broadcast::Receiver<String>) -> bool {
    let etcd = Topic::Layer(TOPIC).encode();
    timeout(WAKE, async {
        while rx.recv().await.expect("the other store listens") != etcd {}
    })
    .await
    .is_ok()
}

/// Every write of keys signals the other processes of the database where the engine pushes
/// (PostgreSQL's NOTIFY, sent with the write's first change; SQLite's doorbell): a put, a Txn
/// of two puts and a delete of three keys each wake another store's listeners. (MySQL's
/// listeners poll.)
pub(crate) async fn etcd_a_write_signals_other_stores(store: Store) {
    let s = Scoped::new(store).await;
    let other = s.another().await;
    let listening = other.store().backend().subscribe();
    let (Some(mut rx), false) = (listening, s.store().kind() == BackendKind::MySql) else {
        other.store().close().await;
        s.drop_tables().await;
        return;
    };
    // Once the other store hears a write, it listens (it may start listening after it opened).
    let mut primed = false;
    for _ in 0..10 {
        drop(s.etcd.put(&put("s/prime", 0)).await.unwrap());
        if signalled(&mut rx).await {
            primed = true;
            break;
        }
    }
    assert!(primed, "the other store never heard a write");
    while rx.try_recv().is_ok() {}
    let op = |key: &str| RequestOp {
        request: Some(Op::RequestPut(put(key, 0))),
    };
    drop(s.etcd.put(&put("s/a", 0)).await.unwrap());
    assert!(signalled(&mut rx).await, "a put signalled the other store");
    let txn = TxnRequest {
        success: vec![op("s/b"), op("s/c")],
        ..TxnRequest::default()
    };
    assert!(s.etcd.txn(&txn).await.unwrap().succeeded);
    assert!(signalled(&mut rx).await, "a txn signalled the other store");
    let range = DeleteRangeRequest {
        key: "s/a".into(),
        range_end: "s/d".into(),
        ..DeleteRangeRequest::default()
    };
    assert_eq!(s.etcd.delete_range(&range).await.unwrap().deleted, 3);
    assert!(
        signalled(&mut rx).await,
        "a delete signalled the other store"
    );
    other.store().close().await;
    s.drop_tables().await;
}
