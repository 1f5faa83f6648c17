//! `Store::close` closes every connection of the store and returns: on PostgreSQL that
//! includes the connection its LISTEN task holds (taken from the store's own pool) and the
//! one that holds its waiting mark. A pool waits at close for every connection it lent out;
//! the LISTEN task kept its connection forever, so `close` never returned whenever no
//! connection of the pool was idle at that moment (one closed as stale after a failover's
//! discard, say): a process hung at its last step.

mod common;

use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::FailingBackend;
use tenure::etcd::proto::etcdserverpb::PutRequest;
use tenure::etcd::Etcd;
use tenure::{BackendKind, Store};
use tokio::time::{timeout, Instant};

/// Generous bounds for a loaded machine.
const WITHIN: Duration = Duration::from_secs(30);

/// The backend pid of the session that LISTENs on `prefix`'s channel, if one does.
async fn listening(admin: &PgPool, prefix: &str) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
         AND query LIKE 'LISTEN %' AND query LIKE '%' || $1 || 'lease%'",
    )
    .bind(prefix)
    .fetch_optional(admin)
    .await
    .unwrap()
}

/// Waits until `done` says so, within [`WITHIN`].
async fn until<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let bound = Instant::now() + WITHIN;
    while !done().await {
        assert!(Instant::now() < bound, "{what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A store of one connection (and its listener's) whose only regular connection is closed
/// as stale on its way back to the pool: the listener then holds the pool's only
/// connection, and `close` must still return, leaving no session of the store behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_close_returns_while_the_listener_holds_the_only_connection() {
    let url = common::postgres_url();
    let prefix = format!("cl{}_", common::unique("").replace('-', "").to_lowercase());
    let mut options = common::options().table_prefix(prefix.clone());
    options.max_connections = 1;
    let Some(store) = common::connect(BackendKind::Postgres, &url, options).await else {
        return;
    };
    let admin = PgPool::connect(&url).await.expect("admin pool");
    let failing = Arc::new(FailingBackend::new(store.backend().clone()));
    let etcd = Etcd::new(Store::from_backend(failing.clone(), WITHIN));
    // A subscriber: the store takes its waiting mark.
    let _changes = store
        .backend()
        .subscribe()
        .expect("PostgreSQL pushes changes");
    until("the store took its mark", || async {
        common::pg_marks_held(&admin, &prefix).await > 0
    })
    .await;
    let first = timeout(WITHIN, async {
        loop {
            if let Some(pid) = listening(&admin, &prefix).await {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the store LISTENs");

    // A put holds the pool's one regular connection; meanwhile every open connection is
    // marked stale (as after a timeout: a failover may have happened).
    failing.hold("etcd_put");
    let put = {
        let etcd = etcd.clone();
        tokio::spawn(async move {
            etcd.put(&PutRequest {
                key: b"k".to_vec(),
                value: b"v".to_vec(),
                ..PutRequest::default()
            })
            .await
        })
    };
    timeout(WITHIN, failing.holding())
        .await
        .expect("the put is held");
    store.backend().discard_connections();
    // The listener LISTENs again on a fresh connection of the pool.
    until("the listener took a fresh connection", || async {
        listening(&admin, &prefix)
            .await
            .is_some_and(|pid| pid != first)
    })
    .await;
    failing.let_go();
    timeout(WITHIN, put)
        .await
        .expect("the put answers")
        .unwrap()
        .expect("the put commits");

    timeout(WITHIN, store.close())
        .await
        .expect("close returns while the listener holds a connection");
    until("no session of the store LISTENs", || async {
        listening(&admin, &prefix).await.is_none()
    })
    .await;
    until("the mark was let go", || async {
        common::pg_marks_held(&admin, &prefix).await == 0
    })
    .await;
    common::drop_prefixed(BackendKind::Postgres, &url, &prefix)
        .await
        .unwrap();
}
