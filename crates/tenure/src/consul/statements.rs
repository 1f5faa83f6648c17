//! The Consul layer's SQL: its statements, built once per store from the dialect and the table
//! prefix, and its tables' DDL on each engine (applied with the lease tables by `migrate`,
//! printed by `tenure migrate --print`).

use crate::backend::tx::counter::{self, Counter};

use crate::backend::tx::{Column, Dialect, Index, Kind, Schema, Table};

/// The statements of the Consul tables, with the prefix filled in.
#[derive(Debug)]
pub(crate) struct Statements {
    /// The index: every write takes it first (Consul's Raft index).
    pub(super) index: Counter,
    /// The index of the last change to the keys (Consul's `kvs` table index, deletes
    /// included): a missing key's answer, and an empty prefix's.
    pub(super) kvs_index: Counter,
    /// The index of the last change to the sessions (created or ended; renewals are not
    /// changes): every session read's answer.
    pub(super) sessions_index: Counter,
    /// Parameters: key, index, deleted at (µs).
    pub(super) insert_tombstone: String,
    /// Parameter: key.
    pub(super) delete_tombstone: String,
    /// Tombstones from a key on (parameter: from), or between two (from, to).
    pub(super) tombstones_from: String,
    pub(super) tombstones_between: String,
    /// Parameter: deleted before (µs).
    pub(super) reap_tombstones: String,
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
        let sessions = format!("{prefix}consul_session");
        let kv = format!("{prefix}consul_kv");
        let lease = format!("{prefix}lease");
        let tombs = TOMBSTONE.named(prefix);
        let tomb_columns = format!("SELECT {} AS kv_key, tomb_index FROM {tombs}", t("kv_key"));
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
            index: Counter::row(&INDEX, 1, prefix, d),
            kvs_index: Counter::row(&INDEX, 2, prefix, d),
            sessions_index: Counter::row(&INDEX, 3, prefix, d),
            insert_tombstone: format!(
                "INSERT INTO {tombs} (kv_key, tomb_index, deleted_at) VALUES ({}, {}, {})",
                p(1),
                p(2),
                (d.from_us)(&p(3))
            ),
            delete_tombstone: format!("DELETE FROM {tombs} WHERE kv_key = {}", p(1)),
            tombstones_from: format!("{tomb_columns} WHERE kv_key >= {}", p(1)),
            tombstones_between: format!(
                "{tomb_columns} WHERE kv_key >= {} AND kv_key < {}",
                p(1),
                p(2)
            ),
            reap_tombstones: format!(
                "DELETE FROM {tombs} WHERE deleted_at < {}",
                (d.from_us)(&p(1))
            ),
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

/// The counters: row 1, the index every Consul write takes first (`X-Consul-Index` of the
/// store); row 2, the keys' table index; row 3, the sessions' table index.
pub(super) const INDEX: Table = counter::table("consul_index");

/// A deleted key's last index, so that a prefix's index never slides back when a key under it
/// is deleted (Consul's graveyard); reaped after [`TOMBSTONE_TTL`](super::rules).
const TOMBSTONE: Table = Table {
    name: "consul_tombstone",
    columns: &[
        Column::new("kv_key", Kind::Name(191)),
        Column::new("tomb_index", Kind::Int),
        Column::new("deleted_at", Kind::Time),
    ],
    primary_key: &["kv_key"],
    indexes: &[],
};

/// The Consul tables. Keys and session ids compare byte for byte, as tenure's names; times are
/// the engine's timestamps, as the lease's.
pub(crate) const SCHEMA: Schema = Schema {
    layer: "consul",
    tables: &[
        Table {
            name: "consul_session",
            columns: &[
                Column::new("id", Kind::Name(64)),
                Column::new("name", Kind::Text),
                Column::new("node", Kind::Name(191)),
                Column::new("ttl_ms", Kind::Int).null(),
                Column::new("lease_ms", Kind::Int),
                Column::new("lock_delay_ms", Kind::Int),
                Column::new("behavior", Kind::Name(16)),
                Column::new("create_index", Kind::Int),
                Column::new("modify_index", Kind::Int),
                Column::new("expires_at", Kind::Time),
            ],
            primary_key: &["id"],
            indexes: &[],
        },
        Table {
            name: "consul_kv",
            columns: &[
                Column::new("kv_key", Kind::Name(191)),
                Column::new("value", Kind::Bytes),
                Column::new("flags", Kind::Int),
                Column::new("session", Kind::Name(64)).null(),
                Column::new("lock_index", Kind::Int),
                Column::new("create_index", Kind::Int),
                Column::new("modify_index", Kind::Int),
            ],
            primary_key: &["kv_key"],
            indexes: &[Index {
                name: "session",
                columns: &["session"],
            }],
        },
        INDEX,
        TOMBSTONE,
    ],
};

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
