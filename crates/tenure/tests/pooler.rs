//! PostgreSQL behind PgBouncer (`scripts/pgbouncer.sh start`: `/test` in transaction mode,
//! `/test_session` in session mode), beyond the conformance suite's `pgbouncer` target: the
//! per-transaction settings take effect and do not leak, a session-mode pool needs no option,
//! the notify URL brings push notifications back, bad notify URLs and a transaction pooler
//! used without `?pooler=transaction` are one clear error each.

mod common;

use common::{pgbouncer_url, postgres_url, unique, Target};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tenure::backend::postgres::PostgresBackend;
use tenure::backend::Backend;
use tenure::{Effect, Error, Op, Store, StoreOptions};

fn session_url() -> String {
    std::env::var("TENURE_TEST_PGBOUNCER_SESSION_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:6432/test_session".to_string())
}

fn campaign_op(who: &str) -> Op {
    Op::Campaign {
        candidate: who.to_string(),
        term: None,
        ttl_ms: 60_000,
        metadata: None,
        purpose: tenure::Purpose::Election,
    }
}

/// Skips (or under CI fails) unless PgBouncer answers.
async fn pgbouncer() -> Option<Store> {
    common::store(Target::PgBouncer).await
}

/// `lock_timeout` and `idle_in_transaction_session_timeout` are set per transaction (`SET
/// LOCAL` in tenure's BEGIN): a row-lock wait through PgBouncer ends after the store's
/// timeout, and no server session keeps the setting for other clients.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_transaction_settings_take_effect_and_do_not_leak() {
    let _servers = POOLED_SERVERS.read().await;
    if pgbouncer().await.is_none() {
        return;
    }
    // A value no other test uses, so that it can be told from what other clients of the
    // pooler set (a store without `?pooler=transaction` sets its timeouts per session).
    let server_timeout = Duration::from_millis(431);
    let options = common::options().timeout(server_timeout);
    let backend = Arc::new(
        PostgresBackend::connect(&pgbouncer_url(), &options)
            .await
            .unwrap(),
    );
    assert!(backend.transaction_pooler());
    backend.migrate().await.unwrap();
    // The client's own bound is far longer: only the server's lock_timeout can end the wait.
    let store = Store::from_backend(backend.clone(), Duration::from_secs(20));
    let name = unique("settings");
    store.apply(&name, &campaign_op("a"), "a").await.unwrap();

    // Someone else (directly, with no timeouts) holds the row lock.
    let direct = sqlx::PgPool::connect(&postgres_url()).await.unwrap();
    let mut holder = direct.begin().await.unwrap();
    sqlx::query("SELECT term FROM tenure_lease WHERE name = $1 FOR UPDATE")
        .bind(&name)
        .fetch_one(&mut *holder)
        .await
        .unwrap();

    let started = Instant::now();
    let err = store
        .apply(&name, &campaign_op("b"), "b")
        .await
        .unwrap_err();
    let waited = started.elapsed();
    holder.rollback().await.unwrap();
    match &err {
        Error::Database(sqlx::Error::Database(db)) => {
            assert_eq!(db.code().as_deref(), Some("55P03"), "{err}")
        }
        other => panic!("expected the server's lock timeout, got {other}"),
    }
    assert!(
        waited >= server_timeout && waited < Duration::from_secs(5),
        "the lock wait ended after {waited:?}, the store's timeout is {server_timeout:?}"
    );

    // No server connection behind the pooler kept the store's values.
    let mut seen = Vec::new();
    for _ in 0..8 {
        let mut tx = backend.pool().begin().await.unwrap();
        let row: (String, String) = sqlx::query_as(
            "SELECT current_setting('lock_timeout'), \
             current_setting('idle_in_transaction_session_timeout')",
        )
        .persistent(false)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        tx.commit().await.unwrap();
        seen.push(row);
    }
    assert!(
        seen.iter().all(|(l, i)| l != "431ms" && i != "431ms"),
        "a setting leaked into a pooled session: {seen:?}"
    );
    // ... and tenure's own transactions have the store's.
    let mut tx = backend.begin().await.unwrap();
    let lock: String = sqlx::query_scalar("SELECT current_setting('lock_timeout')")
        .persistent(false)
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    assert_eq!(lock, "431ms");
}

