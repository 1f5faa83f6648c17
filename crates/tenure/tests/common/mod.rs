//! The one support module of the library's integration tests (`mod common;` in each test
//! binary): one store per backend, skipping (or, under `CI=true`, failing) when a server is
//! not reachable; `memory`: the in-memory backend of the timing and simulation tests;
//! `statements`: sqlx's statements counted, for the tests of what an operation costs.
#![allow(dead_code)]

pub(crate) mod memory;
pub(crate) mod statements;

use rand::distributions::{Alphanumeric, DistString};
use std::time::Duration;
use tenure::{BackendKind, DbTime, Store, StoreOptions};

pub(crate) fn postgres_url() -> String {
    std::env::var("TENURE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

pub(crate) fn mysql_url() -> String {
    std::env::var("TENURE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

/// A fresh SQLite file in a temporary directory that lives as long as the process.
pub(crate) fn sqlite_url() -> String {
    let dir = std::env::temp_dir().join(format!("tenure-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(format!("{}.db", unique("db")));
    format!("sqlite://{}", file.display())
}

/// PostgreSQL through PgBouncer in transaction mode (`scripts/pgbouncer.sh start`).
pub(crate) fn pgbouncer_url() -> String {
    std::env::var("TENURE_TEST_PGBOUNCER_URL").unwrap_or_else(|_| {
        "postgres://postgres@127.0.0.1:6432/test?pooler=transaction".to_string()
    })
}

/// Where a test runs: one of the three engines, or PostgreSQL behind PgBouncer in transaction
/// mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    Engine(BackendKind),
    PgBouncer,
}

impl From<BackendKind> for Target {
    fn from(kind: BackendKind) -> Target {
        Target::Engine(kind)
    }
}

impl Target {
    pub(crate) fn kind(self) -> BackendKind {
        match self {
            Target::Engine(kind) => kind,
            Target::PgBouncer => BackendKind::Postgres,
        }
    }
}

pub(crate) fn url_for(target: impl Into<Target>) -> String {
    match target.into() {
        Target::PgBouncer => pgbouncer_url(),
        Target::Engine(BackendKind::Postgres) => postgres_url(),
        Target::Engine(BackendKind::MySql) => mysql_url(),
        Target::Engine(BackendKind::Sqlite) => sqlite_url(),
        Target::Engine(other) => panic!("no test database on {other}"),
    }
}

/// A URL on the target of `store`, for a second store there (SQLite: a fresh file).
pub(crate) fn url_of(store: &Store) -> String {
    if store.url().as_str().contains("pooler=transaction") {
        pgbouncer_url()
    } else {
        url_for(store.kind())
    }
}

/// A name no other test uses.
pub(crate) fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        Alphanumeric.sample_string(&mut rand::thread_rng(), 10)
    )
}

pub(crate) fn options() -> StoreOptions {
    StoreOptions::default().timeout(Duration::from_secs(10))
}

/// Connects to `url`, or returns `None` with a printed reason when the server is unreachable
/// and we are not under CI (where that is a failure).
pub(crate) async fn connect(
    target: impl Into<Target>,
    url: &str,
    options: StoreOptions,
) -> Option<Store> {
    let target = target.into();
    let what = match target {
        Target::PgBouncer => "PgBouncer (scripts/pgbouncer.sh start)".to_string(),
        Target::Engine(kind) => kind.to_string(),
    };
    match Store::connect_with(url, options).await {
        Ok(store) => Some(store),
        Err(e)
            if target.kind() != BackendKind::Sqlite
                && std::env::var("CI").as_deref() != Ok("true") =>
        {
            eprintln!("SKIPPED: {what} not reachable ({e}); set CI=true to make this fail");
            None
        }
        Err(e) => panic!("{what} unavailable: {e}"),
    }
}

/// A store on `target` with default test options.
pub(crate) async fn store(target: impl Into<Target>) -> Option<Store> {
    let target = target.into();
    let url = url_for(target);
    connect(target, &url, options()).await
}

/// Waits (bounded, by the database's clock) until the database's now has passed `instant`.
pub(crate) async fn until_db_passes(store: &Store, instant: DbTime) {
    let start = tokio::time::Instant::now();
    loop {
        let now = store.list().await.unwrap().now;
        if now > instant {
            return;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the database's clock did not pass {instant} within 30 s (now {now})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Runs `sql` (no parameters: the simple protocol, which PgBouncer's transaction mode passes)
/// on the database of `store`, outside tenure: a test's way to set a row to a state tenure
/// would take long to reach.
pub(crate) async fn raw_sql(store: &Store, sql: &str) {
    use sqlx::Connection;
    let url = store.url().as_str().replace("?pooler=transaction", "");
    match store.kind() {
        BackendKind::Postgres => {
            let mut c = sqlx::PgConnection::connect(&url).await.expect("connect");
            sqlx::raw_sql(sql).execute(&mut c).await.expect(sql);
        }
        BackendKind::MySql => {
            let mut c = sqlx::MySqlConnection::connect(&url).await.expect("connect");
            sqlx::raw_sql(sql).execute(&mut c).await.expect(sql);
        }
        BackendKind::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&url)
                .await
                .expect("connect");
            sqlx::raw_sql(sql).execute(&mut c).await.expect(sql);
        }
        other => panic!("no SQL on {other}"),
    }
}

/// The one integer `sql` returns (a column named `n`) on the database of `store`, read outside
/// tenure, as [`raw_sql`] writes.
pub(crate) async fn raw_count(store: &Store, sql: &str) -> i64 {
    use sqlx::{Connection, Row};
    let url = store.url().as_str().replace("?pooler=transaction", "");
    match store.kind() {
        BackendKind::Postgres => {
            let mut c = sqlx::PgConnection::connect(&url).await.expect("connect");
            let row = sqlx::raw_sql(sql).fetch_one(&mut c).await.expect(sql);
            row.try_get::<i64, _>("n").expect(sql)
        }
        BackendKind::MySql => {
            let mut c = sqlx::MySqlConnection::connect(&url).await.expect("connect");
            let row = sqlx::raw_sql(sql).fetch_one(&mut c).await.expect(sql);
            row.try_get::<i64, _>("n").expect(sql)
        }
        BackendKind::Sqlite => {
            let mut c = sqlx::SqliteConnection::connect(&url)
                .await
                .expect("connect");
            let row = sqlx::raw_sql(sql).fetch_one(&mut c).await.expect(sql);
            row.try_get::<i64, _>("n").expect(sql)
        }
        other => panic!("no SQL on {other}"),
    }
}

/// A store of `kind` on tables of their own (a prefix made of `tag` and a unique part);
/// `None` where `kind`'s server is not reachable outside CI.
pub(crate) async fn store_of_its_own(kind: BackendKind, tag: &str) -> Option<Store> {
    let url = url_for(kind);
    let prefix = format!("{tag}{}_", unique("").replace('-', "").to_lowercase());
    connect(kind, &url, options().table_prefix(prefix)).await
}

/// Drops every table (and MySQL procedure) whose name starts with `prefix` on the server of
/// `url` (`kind`'s), found in the catalog: what a test made under a prefix of its own leaves
/// behind. SQLite's file goes with the test's directory.
pub(crate) async fn drop_prefixed(
    kind: BackendKind,
    url: &str,
    prefix: &str,
) -> Result<(), sqlx::Error> {
    use sqlx::Connection;
    // `_` is LIKE's one-character wildcard (and a prefix's separator): matched literally, so
    // that another test's tables whose names differ there stay.
    let like = format!("{}%", prefix.replace('\\', "\\\\").replace('_', "\\_"));
    match kind {
        BackendKind::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await?;
            let tables: Vec<String> =
                sqlx::query_scalar("SELECT tablename::TEXT FROM pg_tables WHERE tablename LIKE $1")
                    .bind(&like)
                    .persistent(false)
                    .fetch_all(&mut c)
                    .await?;
            for table in tables {
                sqlx::raw_sql(&format!("DROP TABLE IF EXISTS {table}"))
                    .execute(&mut c)
                    .await?;
            }
        }
        BackendKind::MySql => {
            let mut c = sqlx::MySqlConnection::connect(url).await?;
            for (kind, catalog) in [
                (
                    "TABLE",
                    "SELECT CONVERT(TABLE_NAME USING utf8mb4) FROM information_schema.TABLES \
                           WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE ?",
                ),
                (
                    "PROCEDURE",
                    "SELECT CONVERT(ROUTINE_NAME USING utf8mb4) FROM \
                               information_schema.ROUTINES \
                               WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME LIKE ?",
                ),
            ] {
                let names: Vec<String> = sqlx::query_scalar(catalog)
                    .bind(&like)
                    .fetch_all(&mut c)
                    .await?;
                for name in names {
                    sqlx::raw_sql(&format!("DROP {kind} IF EXISTS {name}"))
                        .execute(&mut c)
                        .await?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// PostgreSQL: the second key of the waiting marks of the store of `prefix`: FNV-1a of its
/// channel, as `marks.rs` computes it.
pub(crate) fn pg_mark_key(prefix: &str) -> i64 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in format!("{prefix}lease").bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    i64::from(hash & 0x7fff_ffff)
}

/// PostgreSQL: how many sessions hold a waiting mark on the channel of the store of `prefix`.
pub(crate) async fn pg_marks_held(admin: &sqlx::PgPool, prefix: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = 1952804469 \
         AND objid = $1 AND objsubid = 2 AND granted",
    )
    .bind(pg_mark_key(prefix))
    .fetch_one(admin)
    .await
    .unwrap()
}
