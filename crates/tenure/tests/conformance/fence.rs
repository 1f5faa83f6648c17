//! `fence` inside the caller's own transaction. The transaction types differ per engine, so
//! this is a macro instantiated once per backend.

macro_rules! fence_tests {
    ($module:ident, $backend:ty, $db:ty, $kind:expr) => {
        mod $module {
            use crate::common;
            use crate::ops::campaign;
            use std::sync::Arc;
            use std::time::Duration;
            use tenure::{Effect, Error, Store};

            async fn setup() -> Option<(Arc<$backend>, Store, String)> {
                // Same rule as the rest of the suite: skip locally, fail under CI.
                common::store($kind).await?;
                let url = common::url_for($kind);
                let backend =
                    Arc::new(<$backend>::connect(&url, &common::options()).await.unwrap());
                let store = Store::from_backend(backend.clone(), Duration::from_secs(30));
                // The lease's tables and the features' (the registry electors campaign in).
                store.migrate().await.unwrap();
                let table = common::unique("app").replace('-', "_");
                // The application's own statements are written as an application behind a
                // transaction-mode pooler must write them: unnamed, and in a transaction.
                let mut tx = backend.pool().begin().await.unwrap();
                sqlx::query(&format!("CREATE TABLE {table} (v VARCHAR(40) NOT NULL)"))
                    .persistent(false)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                Some((backend, store, table))
            }

            async fn rows(backend: &$backend, table: &str) -> i64 {
                let mut tx = backend.pool().begin().await.unwrap();
                let count = sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
                    .persistent(false)
                    .fetch_one(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                count
            }

            async fn insert(tx: &mut sqlx::Transaction<'_, $db>, table: &str, v: &str) {
                sqlx::query(&format!("INSERT INTO {table} (v) VALUES ('{v}')"))
                    .persistent(false)
                    .execute(&mut **tx)
                    .await
                    .unwrap();
            }

            /// P2: a write fenced with a stale term fails and leaves no trace.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn stale_fenced_write_fails_and_leaves_no_trace() {
                let Some((backend, store, table)) = setup().await else {
                    return;
                };
                let name = common::unique("fence");
                campaign(&store, &name, "a", 60_000).await;
                store.release(&name, "a", 1, Duration::ZERO).await.unwrap();
                assert_eq!(
                    campaign(&store, &name, "b", 60_000)
                        .await
                        .lease
                        .unwrap()
                        .term,
                    2
                );

                let mut tx = backend.pool().begin().await.unwrap();
                insert(&mut tx, &table, "stale").await;
                let err = backend.fence(&mut tx, &name, "a", 1).await.unwrap_err();
                assert!(matches!(err, Error::LeaseLost { term: 1, .. }), "{err}");
                tx.rollback().await.unwrap();
                assert_eq!(rows(&backend, &table).await, 0);

                // The same holder name with the current term passes; another term does not.
                let mut tx = backend.pool().begin().await.unwrap();
                assert!(backend.fence(&mut tx, &name, "b", 1).await.is_err());
                tx.rollback().await.unwrap();
                let mut tx = backend.pool().begin().await.unwrap();
                backend.fence(&mut tx, &name, "b", 2).await.unwrap();
                insert(&mut tx, &table, "current").await;
                tx.commit().await.unwrap();
                assert_eq!(rows(&backend, &table).await, 1);
            }

            /// P2 from the guard: a leader's fenced write lands; after a forced takeover the
            /// same guard's fence fails and its write leaves no trace.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn leader_guard_fences_only_its_own_tenure() {
                let Some((backend, store, table)) = setup().await else {
                    return;
                };
                let name = common::unique("guardfence");
                let timing = tenure::Timing::from_ttl(Duration::from_secs(30)).unwrap();
                let elector = tenure::Elector::builder(store.clone(), &name)
                    .candidate("a")
                    .timing(timing)
                    .spawn()
                    .unwrap();
                let guard = tokio::time::timeout(
                    Duration::from_secs(20),
                    elector.wait_until_leader(),
                )
                .await
                .expect("leads")
                .unwrap();
                let mut tx = backend.pool().begin().await.unwrap();
                insert(&mut tx, &table, "leader").await;
                guard.fence(&mut *tx).await.unwrap();
                tx.commit().await.unwrap();
                assert_eq!(rows(&backend, &table).await, 1);

                store.handover(&name, "b", true, "test").await.unwrap();
                let mut tx = backend.pool().begin().await.unwrap();
                insert(&mut tx, &table, "stale").await;
                let err = guard.fence(&mut *tx).await.unwrap_err();
                assert!(
                    matches!(&err, Error::LeaseLost { term, .. } if *term == guard.term()),
                    "{err}"
                );
                tx.rollback().await.unwrap();
                assert_eq!(rows(&backend, &table).await, 1);
                drop(guard);
                elector.shutdown().await;
            }

            /// The lock guard's fence is decided by the database, not only by the guard's own
            /// belief: after a forced takeover that the guard has not learned of yet (its
            /// keep-alive is seconds away), the fence fails.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lock_guard_fence_is_decided_in_the_database() {
                let Some((backend, store, table)) = setup().await else {
                    return;
                };
                let name = common::unique("lockfence");
                let locks = tenure::Locks::with_holder(store.clone(), "a").unwrap();
                let options = tenure::LockOptions::default().ttl(Duration::from_secs(60));
                let guard = locks.try_lock(&name, options).await.unwrap().expect("free");
                let mut tx = backend.pool().begin().await.unwrap();
                guard.fence(&mut *tx).await.unwrap();
                insert(&mut tx, &table, "holder").await;
                tx.commit().await.unwrap();

                store.handover(&name, "b", true, "test").await.unwrap();
                assert!(!guard.is_lost(), "the guard has not learned of the takeover yet");
                let mut tx = backend.pool().begin().await.unwrap();
                insert(&mut tx, &table, "stale").await;
                let err = guard.fence(&mut *tx).await.unwrap_err();
                assert!(matches!(err, Error::LeaseLost { .. }), "{err}");
                tx.rollback().await.unwrap();
                assert_eq!(rows(&backend, &table).await, 1);
            }

            /// The store's fence statement is the one the backend runs, and its three
            /// parameters work as documented from a plain query (what `TENURE_FENCE_SQL`
            /// gives programs in other languages).
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fence_sql_returns_one_row_only_for_the_live_tenure() {
                let Some((backend, store, _table)) = setup().await else {
                    return;
                };
                let name = common::unique("fencesql");
                campaign(&store, &name, "a", 60_000).await;
                let sql = store.fence_sql().expect("an SQL store has a fence").to_string();
                assert_eq!(
                    sql,
                    tenure::backend::fence_sql(
                        common::Target::from($kind).kind(),
                        &common::options().table_prefix
                    ).unwrap()
                );
                for (holder, term, expected) in [("a", 1_i64, 1usize), ("a", 2, 0), ("b", 1, 0)] {
                    let mut tx = backend.pool().begin().await.unwrap();
                    let found = sqlx::query(&sql)
                        .persistent(false)
                        .bind(&name)
                        .bind(holder)
                        .bind(term)
                        .fetch_all(&mut *tx)
                        .await
                        .unwrap()
                        .len();
                    tx.rollback().await.unwrap();
                    assert_eq!(found, expected, "{holder} term {term}");
                }
            }

            /// P2: a takeover waits for the current holder's open fenced transaction, so the
            /// holder's writes land before the new tenure begins, even past the expiry.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn takeover_waits_for_open_fenced_transaction() {
                let Some((backend, store, table)) = setup().await else {
                    return;
                };
                let name = common::unique("fencewait");
                campaign(&store, &name, "a", 300).await;
                let mut tx = backend.pool().begin().await.unwrap();
                backend.fence(&mut tx, &name, "a", 1).await.unwrap();
                insert(&mut tx, &table, "by a").await;
                tokio::time::sleep(Duration::from_millis(400)).await;

                let takeover = {
                    let store = store.clone();
                    let name = name.clone();
                    tokio::spawn(async move { campaign(&store, &name, "b", 60_000).await })
                };
                tokio::time::sleep(Duration::from_millis(700)).await;
                assert!(
                    !takeover.is_finished(),
                    "the takeover must wait for the fenced transaction"
                );
                tx.commit().await.unwrap();
                let b = takeover.await.unwrap();
                assert_eq!(
                    b.effect,
                    Effect::Acquired {
                        took_over_from: Some("a".into())
                    }
                );
                assert_eq!(b.lease.unwrap().term, 2);
                assert_eq!(rows(&backend, &table).await, 1);

                // And now a's fence fails.
                let mut tx = backend.pool().begin().await.unwrap();
                assert!(backend.fence(&mut tx, &name, "a", 1).await.is_err());
                tx.rollback().await.unwrap();
            }
        }
    };
}

