//! SQLite's one pooled connection must never be handed out inside a transaction that nobody
//! owns any more. The fault suite's CPU-starvation scenario found this: a campaign cancelled by
//! its timeout left the connection in its transaction (the rollback failed), and every later
//! `BEGIN IMMEDIATE` was refused while that transaction held the write lock for good.

mod common;

use std::sync::Arc;
use std::time::Duration;
use tenure::backend::sqlite::SqliteBackend;
use tenure::backend::Backend;
use tenure::{Effect, Op, Store};

#[tokio::test]
async fn a_connection_left_inside_a_transaction_is_replaced_not_reused() {
    let url = common::sqlite_url();
    let backend = Arc::new(
        SqliteBackend::connect(&url, &common::options())
            .await
            .unwrap(),
    );
    backend.migrate().await.unwrap();
    let store = Store::from_backend(backend.clone(), Duration::from_secs(5));
    let campaign = |who: &str| Op::Campaign {
        candidate: who.to_string(),
        term: None,
        ttl_ms: 60_000,
        metadata: None,
        purpose: tenure::Purpose::Election,
    };

    // Leave the pool's connection inside a write transaction that no `Transaction` owns: the
    // state a failed rollback of a cancelled transaction leaves behind.
    {
        let mut conn = backend.pool().acquire().await.unwrap();
        let tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
        std::mem::forget(tx);
        sqlx::query("UPDATE tenure_schema SET version = version")
            .execute(&mut *conn)
            .await
            .unwrap();
    }

    let applied = store.apply("pool", &campaign("a"), "a").await.unwrap();
    assert!(
        matches!(applied.effect, Effect::Acquired { .. }),
        "{applied:?}"
    );
    // And the write landed for other connections to see (the old transaction was rolled back,
    // not left holding the lock).
    let other = SqliteBackend::connect(&url, &common::options())
        .await
        .unwrap();
    let seen = Store::from_backend(Arc::new(other), Duration::from_secs(5))
        .leader("pool")
        .await
        .unwrap();
    assert_eq!(seen.map(|l| l.holder), Some("a".to_string()));
}

/// Several processes (here stores) opening one new file at once all connect: while one turns
/// it to WAL, another's first connection could find it locked without waiting, and `tenure`
/// failed with "database is locked" (2 of 120 starts of four `tenure status` at once). Fifty
/// new files, eight stores at once on each (without the retry, one run in three of twenty
/// files failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_opening_a_new_file_at_once_all_connect() {
    let dir = tempfile::tempdir().unwrap();
    for round in 0..50 {
        let url = format!(
            "sqlite://{}",
            dir.path().join(format!("{round}.db")).display()
        );
        let opening: Vec<_> = (0..8)
            .map(|_| {
                let url = url.clone();
                tokio::spawn(async move { Store::connect_with(&url, common::options()).await })
            })
            .collect();
        for (i, store) in opening.into_iter().enumerate() {
            if let Err(e) = store.await.unwrap() {
                panic!("round {round}, store {i}: {e}");
            }
        }
    }
}