/// A session-mode pool behaves as a direct connection: no option needed, LISTEN works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_mode_needs_no_option() {
    let _servers = POOLED_SERVERS.read().await;
    if pgbouncer().await.is_none() {
        return;
    }
    let url = session_url();
    let Some(a) = common::connect(Target::PgBouncer, &url, common::options()).await else {
        return;
    };
    let b = Store::connect_with(&url, common::options()).await.unwrap();
    assert!(a.backend().subscribe().is_some(), "LISTEN in session mode");
    let name = unique("session");
    let mut changes = a.changes();
    for round in 1..=5u64 {
        let (holder, other) = if round % 2 == 1 { (&a, &b) } else { (&b, &a) };
        let who = format!("c{round}");
        let applied = holder.apply(&name, &campaign_op(&who), &who).await.unwrap();
        assert!(
            matches!(applied.effect, Effect::Acquired { .. }),
            "{applied:?}"
        );
        assert_eq!(applied.lease.unwrap().term, round);
        changes.skip_pending();
        other
            .release(&name, &who, round, Duration::ZERO)
            .await
            .unwrap();
        tokio::time::timeout(
            Duration::from_secs(2),
            changes.changed(|t| t == tenure::Topic::Lease(&name)),
        )
        .await
        .expect("the release was pushed");
    }
    assert_eq!(a.history(&name, 100).await.unwrap().len(), 10);
}

/// Behind the transaction pooler nothing listens, unless a direct notify URL is given: then a
/// release is pushed at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notify_url_brings_notifications_back() {
    let _servers = POOLED_SERVERS.read().await;
    let Some(polling) = pgbouncer().await else {
        return;
    };
    assert!(
        polling.backend().subscribe().is_none(),
        "nothing can LISTEN through a transaction pooler"
    );
    let store = Store::connect_with(
        &pgbouncer_url(),
        common::options().notify_url(postgres_url()),
    )
    .await
    .unwrap();
    let name = unique("notify");
    let mut changes = store.changes();
    store.apply(&name, &campaign_op("a"), "a").await.unwrap();
    changes.skip_pending();
    let released = Instant::now();
    store.release(&name, "a", 1, Duration::ZERO).await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(2),
        changes.changed(|t| t == tenure::Topic::Lease(&name)),
    )
    .await
    .expect("the release was pushed through the notify URL");
    eprintln!("release pushed after {:?}", released.elapsed());
}

/// A notify URL that is not PostgreSQL, not reachable, or itself a transaction pooler, and
/// `pooler=` on the wrong backend or with a wrong value: one clear error each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_notify_urls_and_pooler_options_are_clear_errors() {
    let _servers = POOLED_SERVERS.read().await;
    if pgbouncer().await.is_none() {
        return;
    }
    let with_notify = |notify: &str| {
        StoreOptions::default()
            .timeout(Duration::from_secs(2))
            .notify_url(notify)
    };
    let err = Store::connect_with(&pgbouncer_url(), with_notify("mysql://root@127.0.0.1/test"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BadUrl { .. }), "{err:?}");
    assert!(err.to_string().contains("notify URL"), "{err}");

    let secret = "n0tify-s3cret";
    let unreachable = format!("postgres://postgres:{secret}@127.0.0.1:1/test");
    let err = Store::connect_with(&pgbouncer_url(), with_notify(&unreachable))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    assert!(
        text.contains("(the notify URL)") && !text.contains(secret),
        "{text}"
    );

    let err = Store::connect_with(&pgbouncer_url(), with_notify(&pgbouncer_url()))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("LISTEN needs a session"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!(
        "sqlite://{}?pooler=transaction",
        dir.path().join("x.db").display()
    );
    let err = Store::connect(&sqlite).await.unwrap_err();
    assert!(
        matches!(err, Error::BadUrl { .. }) && err.to_string().contains("pooler=transaction"),
        "{err}"
    );
    let err = Store::connect("postgres://postgres@127.0.0.1:6432/test?pooler=statement")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("`transaction`"), "{err}");
}

