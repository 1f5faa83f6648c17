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

pub fn url_for(kind: BackendKind) -> String {
    match kind {
        BackendKind::Postgres => postgres_url(),
        BackendKind::MySql => mysql_url(),
        BackendKind::Sqlite => sqlite_url(),
        other => panic!("no test database on {other}"),
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
pub async fn connect(kind: BackendKind, url: &str, options: StoreOptions) -> Option<Store> {
    match Store::connect_with(url, options).await {
        Ok(store) => Some(store),
        Err(e) if kind != BackendKind::Sqlite && std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("SKIPPED: {kind} server not reachable ({e}); set CI=true to make this fail");
            None
        }
        Err(e) => panic!("{kind} backend unavailable: {e}"),
    }
}

/// A store on `kind` with default test options.
pub async fn store(kind: BackendKind) -> Option<Store> {
    let url = url_for(kind);
    connect(kind, &url, options()).await
}
