//! `fence` inside the caller's own transaction. The transaction types differ per engine, so
//! this is a macro instantiated once per backend.

macro_rules! fence_tests {
    ($module:ident, $backend:ty, $db:ty, $kind:expr) => {
        mod $module {
            use crate::common;
            use crate::ops::campaign;
            use std::sync::Arc;
            use std::time::Duration;
            use tenure::{Backend, Effect, Error, Store};

            async fn setup() -> Option<(Arc<$backend>, Store, String)> {
                // Same rule as the rest of the suite: skip locally, fail under CI.
                common::store($kind).await?;
                let url = common::url_for($kind);
                let backend =
                    Arc::new(<$backend>::connect(&url, &common::options()).await.unwrap());
                backend.migrate().await.unwrap();
                let store = Store::from_backend(backend.clone(), Duration::from_secs(30));
                let table = common::unique("app").replace('-', "_");
                sqlx::query(&format!("CREATE TABLE {table} (v VARCHAR(40) NOT NULL)"))
                    .execute(backend.pool())
                    .await
                    .unwrap();
                Some((backend, store, table))
            }

            async fn rows(backend: &$backend, table: &str) -> i64 {
                sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
                    .fetch_one(backend.pool())
                    .await
                    .unwrap()
            }

            async fn insert(tx: &mut sqlx::Transaction<'_, $db>, table: &str, v: &str) {
                sqlx::query(&format!("INSERT INTO {table} (v) VALUES ('{v}')"))
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
