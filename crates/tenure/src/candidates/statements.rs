//! The candidate registry's SQL: its statements, built once per store from the dialect and the
//! table prefix, and its table as data (created with the lease's tables).

use crate::backend::tx::{Column, Dialect, Kind, Schema, Table};

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

/// The registry's table. Names and candidate ids compare byte for byte, as the lease's; times
/// are the engine's timestamps, as the lease's, so a plain `SELECT *` reads well.
pub(crate) const SCHEMA: Schema = Schema {
    layer: "candidates",
    tables: &[Table {
        name: "candidate",
        columns: &[
            Column::new("name", Kind::Name(191)),
            Column::new("candidate", Kind::Name(191)),
            Column::new("priority", Kind::Int),
            Column::new("observer", Kind::Bool),
            Column::new("metadata", Kind::Text).null(),
            Column::new("since", Kind::Time),
            Column::new("seen_at", Kind::Time),
            Column::new("expires_at", Kind::Time),
            Column::new("ttl_ms", Kind::Int),
            Column::new("renew_ms", Kind::Int),
        ],
        primary_key: &["name", "candidate"],
        indexes: &[],
    }],
};
