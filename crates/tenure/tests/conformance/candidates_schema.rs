//! A registry table created by an older build (without the incarnation, the back-off, the
//! operator's mark and the index on live rows): a store that may not create tables refuses it
//! with `SchemaMissing` naming the missing column; a store that may brings it up to date, and
//! its electors campaign there — a row of the older build included.

use crate::common::{options, raw_sql, unique};
use std::time::Duration;
use tenure::candidates::Candidates;
use tenure::{BackendKind, Elector, Error, Store, Timing};
use tokio::time::timeout;

/// The registry's DDL of the build before issue 35, with `{p}` for the prefix.
fn older_table(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Postgres => {
            "CREATE TABLE {p}candidate (name TEXT COLLATE \"C\" NOT NULL, candidate TEXT \
             COLLATE \"C\" NOT NULL, priority BIGINT NOT NULL, observer BOOLEAN NOT NULL, \
             metadata TEXT, since TIMESTAMPTZ NOT NULL, seen_at TIMESTAMPTZ NOT NULL, \
             expires_at TIMESTAMPTZ NOT NULL, ttl_ms BIGINT NOT NULL, renew_ms BIGINT NOT NULL, \
             PRIMARY KEY (name, candidate))"
        }
        BackendKind::MySql => {
            "CREATE TABLE {p}candidate (name VARCHAR(191) CHARACTER SET utf8mb4 COLLATE \
             utf8mb4_bin NOT NULL, candidate VARCHAR(191) CHARACTER SET utf8mb4 COLLATE \
             utf8mb4_bin NOT NULL, priority BIGINT NOT NULL, observer BOOLEAN NOT NULL, \
             metadata TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL, since DATETIME(6) \
             NOT NULL, seen_at DATETIME(6) NOT NULL, expires_at DATETIME(6) NOT NULL, ttl_ms \
             BIGINT NOT NULL, renew_ms BIGINT NOT NULL, PRIMARY KEY (name, candidate)) \
             ENGINE=InnoDB"
        }
        _ => {
            "CREATE TABLE {p}candidate (name TEXT NOT NULL, candidate TEXT NOT NULL, priority \
             INTEGER NOT NULL, observer INTEGER NOT NULL, metadata TEXT, since TEXT NOT NULL, \
             seen_at TEXT NOT NULL, expires_at TEXT NOT NULL, ttl_ms INTEGER NOT NULL, renew_ms \
             INTEGER NOT NULL, PRIMARY KEY (name, candidate))"
        }
    }
}

/// An older build's live registration of `name`.
fn older_row(kind: BackendKind, prefix: &str, name: &str) -> String {
    let (now, later, no) = match kind {
        BackendKind::Postgres => ("now()", "now() + interval '1 hour'", "FALSE"),
        BackendKind::MySql => (
            "UTC_TIMESTAMP(6)",
            "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
            "FALSE",
        ),
        _ => (
            "strftime('%Y-%m-%d %H:%M:%f', 'now')",
            "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 hour')",
            "0",
        ),
    };
    format!(
        "INSERT INTO {prefix}candidate (name, candidate, priority, observer, metadata, since, \
         seen_at, expires_at, ttl_ms, renew_ms) VALUES ('{name}', 'older', 0, {no}, NULL, \
         {now}, {now}, {later}, 3600000, 900)"
    )
}

pub(crate) async fn a_registry_of_an_older_build_is_brought_up_to_date(store: Store) {
    let url = store.url().as_str().to_string();
    let prefix = format!("t{}_", unique("up").replace('-', "_").to_lowercase());
    let current = Store::connect_with(&url, options().table_prefix(&prefix))
        .await
        .unwrap();
    raw_sql(&store, &format!("DROP TABLE {prefix}candidate")).await;
    raw_sql(&store, &older_table(store.kind()).replace("{p}", &prefix)).await;
    let name = unique("upgraded");
    raw_sql(&store, &older_row(store.kind(), &prefix, &name)).await;
    drop(current);

    let checked = Store::connect_with(&url, options().table_prefix(&prefix).auto_create(false))
        .await
        .map(|_| ())
        .unwrap_err();
    match &checked {
        Error::SchemaMissing { table, .. } => {
            assert!(table.starts_with(&format!("{prefix}candidate.")), "{table}");
        }
        other => panic!("{other:?}"),
    }
    assert!(checked.to_string().contains("tenure migrate"), "{checked}");

    let upgraded = Store::connect_with(&url, options().table_prefix(&prefix))
        .await
        .expect("brought up to date");
    let elector = Elector::builder(upgraded.clone(), &name)
        .candidate("new")
        .timing(Timing::from_ttl(Duration::from_secs(2)).unwrap())
        .spawn()
        .unwrap();
    timeout(Duration::from_secs(10), elector.wait_until_leader())
        .await
        .expect("leads on the upgraded table")
        .unwrap();
    let roster = Candidates::new(upgraded.clone()).list(&name).await.unwrap();
    let shown: Vec<(&str, bool, u32)> = roster
        .candidates
        .iter()
        .map(|c| (c.candidate.as_str(), c.incarnation.is_some(), c.expiries))
        .collect();
    assert_eq!(shown, [("new", true, 0), ("older", false, 0)]);
    // Connecting again finds nothing to change.
    Store::connect_with(&url, options().table_prefix(&prefix).auto_create(false))
        .await
        .expect("up to date");
    elector.shutdown().await;
}
