//! The candidate registry's SQL: its statements, built once per store from the dialect and the
//! table prefix, and its table as data (created with the lease's tables; a table an older build
//! created gains the columns and the index this build added when a store connects).

use crate::backend::tx::{BackendKind, Column, Dialect, Index, Kind, Schema, Table};

/// The most dead registrations one campaign purges: a name with many crashed candidates is
/// cleaned over several campaigns, each bounded.
pub(crate) const PURGE_BATCH: u32 = 1_000;

/// The registry's statements, with the prefix filled in.
#[derive(Debug)]
pub(crate) struct Statements {
    /// Every row of a name, with the clock. Parameter: name.
    pub(super) of_name: String,
    /// Every live row, with the clock: their names and candidates. Parameter: now (µs).
    pub(super) live: String,
    /// What a campaign's rules need, by indexes only (never every dead row): the live rows of
    /// a name; the campaigner's own row and the row of the lease's reservation target,
    /// whatever their state; and one row due for the purge, if any. Parameters: name, now
    /// (µs), name, now (µs), candidate, name, name, purge before (µs), purge before (µs).
    pub(super) for_rules: String,
    /// One row. Parameters: name, candidate.
    pub(super) one: String,
    /// Parameters: name, candidate, priority, observer, metadata, since, seen, expires (µs),
    /// ttl_ms, renew_ms, settle_ms, incarnation.
    pub(super) insert: String,
    /// Parameters: priority, observer, metadata, since, seen, expires (µs), ttl_ms,
    /// renew_ms, settle_ms, incarnation, name, candidate.
    pub(super) update: String,
    /// A tenure of the candidate ended by expiry: its back-off. Parameters: expiries,
    /// backoff until (µs, or NULL), name, candidate.
    pub(super) back_off: String,
    /// An operator handed the name to the candidate. Parameters: chosen after (term), name,
    /// candidate.
    pub(super) choose: String,
    /// A handover target not yet registered, expected to campaign within `renew_ms`: a row
    /// that is not live, its sign of life now (`expires_at` now, a ttl of 0). Parameters: name,
    /// candidate, since, seen, expires (µs), renew_ms, chosen after.
    pub(super) expect_new: String,
    /// The same for a target whose row is not live. Parameters: seen, expires (µs), renew_ms,
    /// chosen after, name, candidate.
    pub(super) expect: String,
    /// A live candidate that holds off (after a demote) stays registered, not campaigning.
    /// Parameters: expires (µs), name, candidate, incarnation.
    pub(super) keep: String,
    /// Parameters: name, candidate.
    pub(super) delete: String,
    /// At most [`PURGE_BATCH`] rows of a name that expired before an instant and whose
    /// back-off ended before it. Parameters: name, name, before (µs), before (µs) (MySQL:
    /// name, before, before).
    pub(super) purge: String,
}

