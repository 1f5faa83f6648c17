//! The test databases, shared by the integration tests (through `tests/support`) and the
//! router's unit tests (`src/serve/tests/mod.rs`, which includes this file by path): where the
//! servers are, what an unreachable one means, fresh names and prefixes, and dropping a
//! prefix's tables.
//!
//! PostgreSQL and MariaDB are the servers named by `TENURE_TEST_POSTGRES_URL` /
//! `TENURE_TEST_MYSQL_URL` (default: the local ones); SQLite is a fresh file. When a server is
//! unreachable the test prints `SKIPPED: …` and returns, unless `CI=true`, where that is a
//! failure.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};
use tenure::BackendKind;

/// The three backends, in the order tests usually visit them.
pub(crate) const KINDS: [BackendKind; 3] = [
    BackendKind::Sqlite,
    BackendKind::Postgres,
    BackendKind::MySql,
];

/// Every table of a prefix: the lease's, MySQL's epoch row, and the Consul and etcd layers'
/// (which the `tenure` command compiles in).
pub(crate) const TABLES: [&str; 14] = [
    "lease",
    "history",
    "tick",
    "schema",
    "epoch",
    "consul_session",
    "consul_kv",
    "consul_index",
    "etcd_kv",
    "etcd_event",
    "etcd_lease",
    "etcd_member",
    "etcd_revision",
    "etcd_compaction",
];

pub(crate) fn postgres_url() -> String {
    std::env::var("TENURE_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_string())
}

pub(crate) fn mysql_url() -> String {
    std::env::var("TENURE_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_string())
}

/// PostgreSQL through PgBouncer in transaction mode (`scripts/pgbouncer.sh start`).
pub(crate) fn pgbouncer_url() -> String {
    std::env::var("TENURE_TEST_PGBOUNCER_URL").unwrap_or_else(|_| {
        "postgres://postgres@127.0.0.1:6432/test?pooler=transaction".to_string()
    })
}

/// The database URL of `kind`: the server's, or a fresh SQLite file in `dir` (not created).
pub(crate) fn url_for(kind: BackendKind, dir: &Path) -> String {
    match kind {
        BackendKind::Postgres => postgres_url(),
        BackendKind::MySql => mysql_url(),
        BackendKind::Sqlite => format!("sqlite://{}", sqlite_file(dir).display()),
        other => panic!("no test database on {other}"),
    }
}

/// A fresh SQLite file's path in `dir` (not created).
pub(crate) fn sqlite_file(dir: &Path) -> PathBuf {
    dir.join(format!("{}.db", token()))
}

/// Whether an unreachable server must fail the test instead of skipping it.
pub(crate) fn under_ci() -> bool {
    std::env::var("CI").as_deref() == Ok("true")
}

/// `None`, after printing `SKIPPED: …`, for a server that could not be reached; under
/// `CI=true` a panic.
pub(crate) fn unreachable<T>(kind: BackendKind, error: impl std::fmt::Display) -> Option<T> {
    if under_ci() {
        panic!("{kind} server not reachable under CI=true: {error}");
    }
    eprintln!("SKIPPED: {kind} server not reachable ({error}); set CI=true to make this fail");
    None
}

/// A token no other call in this test run returns: lower-case letters and digits.
pub(crate) fn token() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{}{}{}",
        base36(u64::from(std::process::id())),
        base36(n),
        base36(u64::from(nanos) % 36u64.pow(4))
    )
}

fn base36(mut n: u64) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ascii")
}

/// A name (election, candidate, …) unique in this test run: `<label>-<token>`.
pub(crate) fn unique(label: &str) -> String {
    format!("{label}-{}", token())
}

/// A fresh table prefix: lower case (PostgreSQL folds unquoted names), well within the
/// `^[A-Za-z_][A-Za-z0-9_]{0,40}$` rule.
pub(crate) fn fresh_prefix() -> String {
    format!("tc{}_", token())
}

/// A campaign of `candidate` for a new tenure of `ttl_ms`, as tests set up a leader through
/// the library rather than through a command.
pub(crate) fn campaign_op(candidate: &str, ttl_ms: u64) -> tenure::Op {
    tenure::Op::Campaign {
        candidate: candidate.into(),
        term: None,
        ttl_ms,
        metadata: None,
        purpose: tenure::Purpose::Election,
    }
}

/// Drops the tables of `prefix` on the server of `url` (nothing on SQLite: its file goes with
/// its directory). Call it at the end of a test; a failed test leaves its tables for
/// inspection.
pub(crate) async fn drop_tables(kind: BackendKind, url: &str, prefix: &str) {
    use sqlx::Connection;
    let drops = TABLES.map(|t| format!("DROP TABLE IF EXISTS {prefix}{t}"));
    match kind {
        BackendKind::Postgres => {
            let mut c = sqlx::PgConnection::connect(url).await.expect("connect");
            for sql in drops {
                sqlx::query(&sql).execute(&mut c).await.expect("drop");
            }
        }
        BackendKind::MySql => {
            let mut c = sqlx::MySqlConnection::connect(url).await.expect("connect");
            let routines = ["lock_acquire_v2", "lock_acquire_v3", "lock_release_v1"]
                .map(|r| format!("DROP PROCEDURE IF EXISTS {prefix}{r}"));
            for sql in drops.iter().chain(routines.iter()) {
                sqlx::raw_sql(sql).execute(&mut c).await.expect("drop");
            }
        }
        _ => {}
    }
}
