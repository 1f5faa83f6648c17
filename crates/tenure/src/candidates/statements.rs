//! The candidate registry's SQL: its statements, built once per store from the dialect and the
//! table prefix, and its table's DDL on each engine (created with the lease's tables).

use crate::backend::tx::{BackendKind, Dialect};

/// The registry table, without the prefix (for the check that it exists).
pub(crate) const TABLES: [&str; 1] = ["candidate"];

/// The registry's statements, with the prefix filled in.
#[derive(Debug)]
pub(crate) struct Statements {
    /// Every row of a name, with the clock. Parameter: name.
    pub(super) of_name: String,
    /// Every live row, with the clock: their names and candidates. Parameter: now (µs).
    pub(super) live: String,
    /// Parameters: name, candidate, priority, observer, metadata, since, seen, expires (µs),
    /// ttl_ms, renew_ms.
    pub(super) insert: String,
    /// Parameters: priority, observer, metadata, since, seen, expires (µs), ttl_ms,
    /// renew_ms, name, candidate.
    pub(super) update: String,
    /// Parameters: name, candidate.
    pub(super) delete: String,
    /// Rows of a name that expired before an instant. Parameters: name, before (µs).
    pub(super) purge: String,
}

impl Statements {
    pub(crate) fn new(prefix: &str, d: &Dialect) -> Statements {
        let p = d.param;
        let t = d.text;
        let table = format!("{prefix}candidate");
        let columns = format!(
            "{} AS name, {} AS candidate, priority, observer, {} AS metadata, \
             {} AS since_us, {} AS seen_us, {} AS expires_us, ttl_ms, renew_ms",
            t("name"),
            t("candidate"),
            t("metadata"),
            (d.to_us)("since"),
            (d.to_us)("seen_at"),
            (d.to_us)("expires_at"),
        );
        Statements {
            of_name: format!(
                "SELECT {columns} FROM {table} WHERE name = {} ORDER BY candidate",
                p(1)
            ),
            live: format!(
                "SELECT {columns} FROM {table} WHERE expires_at > {} ORDER BY name, candidate",
                (d.from_us)(&p(1))
            ),
            insert: format!(
                "INSERT INTO {table} (name, candidate, priority, observer, metadata, since, \
                 seen_at, expires_at, ttl_ms, renew_ms) \
                 VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                (d.from_us)(&p(6)),
                (d.from_us)(&p(7)),
                (d.from_us)(&p(8)),
                p(9),
                p(10)
            ),
            update: format!(
                "UPDATE {table} SET priority = {}, observer = {}, metadata = {}, since = {}, \
                 seen_at = {}, expires_at = {}, ttl_ms = {}, renew_ms = {} \
                 WHERE name = {} AND candidate = {}",
                p(1),
                p(2),
                p(3),
                (d.from_us)(&p(4)),
                (d.from_us)(&p(5)),
                (d.from_us)(&p(6)),
                p(7),
                p(8),
                p(9),
                p(10)
            ),
            delete: format!(
                "DELETE FROM {table} WHERE name = {} AND candidate = {}",
                p(1),
                p(2)
            ),
            purge: format!(
                "DELETE FROM {table} WHERE name = {} AND expires_at < {}",
                p(1),
                (d.from_us)(&p(2))
            ),
        }
    }
}

/// The registry's DDL on `kind` with `prefix` (none on a backend without SQL).
pub(crate) fn schema(kind: BackendKind, prefix: &str) -> Vec<String> {
    let ddl: &[&str] = match kind {
        BackendKind::Postgres => POSTGRES,
        BackendKind::MySql => MYSQL,
        BackendKind::Sqlite => SQLITE,
        _ => &[],
    };
    ddl.iter().map(|s| s.replace("{p}", prefix)).collect()
}

// Names and candidate ids compare byte for byte, as the lease's: `COLLATE "C"` on PostgreSQL,
// `utf8mb4_bin` on MySQL/MariaDB. Times are the engine's timestamps, written and read as
// microseconds through the dialect, as the lease's; a plain `SELECT *` reads well.

const POSTGRES: &[&str] = &["CREATE TABLE IF NOT EXISTS {p}candidate (
    name TEXT COLLATE \"C\" NOT NULL,
    candidate TEXT COLLATE \"C\" NOT NULL,
    priority BIGINT NOT NULL,
    observer BOOLEAN NOT NULL,
    metadata TEXT,
    since TIMESTAMPTZ NOT NULL,
    seen_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    ttl_ms BIGINT NOT NULL,
    renew_ms BIGINT NOT NULL,
    PRIMARY KEY (name, candidate)
)"];

const MYSQL: &[&str] = &["CREATE TABLE IF NOT EXISTS {p}candidate (
    name VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    candidate VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    priority BIGINT NOT NULL,
    observer BOOLEAN NOT NULL,
    metadata TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    since DATETIME(6) NOT NULL,
    seen_at DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    ttl_ms BIGINT NOT NULL,
    renew_ms BIGINT NOT NULL,
    PRIMARY KEY (name, candidate)
) ENGINE=InnoDB"];

const SQLITE: &[&str] = &["CREATE TABLE IF NOT EXISTS {p}candidate (
    name TEXT NOT NULL,
    candidate TEXT NOT NULL,
    priority INTEGER NOT NULL,
    observer INTEGER NOT NULL,
    metadata TEXT,
    since TEXT NOT NULL,
    seen_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    ttl_ms INTEGER NOT NULL,
    renew_ms INTEGER NOT NULL,
    PRIMARY KEY (name, candidate)
)"];