impl Statements {
    pub(crate) fn new(prefix: &str, d: &Dialect, kind: BackendKind) -> Statements {
        let p = d.param;
        let t = d.text;
        let us = d.from_us;
        let table = format!("{prefix}candidate");
        let columns = format!(
            "{} AS name, {} AS candidate, priority, observer, {} AS metadata, \
             {} AS since_us, {} AS seen_us, {} AS expires_us, ttl_ms, renew_ms, settle_ms, \
             {} AS incarnation, expiries, {} AS backoff_us, chosen_after",
            t("name"),
            t("candidate"),
            t("metadata"),
            (d.to_us)("since"),
            (d.to_us)("seen_at"),
            (d.to_us)("expires_at"),
            t("incarnation"),
            (d.to_us)("backoff_until"),
        );
        Statements {
            of_name: format!(
                "SELECT {columns} FROM {table} WHERE name = {} ORDER BY candidate",
                p(1)
            ),
            live: format!(
                "SELECT {columns} FROM {table} WHERE expires_at > {} ORDER BY name, candidate",
                us(&p(1))
            ),
            for_rules: format!(
                "SELECT {columns} FROM {table} WHERE name = {} AND expires_at > {} \
                 UNION ALL \
                 SELECT {columns} FROM {table} WHERE name = {} AND expires_at <= {} \
                 AND (candidate = {} OR candidate = \
                 (SELECT handover_to FROM {prefix}lease WHERE name = {})) \
                 UNION ALL \
                 SELECT * FROM (SELECT {columns} FROM {table} WHERE name = {} AND {} LIMIT 1) \
                 AS due",
                p(1),
                us(&p(2)),
                p(3),
                us(&p(4)),
                p(5),
                p(6),
                p(7),
                dead_rows(d, &p(8), &p(9)),
            ),
            one: format!(
                "SELECT {columns} FROM {table} WHERE name = {} AND candidate = {}",
                p(1),
                p(2)
            ),
            insert: format!(
                "INSERT INTO {table} (name, candidate, priority, observer, metadata, since, \
                 seen_at, expires_at, ttl_ms, renew_ms, settle_ms, incarnation) \
                 VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                us(&p(6)),
                us(&p(7)),
                us(&p(8)),
                p(9),
                p(10),
                p(11),
                p(12)
            ),
            update: format!(
                "UPDATE {table} SET priority = {}, observer = {}, metadata = {}, since = {}, \
                 seen_at = {}, expires_at = {}, ttl_ms = {}, renew_ms = {}, settle_ms = {}, \
                 incarnation = {} WHERE name = {} AND candidate = {}",
                p(1),
                p(2),
                p(3),
                us(&p(4)),
                us(&p(5)),
                us(&p(6)),
                p(7),
                p(8),
                p(9),
                p(10),
                p(11),
                p(12)
            ),
            back_off: format!(
                "UPDATE {table} SET expiries = {}, backoff_until = {} \
                 WHERE name = {} AND candidate = {}",
                p(1),
                us(&p(2)),
                p(3),
                p(4)
            ),
            choose: format!(
                "UPDATE {table} SET chosen_after = {} WHERE name = {} AND candidate = {}",
                p(1),
                p(2),
                p(3)
            ),
            expect_new: format!(
                "INSERT INTO {table} (name, candidate, priority, observer, metadata, since, \
                 seen_at, expires_at, ttl_ms, renew_ms, chosen_after) \
                 VALUES ({}, {}, 0, {}, NULL, {}, {}, {}, 0, {}, {})",
                p(1),
                p(2),
                match kind {
                    BackendKind::Postgres => "FALSE",
                    _ => "0",
                },
                us(&p(3)),
                us(&p(4)),
                us(&p(5)),
                p(6),
                p(7)
            ),
            expect: format!(
                "UPDATE {table} SET seen_at = {}, expires_at = {}, ttl_ms = 0, renew_ms = {}, \
                 chosen_after = {} WHERE name = {} AND candidate = {}",
                us(&p(1)),
                us(&p(2)),
                p(3),
                p(4),
                p(5),
                p(6)
            ),
            keep: format!(
                "UPDATE {table} SET expires_at = {} WHERE name = {} AND candidate = {} \
                 AND incarnation = {}",
                us(&p(1)),
                p(2),
                p(3),
                p(4)
            ),
            delete: format!(
                "DELETE FROM {table} WHERE name = {} AND candidate = {}",
                p(1),
                p(2)
            ),
            purge: match kind {
                // MySQL and MariaDB refuse LIMIT in an IN subquery, and take it on DELETE.
                BackendKind::MySql => format!(
                    "DELETE FROM {table} WHERE name = {} AND {} ORDER BY expires_at \
                     LIMIT {PURGE_BATCH}",
                    p(1),
                    dead_rows(d, &p(2), &p(3)),
                ),
                _ => format!(
                    "DELETE FROM {table} WHERE name = {} AND candidate IN \
                     (SELECT candidate FROM {table} WHERE name = {} AND {} LIMIT {PURGE_BATCH})",
                    p(1),
                    p(2),
                    dead_rows(d, &p(3), &p(4)),
                ),
            },
        }
    }
}

/// The condition on a dead row due for the purge: expired before `before` and not backing
/// off after it (two parameters carrying the same instant).
fn dead_rows(d: &Dialect, before: &str, again: &str) -> String {
    format!(
        "expires_at < {} AND (backoff_until IS NULL OR backoff_until < {})",
        (d.from_us)(before),
        (d.from_us)(again)
    )
}

/// The registry's table. Names and candidate ids compare byte for byte, as the lease's; times
/// are the engine's timestamps, as the lease's, so a plain `SELECT *` reads well. The index on
/// (name, expires_at) serves a campaign's read of the live rows and the purge of the dead ones,
/// however many a name has. The columns after `renew_ms` came with the rules of issue 35: a
/// table an older build created gains them (nullable or defaulted, so the older build still
/// writes it).
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
            Column::new("settle_ms", Kind::Int).default(0),
            Column::new("incarnation", Kind::Name(64)).null(),
            Column::new("expiries", Kind::Int).default(0),
            Column::new("backoff_until", Kind::Time).null(),
            Column::new("chosen_after", Kind::Int).null(),
        ],
        primary_key: &["name", "candidate"],
        indexes: &[Index {
            name: "live",
            columns: &["name", "expires_at"],
        }],
    }],
};