pub(crate) use fence_tests;

/// A guard never fences a transaction it cannot check: on another kind of database, or with a
/// store that has no SQL lease table, it says so; in another database of the same kind (here,
/// another SQLite file) the statement finds no lease table or no row, never a pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_refuses_what_it_cannot_check() {
    use std::time::Duration;
    use tenure::{Error, LockOptions, Locks, Store};
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("leases.db").display());
    let store = Store::connect(&url).await.unwrap();
    let locks = Locks::with_holder(store, "a").unwrap();
    let guard = locks
        .try_lock("job", LockOptions::default().ttl(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("free");

    // Another SQLite file: no lease table there.
    let other = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("other.db").display()
    );
    let pool = sqlx::SqlitePool::connect(&other).await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    let err = guard.fence(&mut *tx).await.unwrap_err();
    assert!(matches!(err, Error::Database(_)), "{err}");
    tx.rollback().await.unwrap();

    // Another kind of database.
    if crate::common::store(tenure::BackendKind::Postgres)
        .await
        .is_some()
    {
        let url = crate::common::url_for(tenure::BackendKind::Postgres);
        let pool = sqlx::PgPool::connect(&url).await.unwrap();
        let mut tx = pool.begin().await.unwrap();
        let err = guard.fence(&mut *tx).await.unwrap_err();
        assert!(
            matches!(&err, Error::CannotFence { reason } if reason.contains("sqlite")),
            "{err}"
        );
        tx.rollback().await.unwrap();
    }

    // A store without an SQL lease table (an in-memory test backend).
    let memory = Store::from_backend(
        std::sync::Arc::new(crate::common::memory::MemoryBackend::new(false)),
        Duration::from_secs(5),
    );
    assert_eq!(memory.fence_sql(), None);
    let locks = Locks::with_holder(memory, "a").unwrap();
    let guard = locks
        .try_lock("job", LockOptions::default())
        .await
        .unwrap()
        .expect("free");
    let mut tx = pool.begin().await.unwrap();
    let err = guard.fence(&mut *tx).await.unwrap_err();
    assert!(matches!(err, Error::CannotFence { .. }), "{err}");
}
