//! PostgreSQL's waiting marks (`backend/postgres/marks.rs`): a lock's release sends its NOTIFY
//! only where some process listens — a store with subscribers holds a shared advisory lock as
//! its mark — so that lock cycles nobody waits for do not serialize on PostgreSQL's notify
//! lock. Each test has a table prefix (and so a channel and a mark) of its own.

mod common;

use sqlx::postgres::PgListener;
use std::time::Duration;
use tenure::{BackendKind, LockOptions, Locks, Store};
use tokio::sync::broadcast;
use tokio::time::{timeout, Instant};

/// A store on its own tables, the prefix, and an admin pool to watch them.
async fn scoped_store() -> Option<(Store, String, sqlx::PgPool)> {
    let url = common::postgres_url();
    let prefix = format!(
        "wm_{}_",
        common::unique("t").replace('-', "_").to_lowercase()
    );
    let store = common::connect(
        BackendKind::Postgres,
        &url,
        common::options().table_prefix(prefix.clone()),
    )
    .await?;
    let admin = sqlx::PgPool::connect(&url).await.expect("admin pool");
    Some((store, prefix, admin))
}

async fn drop_tables(prefix: &str) {
    common::drop_prefixed(BackendKind::Postgres, &common::postgres_url(), prefix)
        .await
        .unwrap();
}

/// A plain LISTEN on the store's channel: it sees every NOTIFY and holds no mark.
async fn raw_listener(prefix: &str) -> PgListener {
    let mut listener = PgListener::connect(&common::postgres_url()).await.unwrap();
    listener.listen(&format!("{prefix}lease")).await.unwrap();
    listener
}

/// The NOTIFY payloads for `name` that arrive within `within`.
async fn heard(listener: &mut PgListener, name: &str, within: Duration) -> usize {
    let until = Instant::now() + within;
    let mut seen = 0;
    while let Ok(Ok(note)) = tokio::time::timeout_at(until, listener.recv()).await {
        seen += usize::from(note.payload() == name);
    }
    seen
}

/// A wake-up for any name, which a subscription gets each time the mark is granted.
async fn woken_for_any(rx: &mut broadcast::Receiver<String>, within: Duration) {
    let any = timeout(within, async {
        loop {
            if rx.recv().await.unwrap() == "\0" {
                return;
            }
        }
    })
    .await;
    assert!(any.is_ok(), "the mark's holder wakes its subscribers");
}

async fn cycle(locks: &Locks, name: &str) {
    let guard = locks
        .try_lock(name, LockOptions::default())
        .await
        .unwrap()
        .expect("free");
    guard.release().await.unwrap();
}

/// Nobody listening: a lock's cycle sends no NOTIFY. A subscriber in the process: it does.
#[tokio::test]
async fn a_release_notifies_only_while_someone_listens() {
    let Some((store, prefix, admin)) = scoped_store().await else {
        return;
    };
    let mut listener = raw_listener(&prefix).await;
    let locks = Locks::with_holder(store.clone(), "a").unwrap();
    let name = common::unique("quiet");
    cycle(&locks, &name).await;
    assert_eq!(
        heard(&mut listener, &name, Duration::from_millis(500)).await,
        0,
        "no mark: the release is not announced"
    );
    assert_eq!(common::pg_marks_held(&admin, &prefix).await, 0);

    let mut rx = store.backend().subscribe().expect("PostgreSQL listens");
    woken_for_any(&mut rx, Duration::from_secs(5)).await;
    assert_eq!(
        common::pg_marks_held(&admin, &prefix).await,
        1,
        "one mark per process"
    );
    cycle(&locks, &name).await;
    assert_eq!(
        heard(&mut listener, &name, Duration::from_millis(500)).await,
        1,
        "a listening process: the release is announced"
    );

    // The subscriber gone, the mark goes within the task's check interval (5 s).
    drop(rx);
    let until = Instant::now() + Duration::from_secs(15);
    while common::pg_marks_held(&admin, &prefix).await > 0 {
        assert!(Instant::now() < until, "the mark was not let go");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    cycle(&locks, &name).await;
    assert_eq!(
        heard(&mut listener, &name, Duration::from_millis(500)).await,
        0
    );
    drop_tables(&prefix).await;
}

/// A waiter in another process (another store: its own pool, listener and mark) is woken by
/// the release at once, long before its poll (a quarter of the 60 s ttl).
#[tokio::test]
async fn a_waiter_elsewhere_is_woken_at_once() {
    let Some((store, prefix, admin)) = scoped_store().await else {
        return;
    };
    let other = Store::connect_with(
        &common::postgres_url(),
        common::options().table_prefix(prefix.clone()),
    )
    .await
    .unwrap();
    let (a, b) = (
        Locks::with_holder(store.clone(), "a").unwrap(),
        Locks::with_holder(other, "b").unwrap(),
    );
    let name = common::unique("wake");
    let guard = a
        .try_lock(&name, LockOptions::default())
        .await
        .unwrap()
        .unwrap();
    let waiting = name.clone();
    let waiter = tokio::spawn(async move {
        b.lock(&waiting, LockOptions::default(), Duration::from_secs(60))
            .await
    });
    // The waiter's store takes its mark.
    let until = Instant::now() + Duration::from_secs(5);
    while common::pg_marks_held(&admin, &prefix).await == 0 {
        assert!(Instant::now() < until, "the waiter's store holds no mark");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Past the wake-up the mark's grant sends, which the waiter answers with one more look.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let next = timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the release woke the waiter")
        .unwrap()
        .unwrap()
        .expect("granted");
    assert_eq!(next.term(), 2);
    assert!(released.elapsed() < Duration::from_secs(5));
    next.release().await.unwrap();
    drop_tables(&prefix).await;
}

/// The mark's connection killed: the store takes the mark again and wakes its subscribers
/// (a release meanwhile was not announced), within the task's check interval.
#[tokio::test]
async fn a_lost_mark_is_taken_again_with_a_wake_up() {
    let Some((store, prefix, admin)) = scoped_store().await else {
        return;
    };
    let mut rx = store.backend().subscribe().expect("PostgreSQL listens");
    woken_for_any(&mut rx, Duration::from_secs(5)).await;
    let killed: i64 = sqlx::query_scalar(
        "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_locks WHERE locktype = 'advisory' \
         AND classid = 1952804469 AND objid = $1 AND objsubid = 2 AND granted",
    )
    .bind(common::pg_mark_key(&prefix))
    .fetch_one(&admin)
    .await
    .unwrap();
    assert!(killed >= 1, "a mark's session to end");
    while common::pg_marks_held(&admin, &prefix).await > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Noticed at the task's next check of its connection (every 5 s).
    woken_for_any(&mut rx, Duration::from_secs(15)).await;
    assert_eq!(
        common::pg_marks_held(&admin, &prefix).await,
        1,
        "taken again"
    );
    drop(rx);
    drop_tables(&prefix).await;
}
