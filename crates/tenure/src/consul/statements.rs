//! The Consul layer's SQL: its statements, built once per store from the dialect and the table
//! prefix, and its tables' DDL on each engine (applied with the lease tables by `migrate`,
//! printed by `tenure migrate --print`).

use crate::backend::tx::{BackendKind, Dialect};

/// The statements of the Consul tables, with the prefix filled in.
#[derive(Debug)]
pub(crate) struct Statements {
    pub(super) lock_index: String,
    pub(super) read_index: String,
    pub(super) insert_index: String,
    pub(super) set_index: String,
    pub(super) session: String,
    pub(super) sessions: String,
    pub(super) sessions_of_node: String,
    pub(super) expired_sessions: String,
    pub(super) insert_session: String,
    pub(super) update_session: String,
    pub(super) delete_session: String,
    pub(super) entry: String,
    pub(super) entries_from: String,
    pub(super) entries_between: String,
    pub(super) entries_of: String,
    pub(super) locked_entries: String,
    pub(super) insert_entry: String,
    pub(super) update_entry: String,
    pub(super) delete_entry: String,
}

impl Statements {
    pub(crate) fn new(prefix: &str, d: &Dialect) -> Statements {
        let p = d.param;
        let t = d.text;
        let index = format!("{prefix}consul_index");
        let sessions = format!("{prefix}consul_session");
        let kv = format!("{prefix}consul_kv");
        let lease = format!("{prefix}lease");
        let session_columns = format!(
            "SELECT {} AS id, {} AS name, {} AS node, ttl_ms, lease_ms, lock_delay_ms, \
             {} AS behavior, create_index, modify_index, {} AS expires_us FROM {sessions}",
            t("id"),
            t("name"),
            t("node"),
            t("behavior"),
            (d.to_us)("expires_at"),
        );
        let entry_columns = format!(
            "SELECT {} AS kv_key, k.value AS value, k.flags AS flags, {} AS session, \
             k.lock_index AS lock_index, k.create_index AS create_index, \
             k.modify_index AS modify_index, {} AS l_holder, l.term AS l_term, \
             {} AS l_acquired_us, {} AS l_expires_us \
             FROM {kv} k LEFT JOIN {lease} l ON l.name = k.kv_key",
            t("k.kv_key"),
            t("k.session"),
            t("l.holder"),
            (d.to_us)("l.acquired_at"),
            (d.to_us)("l.expires_at"),
        );
        Statements {
            lock_index: format!("SELECT idx FROM {index} WHERE id = 1 {}", d.for_update),
            read_index: format!("SELECT idx FROM {index} WHERE id = 1"),
            insert_index: format!("INSERT INTO {index} (id, idx) VALUES (1, 0)"),
            set_index: format!("UPDATE {index} SET idx = {} WHERE id = 1", p(1)),
            session: format!("{session_columns} WHERE id = {}", p(1)),
            sessions: format!("{session_columns} ORDER BY create_index"),
            sessions_of_node: format!(
                "{session_columns} WHERE node = {} ORDER BY create_index",
                p(1)
            ),
            expired_sessions: format!(
                "{session_columns} WHERE expires_at <= {} ORDER BY expires_at",
                (d.from_us)(&p(1))
            ),
            insert_session: format!(
                "INSERT INTO {sessions} (id, name, node, ttl_ms, lease_ms, lock_delay_ms, \
                 behavior, create_index, modify_index, expires_at) \
                 VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
                p(7),
                p(8),
                p(9),
                (d.from_us)(&p(10))
            ),
            update_session: format!(
                "UPDATE {sessions} SET lease_ms = {}, modify_index = {}, expires_at = {} \
                 WHERE id = {}",
                p(1),
                p(2),
                (d.from_us)(&p(3)),
                p(4)
            ),
            delete_session: format!("DELETE FROM {sessions} WHERE id = {}", p(1)),
            entry: format!("{entry_columns} WHERE k.kv_key = {}", p(1)),
            entries_from: format!(
                "{entry_columns} WHERE k.kv_key >= {} ORDER BY k.kv_key",
                p(1)
            ),
            entries_between: format!(
                "{entry_columns} WHERE k.kv_key >= {} AND k.kv_key < {} ORDER BY k.kv_key",
                p(1),
                p(2)
            ),
            entries_of: format!(
                "{entry_columns} WHERE k.session = {} ORDER BY k.kv_key",
                p(1)
            ),
            locked_entries: format!(
                "{entry_columns} WHERE k.session IS NOT NULL ORDER BY k.kv_key"
            ),
            insert_entry: format!(
                "INSERT INTO {kv} (kv_key, value, flags, session, lock_index, create_index, \
                 modify_index) VALUES ({}, {}, {}, {}, {}, {}, {})",
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
                p(7)
            ),
            update_entry: format!(
                "UPDATE {kv} SET value = {}, flags = {}, session = {}, lock_index = {}, \
                 create_index = {}, modify_index = {} WHERE kv_key = {}",
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                p(6),
                p(7)
            ),
            delete_entry: format!("DELETE FROM {kv} WHERE kv_key = {}", p(1)),
        }
    }
}

