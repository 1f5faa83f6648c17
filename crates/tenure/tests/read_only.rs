//! Never lead from a read-only server (issue 15), on PostgreSQL: a database whose sessions
//! start read-only (`default_transaction_read_only`, answered like a hot standby with SQLSTATE
//! 25006) refuses every campaign with [`Error::ReadOnly`], and once it takes writes again the
//! store's next call leads: the connections that saw it read-only were dropped, not reused.
//! (A real standby and its promotion, and MariaDB's `read_only`, are in the fault suite's `ha`
//! profile: `cargo run -p tenure-faults -- run --profile ha --only standby,read-only`.)

mod common;

use std::time::Duration;
use tenure::{BackendKind, Effect, Elector, Error, Op, Role, Store, Timing};

fn campaign(who: &str) -> Op {
    Op::Campaign {
        candidate: who.to_string(),
        term: None,
        ttl_ms: 10_000,
        metadata: None,
        purpose: tenure::Purpose::Election,
    }
}

/// A scratch database, dropped at the end (PostgreSQL's `ALTER DATABASE` is per database).
struct Scratch {
    admin: sqlx::PgPool,
    name: String,
}

impl Scratch {
    async fn create() -> Option<Scratch> {
        let url = common::postgres_url();
        // Reachability (and the CI rule) as every PostgreSQL test decides it.
        common::connect(BackendKind::Postgres, &url, common::options()).await?;
        let admin = sqlx::PgPool::connect(&url).await.expect("admin connection");
        let name = common::unique("tenure_ro").replace('-', "_").to_lowercase();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&admin)
            .await
            .expect("create database");
        Some(Scratch { admin, name })
    }

    /// A scratch database with tenure's tables (a standby has the primary's) that has just
    /// turned read-only, and a store on it.
    async fn read_only_store() -> Option<(Scratch, Store)> {
        let db = Scratch::create().await?;
        Store::connect_with(&db.url(), common::options())
            .await
            .expect("create the tables");
        db.read_only(true).await;
        let store = Store::connect_with(&db.url(), common::options().auto_create(false))
            .await
            .expect("a read-only server still answers reads");
        Some((db, store))
    }

    fn url(&self) -> String {
        let base = common::postgres_url();
        let (server, _) = base.rsplit_once('/').expect("a database in the URL");
        format!("{server}/{}", self.name)
    }

    async fn read_only(&self, on: bool) {
        let sql = if on {
            format!(
                "ALTER DATABASE {} SET default_transaction_read_only = on",
                self.name
            )
        } else {
            format!(
                "ALTER DATABASE {} RESET default_transaction_read_only",
                self.name
            )
        };
        sqlx::query(&sql)
            .execute(&self.admin)
            .await
            .expect("alter database");
    }

    async fn drop_it(self) {
        let sql = format!("DROP DATABASE {} WITH (FORCE)", self.name);
        sqlx::query(&sql)
            .execute(&self.admin)
            .await
            .expect("drop database");
    }
}

#[tokio::test]
async fn postgres_read_only_server_never_leads_and_its_connections_are_replaced() {
    let Some((db, store)) = Scratch::read_only_store().await else {
        return;
    };

    for attempt in 0..3 {
        match store.apply("job", &campaign("a"), "a").await {
            Err(Error::ReadOnly { detail }) => {
                let shown = Error::ReadOnly {
                    detail: detail.clone(),
                }
                .to_string();
                assert!(shown.contains("read-only"), "{shown}");
                assert!(shown.contains("point the URL at the primary"), "{shown}");
            }
            other => panic!("attempt {attempt}: a read-only server answered {other:?}"),
        }
    }
    assert!(
        store.leader("job").await.expect("read").is_none(),
        "nothing was written"
    );

    // The server takes writes again (a promotion; for a VIP or DNS name: the new primary).
    // A session keeps the setting it started with: only a new connection sees the change.
    // The read above opened one while the server was still read-only, after the last call
    // that failed: the first write meets it, fails, and drops it; the next one leads. (Kept,
    // the pool's read-only connections would refuse every call until their idle timeout.)
    db.read_only(false).await;
    let mut answers = Vec::new();
    for _ in 0..3 {
        let answer = store.apply("job", &campaign("a"), "a").await;
        let done = answer.is_ok();
        answers.push(answer);
        if done {
            break;
        }
    }
    let last = answers.last().expect("an answer");
    assert!(
        answers.len() <= 2 && matches!(last, Ok(a) if matches!(a.effect, Effect::Acquired { .. })),
        "answers after the server took writes again: {answers:?}"
    );
    assert!(answers[..answers.len() - 1]
        .iter()
        .all(|a| matches!(a, Err(Error::ReadOnly { .. }))));

    drop(store);
    db.drop_it().await;
}