/// Without `?pooler=transaction`, sqlx's named statements meet other clients' on the pooled
/// servers: the error says what to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_without_the_option_says_what_to_do() {
    let _servers = POOLED_SERVERS.read().await;
    if pgbouncer().await.is_none() {
        return;
    }
    let plain = pgbouncer_url().replace("pooler=transaction", "pooler=session");
    let mut stores = Vec::new();
    let mut failure = None;
    for i in 0..20 {
        let attempt = async {
            let store = Store::connect_with(&plain, common::options()).await?;
            let name = unique("plain");
            store.apply(&name, &campaign_op("a"), "a").await?;
            store.get(&name).await?;
            Ok::<_, Error>(store)
        };
        match attempt.await {
            Ok(store) => stores.push(store),
            Err(e) => {
                failure = Some((i, e));
                break;
            }
        }
    }
    let (i, err) = failure.expect("named statements through a transaction pooler fail");
    let text = err.to_string();
    assert!(
        text.contains("add ?pooler=transaction") && text.contains("PgBouncer"),
        "attempt {i}: {text}"
    );
}

/// A client that LISTENs through the transaction pooler (tenure itself without
/// `?pooler=transaction`, for one) leaves the LISTEN on the server; the next client given that
/// server would receive notifications in the middle of its statements (sqlx: "unexpected
/// message: NotificationResponse"). tenure's transactions begin with `UNLISTEN *`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stray_listens_left_on_pooled_servers_do_no_harm() {
    // Alone: a raw query of another test given a planted server would fail as described.
    let _servers = POOLED_SERVERS.write().await;
    use sqlx::Connection;
    let Some(store) = pgbouncer().await else {
        return;
    };
    // Hold ten transactions open at once, so that ten servers get a LISTEN each.
    let plain = pgbouncer_url().replace("?pooler=transaction", "");
    let mut planted = Vec::new();
    for _ in 0..10 {
        let mut conn = sqlx::PgConnection::connect(&plain).await.unwrap();
        sqlx::raw_sql("BEGIN; LISTEN tenure_lease")
            .execute(&mut conn)
            .await
            .unwrap();
        planted.push(conn);
    }
    for conn in &mut planted {
        sqlx::raw_sql("COMMIT").execute(&mut *conn).await.unwrap();
    }
    let name = unique("stray");
    for term in 1..=20u64 {
        let applied = store.apply(&name, &campaign_op("a"), "a").await.unwrap();
        assert_eq!(applied.lease.unwrap().term, term);
        store
            .release(&name, "a", term, Duration::ZERO)
            .await
            .unwrap();
    }
    for conn in planted {
        conn.close().await.unwrap();
    }
    // Take the LISTENs off again: a transaction on each of the pool's servers at once.
    let mut cleaners = Vec::new();
    for _ in 0..POOL_SIZE {
        let mut conn = sqlx::PgConnection::connect(&plain).await.unwrap();
        sqlx::raw_sql("BEGIN; UNLISTEN *")
            .execute(&mut conn)
            .await
            .unwrap();
        cleaners.push(conn);
    }
    for mut conn in cleaners {
        sqlx::raw_sql("COMMIT").execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }
}

/// The tests of this file that run queries of their own through PgBouncer share its servers
/// (read); the one that plants LISTENs on them runs alone (write). CI's other test binaries run
/// after this one, one binary at a time.
static POOLED_SERVERS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// `default_pool_size` of scripts/pgbouncer.sh: the servers PgBouncer keeps per database.
const POOL_SIZE: usize = 20;