/// The first string after every string that starts with `prefix`, in code-point (= UTF-8
/// byte) order: `prefix` with its last character raised by one (dropping any last characters
/// that cannot be raised). `None`: no such bound (every string from `prefix` on).
pub(super) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let mut next = u32::from(last) + 1;
        if (0xD800..0xE000).contains(&next) {
            next = 0xE000;
        }
        if let Some(c) = char::from_u32(next) {
            chars.push(c);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// The Consul tables, without the prefix (for the check that they exist).
pub(crate) const TABLES: [&str; 3] = ["consul_session", "consul_kv", "consul_index"];

/// The DDL of the Consul tables on `kind` with `prefix` (none on a backend without SQL).
pub(crate) fn schema(kind: BackendKind, prefix: &str) -> Vec<String> {
    let ddl: &[&str] = match kind {
        BackendKind::Postgres => POSTGRES,
        BackendKind::MySql => MYSQL,
        BackendKind::Sqlite => SQLITE,
        _ => &[],
    };
    ddl.iter().map(|s| s.replace("{p}", prefix)).collect()
}

// Keys and session ids compare byte for byte, as tenure's names: `COLLATE "C"` on
// PostgreSQL, `utf8mb4_bin` on MySQL/MariaDB. Times are the engine's timestamps, written
// and read as microseconds through the dialect, as the lease's.

const POSTGRES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS {p}consul_session (
    id TEXT COLLATE \"C\" NOT NULL PRIMARY KEY,
    name TEXT NOT NULL,
    node TEXT COLLATE \"C\" NOT NULL,
    ttl_ms BIGINT,
    lease_ms BIGINT NOT NULL,
    lock_delay_ms BIGINT NOT NULL,
    behavior TEXT NOT NULL,
    create_index BIGINT NOT NULL,
    modify_index BIGINT NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
)",
    "CREATE TABLE IF NOT EXISTS {p}consul_kv (
    kv_key TEXT COLLATE \"C\" NOT NULL PRIMARY KEY,
    value BYTEA NOT NULL,
    flags BIGINT NOT NULL,
    session TEXT COLLATE \"C\",
    lock_index BIGINT NOT NULL,
    create_index BIGINT NOT NULL,
    modify_index BIGINT NOT NULL
)",
    "CREATE INDEX IF NOT EXISTS {p}consul_kv_session ON {p}consul_kv (session)",
    "CREATE TABLE IF NOT EXISTS {p}consul_index (id INTEGER NOT NULL PRIMARY KEY, idx BIGINT NOT NULL)",
];

const MYSQL: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS {p}consul_session (
    id VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    name TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    node VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    ttl_ms BIGINT NULL,
    lease_ms BIGINT NOT NULL,
    lock_delay_ms BIGINT NOT NULL,
    behavior VARCHAR(16) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    create_index BIGINT NOT NULL,
    modify_index BIGINT NOT NULL,
    expires_at DATETIME(6) NOT NULL
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS {p}consul_kv (
    kv_key VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    value LONGBLOB NOT NULL,
    flags BIGINT NOT NULL,
    session VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    lock_index BIGINT NOT NULL,
    create_index BIGINT NOT NULL,
    modify_index BIGINT NOT NULL,
    INDEX {p}consul_kv_session (session)
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS {p}consul_index (id INTEGER NOT NULL PRIMARY KEY, idx BIGINT NOT NULL) ENGINE=InnoDB",
];

const SQLITE: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS {p}consul_session (
    id TEXT NOT NULL PRIMARY KEY,
    name TEXT NOT NULL,
    node TEXT NOT NULL,
    ttl_ms INTEGER,
    lease_ms INTEGER NOT NULL,
    lock_delay_ms INTEGER NOT NULL,
    behavior TEXT NOT NULL,
    create_index INTEGER NOT NULL,
    modify_index INTEGER NOT NULL,
    expires_at TEXT NOT NULL
)",
    "CREATE TABLE IF NOT EXISTS {p}consul_kv (
    kv_key TEXT NOT NULL PRIMARY KEY,
    value BLOB NOT NULL,
    flags INTEGER NOT NULL,
    session TEXT,
    lock_index INTEGER NOT NULL,
    create_index INTEGER NOT NULL,
    modify_index INTEGER NOT NULL
)",
    "CREATE INDEX IF NOT EXISTS {p}consul_kv_session ON {p}consul_kv (session)",
    "CREATE TABLE IF NOT EXISTS {p}consul_index (id INTEGER NOT NULL PRIMARY KEY, idx INTEGER NOT NULL)",
];

#[cfg(test)]
mod tests {
    use super::prefix_end;

    #[test]
    fn prefix_bounds() {
        assert_eq!(prefix_end("a/"), Some("a0".to_string()));
        assert_eq!(prefix_end("ab"), Some("ac".to_string()));
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("a\u{10FFFF}"), Some("b".to_string()));
        assert_eq!(prefix_end("\u{D7FF}"), Some("\u{E000}".to_string()));
        for key in ["a/", "a/b", "a/\u{10FFFF}x"] {
            assert!(key < prefix_end("a/").unwrap().as_str());
        }
    }
}
