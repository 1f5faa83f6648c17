//! The etcd lock's fence inside the application's own transaction, as tenure's own fence is
//! tested (`fence.rs`): one row while the lock key exists as it was when the lock was taken,
//! none after (a new lock with the same key included), and a delete of the key (an unlock, a revoke, an expiry's reap) waits for the fenced
//! transaction. The transaction types differ per engine, so this is a macro instantiated once
//! per backend.

macro_rules! etcd_fence_tests {
    ($module:ident, $db:ty, $kind:expr) => {
        mod $module {
            use crate::common;
            use crate::etcd_support::{grant, Scoped};
            use std::time::Duration;
            use tenure::etcd::proto::v3lockpb::{LockRequest, UnlockRequest};

            async fn setup() -> Option<(Scoped, sqlx::Pool<$db>, String)> {
                let store = common::store($kind).await?;
                let s = Scoped::new(store).await;
                let url = s.url.replace("?pooler=transaction", "");
                let pool = sqlx::Pool::<$db>::connect(&url).await.unwrap();
                let table = format!("{}app", s.prefix);
                let mut tx = pool.begin().await.unwrap();
                sqlx::query(&format!("CREATE TABLE {table} (v VARCHAR(40) NOT NULL)"))
                    .persistent(false)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                Some((s, pool, table))
            }

            async fn fenced(
                tx: &mut sqlx::Transaction<'_, $db>,
                sql: &str,
                key: &[u8],
                rev: i64,
            ) -> usize {
                sqlx::query(sql)
                    .persistent(false)
                    .bind(key)
                    .bind(rev)
                    .fetch_all(&mut **tx)
                    .await
                    .unwrap()
                    .len()
            }

            /// One row while the lock is that one (from its create revision on), none after it
            /// is gone, nor for the same key locked again; the statement is the one
            /// `tenure::etcd::fence_sql` prints.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn etcd_fence_holds_only_the_live_lock() {
                let Some((s, pool, _table)) = setup().await else {
                    return;
                };
                let etcd = &s.etcd;
                let sql = etcd.fence_sql().await.unwrap();
                let kind = common::Target::from($kind).kind();
                assert_eq!(sql, tenure::etcd::fence_sql(kind, &s.prefix).unwrap());
                let lease = grant(etcd, 60).await;
                let held = etcd
                    .lock(&LockRequest {
                        name: "job".into(),
                        lease,
                    })
                    .await
                    .unwrap();
                let rev = held.header.unwrap().revision;
                crate::etcd_support::put(etcd, "unrelated", "v").await;
                for (key, rev, rows) in [
                    (&held.key, rev, 1),
                    (&held.key, rev + 1, 1),
                    (&held.key, rev - 1, 0),
                    (&b"job/0".to_vec(), rev, 0),
                ] {
                    let mut tx = pool.begin().await.unwrap();
                    assert_eq!(fenced(&mut tx, &sql, key, rev).await, rows);
                    tx.rollback().await.unwrap();
                }
                etcd.unlock(&UnlockRequest {
                    key: held.key.clone(),
                })
                .await
                .unwrap();
                let mut tx = pool.begin().await.unwrap();
                assert_eq!(fenced(&mut tx, &sql, &held.key, rev).await, 0, "unlocked");
                tx.rollback().await.unwrap();
                // Locked again with the same lease: the same key, a new tenure.
                let again = etcd
                    .lock(&LockRequest {
                        name: "job".into(),
                        lease,
                    })
                    .await
                    .unwrap();
                assert_eq!(again.key, held.key);
                let mut tx = pool.begin().await.unwrap();
                assert_eq!(
                    fenced(&mut tx, &sql, &held.key, rev + 1).await,
                    0,
                    "a new tenure"
                );
                let new_rev = again.header.unwrap().revision;
                assert_eq!(fenced(&mut tx, &sql, &held.key, new_rev).await, 1);
                tx.rollback().await.unwrap();
                pool.close().await;
                s.drop_tables().await;
            }

            /// An unlock (from another process) waits for the holder's open fenced
            /// transaction, so the holder's writes land before the lock changes hands.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn etcd_fence_makes_a_takeover_wait() {
                let Some((s, pool, table)) = setup().await else {
                    return;
                };
                let etcd = &s.etcd;
                let sql = etcd.fence_sql().await.unwrap();
                let lease = grant(etcd, 60).await;
                let held = etcd
                    .lock(&LockRequest {
                        name: "job".into(),
                        lease,
                    })
                    .await
                    .unwrap();
                let rev = held.header.unwrap().revision;
                // Another process (connected first: SQLite's file is locked once fenced).
                let other = s.another().await;
                let mut tx = pool.begin().await.unwrap();
                assert_eq!(fenced(&mut tx, &sql, &held.key, rev).await, 1);
                sqlx::query(&format!("INSERT INTO {table} (v) VALUES ('by the holder')"))
                    .persistent(false)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                let takeover = {
                    let key = held.key.clone();
                    tokio::spawn(async move { other.unlock(&UnlockRequest { key }).await })
                };
                tokio::time::sleep(Duration::from_millis(700)).await;
                assert!(
                    !takeover.is_finished(),
                    "the unlock waits for the fenced transaction"
                );
                tx.commit().await.unwrap();
                tokio::time::timeout(Duration::from_secs(10), takeover)
                    .await
                    .expect("the unlock goes on after the commit")
                    .unwrap()
                    .unwrap();
                let mut tx = pool.begin().await.unwrap();
                assert_eq!(fenced(&mut tx, &sql, &held.key, rev).await, 0);
                tx.rollback().await.unwrap();
                pool.close().await;
                s.drop_tables().await;
            }
        }
    };
}

pub(crate) use etcd_fence_tests;