/// The elector on a read-only server: a follower for as long as it stays read-only (its role
/// never turns to leader, watched at every change), and the leader soon after the server
/// takes writes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_elector_on_a_read_only_server_waits_for_it_to_take_writes() {
    let Some((db, store)) = Scratch::read_only_store().await else {
        return;
    };
    let elector = Elector::builder(store.clone(), "job")
        .candidate("a")
        .timing(Timing::from_ttl(Duration::from_secs(1)).unwrap())
        .spawn()
        .unwrap();
    let mut role = elector.role();
    // Three ttls of campaigns (twelve renew intervals), every one refused.
    let watched = tokio::time::timeout(Duration::from_secs(3), async {
        loop {
            let now = role.borrow_and_update().clone();
            assert!(
                !matches!(now, Role::Leader { .. }),
                "led from a read-only server"
            );
            if role.changed().await.is_err() {
                return;
            }
        }
    })
    .await;
    assert!(watched.is_err(), "the elector stopped by itself");
    assert!(store.leader("job").await.unwrap().is_none());

    db.read_only(false).await;
    let guard = tokio::time::timeout(Duration::from_secs(10), elector.wait_until_leader())
        .await
        .expect("leads once the server takes writes")
        .expect("elector running");
    assert_eq!(guard.term(), 1);
    drop(guard);
    elector.shutdown().await;
    drop(store);
    db.drop_it().await;
}

/// A read-only SQLite file (`mode=ro`) answers `SQLITE_READONLY`: the same refusal.
#[tokio::test]
async fn sqlite_read_only_file_is_refused_with_the_reason() {
    let url = common::sqlite_url();
    Store::connect_with(&url, common::options())
        .await
        .expect("create the tables");
    let store = Store::connect_with(
        &format!("{url}?mode=ro"),
        common::options().auto_create(false),
    )
    .await
    .expect("a read-only file still answers reads");
    match store.apply("job", &campaign("a"), "a").await {
        Err(Error::ReadOnly { detail }) => assert!(detail.contains("readonly"), "{detail}"),
        other => panic!("a read-only file answered {other:?}"),
    }
    assert!(store.leader("job").await.unwrap().is_none());
}

/// The listener follows the primary (issue 27): after a sign of a failover (the store's
/// connections discarded, as after a timeout or a read-only answer), its LISTEN moves to a
/// fresh connection — the old one is closed, not kept on what may now be a standby — everyone
/// is woken once (notifications may have been lost meanwhile), and notifications arrive again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_listen_moves_to_a_fresh_connection_after_a_discard() {
    let prefix = format!(
        "ls{}_",
        common::unique("").trim_start_matches('-').to_lowercase()
    );
    let options = common::options().table_prefix(prefix.clone());
    let url = common::postgres_url();
    let Some(store) = common::connect(BackendKind::Postgres, &url, options).await else {
        return;
    };
    use sqlx::Connection;
    let mut admin = sqlx::PgConnection::connect(&url).await.unwrap();
    let listening = format!("LISTEN \"{prefix}lease\"");
    let before = listeners(&mut admin, &listening).await;
    assert_eq!(before.len(), 1, "one LISTEN connection: {before:?}");
    let mut changes = store.changes();
    store.backend().discard_connections();
    // Woken once, for any name.
    tokio::time::timeout(Duration::from_secs(10), changes.changed(|_| false))
        .await
        .expect("everyone is woken after the LISTEN moved");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let after = loop {
        let now = listeners(&mut admin, &listening).await;
        if now.len() == 1 && now != before {
            break now;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the LISTEN did not move within 10 s: before {before:?}, now {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let old_alive: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1")
        .bind(before[0])
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(old_alive, 0, "the old connection {} is closed", before[0]);
    // Notifications arrive on the new one.
    changes.skip_pending();
    store.apply("moved", &campaign("a"), "a").await.unwrap();
    tokio::time::timeout(
        Duration::from_secs(10),
        changes.changed(|t| t == tenure::Topic::Lease("moved")),
    )
    .await
    .unwrap_or_else(|_| panic!("no notification on the new LISTEN ({after:?})"));
    for table in ["lease", "history", "tick", "schema"] {
        sqlx::raw_sql(&format!("DROP TABLE IF EXISTS {prefix}{table}"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
}

/// The backends whose last statement was `listening`.
async fn listeners(admin: &mut sqlx::PgConnection, listening: &str) -> Vec<i32> {
    sqlx::query_scalar("SELECT pid FROM pg_stat_activity WHERE query = $1 ORDER BY pid")
        .bind(listening)
        .fetch_all(admin)
        .await
        .unwrap()
}
