//! The one support module of the library's integration tests (`mod common;` in each test
//! binary): one store per backend, skipping (or, under `CI=true`, failing) when a server is
//! not reachable; `memory`: the in-memory backend of the timing and simulation tests.
#![allow(dead_code)]

pub mod memory;

use rand::distributions::{Alphanumeric, DistString};
use std::time::Duration;
use tenure::{BackendKind, Store, StoreOptions};

pub fn postgres_url() -> String {
    std::env::var("TENURE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

pub fn mysql_url() -> String {
    std::env::var("TENURE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

/// A fresh SQLite file in a temporary directory that lives as long as the process.
pub fn sqlite_url() -> String {
    let dir = std::env::temp_dir().join(format!("tenure-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let file = dir.join(format!("{}.db", unique("db")));
    format!("sqlite://{}", file.display())
}

/// PostgreSQL through PgBouncer in transaction mode (`scripts/pgbouncer.sh start`).
pub fn pgbouncer_url() -> String {
    std::env::var("TENURE_TEST_PGBOUNCER_URL").unwrap_or_else(|_| {
        "postgres://postgres@127.0.0.1:6432/test?pooler=transaction".to_string()
    })
}

/// Where a test runs: one of the three engines, or PostgreSQL behind PgBouncer in transaction
/// mode.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Engine(BackendKind),
    PgBouncer,
}

impl From<BackendKind> for Target {
    fn from(kind: BackendKind) -> Target {
        Target::Engine(kind)
    }
}

impl Target {
    pub fn kind(self) -> BackendKind {
        match self {
            Target::Engine(kind) => kind,
            Target::PgBouncer => BackendKind::Postgres,
        }
    }
}

pub fn url_for(target: impl Into<Target>) -> String {
    match target.into() {
        Target::PgBouncer => pgbouncer_url(),
        Target::Engine(BackendKind::Postgres) => postgres_url(),
        Target::Engine(BackendKind::MySql) => mysql_url(),
        Target::Engine(BackendKind::Sqlite) => sqlite_url(),
        Target::Engine(other) => panic!("no test database on {other}"),
    }
}

/// A URL on the target of `store`, for a second store there (SQLite: a fresh file).
pub fn url_of(store: &Store) -> String {
    if store.url().as_str().contains("pooler=transaction") {
        pgbouncer_url()
    } else {
        url_for(store.kind())
    }
}

/// A name no other test uses.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}",
        Alphanumeric.sample_string(&mut rand::thread_rng(), 10)
    )
}

pub fn options() -> StoreOptions {
    StoreOptions::default().timeout(Duration::from_secs(10))
}

/// Connects to `url`, or returns `None` with a printed reason when the server is unreachable
/// and we are not under CI (where that is a failure).
pub async fn connect(target: impl Into<Target>, url: &str, options: StoreOptions) -> Option<Store> {
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
pub async fn store(target: impl Into<Target>) -> Option<Store> {
    let target = target.into();
    let url = url_for(target);
    connect(target, &url, options()).await
}
