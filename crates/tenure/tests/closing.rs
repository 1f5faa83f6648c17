//! `Store::close` closes every connection of the store and returns: on PostgreSQL that
//! includes the connection its LISTEN task holds (taken from the store's own pool) and the
//! one that holds its waiting mark; on MariaDB/MySQL the one that holds its doorbells. A pool waits at close for every connection it lent out;
//! the LISTEN task kept its connection forever, so `close` never returned whenever no
//! connection of the pool was idle at that moment (one closed as stale after a failover's
//! discard, say): a process hung at its last step.

mod common;

use sqlx::{MySqlPool, PgPool};
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::FailingBackend;
use tenure::etcd::proto::etcdserverpb::PutRequest;
use tenure::etcd::Etcd;
use tenure::{BackendKind, LockOptions, Locks, Store};
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

/// MariaDB/MySQL: the doorbell of `name` (a named lock), as `mysql/bell.rs` names it.
fn bell(database: &str, prefix: &str, name: &str) -> String {
    let bytes = database.bytes().chain([0]).chain(name.bytes());
    let hash = bytes.fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("t:{prefix}:{hash:016x}")
}

/// Whether a session holds the named lock `bell`.
async fn rung_by_someone(admin: &MySqlPool, bell: &str) -> bool {
    let holder: Option<i64> = sqlx::query_scalar("SELECT IS_USED_LOCK(?)")
        .bind(bell)
        .fetch_one(admin)
        .await
        .unwrap();
    holder.is_some()
}

/// A process that listens and leads holds the lease's doorbell on a connection of its own;
/// closing the store closes that connection too, which gives the doorbell back (before, the
/// connection lived on with the backend, the bell held, after `close` returned).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_close_gives_the_doorbells_back() {
    let url = common::mysql_url();
    let prefix = format!("cl{}_", common::unique("").replace('-', "").to_lowercase());
    let options = common::options().table_prefix(prefix.clone());
    let Some(store) = common::connect(BackendKind::MySql, &url, options).await else {
        return;
    };
    let admin = MySqlPool::connect(&url).await.expect("admin pool");
    let database: String = sqlx::query_scalar("SELECT DATABASE()")
        .fetch_one(&admin)
        .await
        .unwrap();
    // A subscriber: the store rings and holds doorbells.
    let _changes = store.backend().subscribe().expect("MySQL has doorbells");
    let locks = Locks::with_holder(store.clone(), "a").unwrap();
    let name = common::unique("bell");
    let guard = locks
        .try_lock(&name, LockOptions::default())
        .await
        .unwrap()
        .expect("free");
    let bell = bell(&database, &prefix, &name);
    until("the leader holds its doorbell", || async {
        rung_by_someone(&admin, &bell).await
    })
    .await;

    timeout(WITHIN, store.close()).await.expect("close returns");
    until("the doorbell was given back", || async {
        !rung_by_someone(&admin, &bell).await
    })
    .await;
    drop(guard);
    common::drop_prefixed(BackendKind::MySql, &url, &prefix)
        .await
        .unwrap();
}
