//! The spreading layer's SQL: its two tables (`<prefix>spread_member`: who is in a group, with
//! its shard count, cap and weight, live until its ttl after its last tick; `<prefix>spread_group`:
//! the group's own state, its pause) as data, and its statements, built once per store from the
//! dialect and the table prefix.
//!
//! The shard names `GROUP/i` all lie in the range [`GROUP/`, `GROUP0`) (`0` follows `/` in
//! every byte-wise collation, which the lease's names use), so a group's shards are one range
//! of the lease table's primary key.

use crate::backend::tx::{Column, Dialect, Kind, Schema, Table};

/// The columns a member's tick writes, after the key (`group_name`, `member`).
const MEMBER: [&str; 7] = [
    "shards",
    "max_per_member",
    "weight",
    "since",
    "seen_at",
    "expires_at",
    "ttl_ms",
];

/// The layer's statements, with the prefix filled in.
#[derive(Debug)]
pub(super) struct Statements {
    /// The group's row (`paused`). Parameter: the group.
    pub(super) group_row: String,
    /// The group's row, share-locked until the transaction ends (an operator's pause waits for
    /// the ticks under way, and a tick that began after it sees it). Parameter: the group.
    pub(super) lock_group: String,
    /// The group's row, created if missing. Parameters: the group, paused (false), now (µs).
    pub(super) create_group: String,
    /// The group's row set by an operator. Parameters: the group, paused, now (µs), actor.
    pub(super) set_group: String,
    /// A group as one statement sees it (one snapshot on every engine): its live members
    /// (`kind` `member`: the id as `name`, shard count as `n`, cap, weight as `b`, since), the
    /// lease rows of its shards that are live or paused (`shard`: name, holder, term as `n`,
    /// paused as `b`, expiry), and its own row (`group`: paused as `b`). Parameters: the group, now (µs), the range's start
    /// (`GROUP/`) and end (`GROUP0`), now (µs), the group.
    pub(super) view: String,
    /// Every lease row of a group's shards, live or not (an operator's pause or resume).
    /// Parameters: the range's start and end.
    pub(super) shard_names: String,
    /// A member's row, inserted or replaced. Parameters: the group, the member, shards,
    /// max per member, weight, since, seen, expires (µs), ttl_ms.
    pub(super) upsert_member: String,
    /// A member's row, dropped (a clean leave). Parameters: the group, the member.
    pub(super) delete_member: String,
    /// The rows of a group's members that expired before an instant. Parameters: the group,
    /// the instant (µs).
    pub(super) purge_members: String,
    /// Every group with live members and the largest shard count they give. Parameter: now
    /// (µs).
    pub(super) live_groups: String,
}

impl Statements {
    pub(super) fn new(prefix: &str, d: &Dialect) -> Statements {
        let p = d.param;
        let t = d.text;
        let us = d.to_us;
        let at = d.from_us;
        let member = format!("{prefix}spread_member");
        let group = format!("{prefix}spread_group");
        let lease = format!("{prefix}lease");
        let flag = |col: &str| format!("CASE WHEN {col} THEN 1 ELSE 0 END");
        let group_row = format!("SELECT paused FROM {group} WHERE group_name = {}", p(1));
        Statements {
            lock_group: format!("{group_row} {}", d.share_lock),
            group_row,
            create_group: format!(
                "INSERT INTO {group} (group_name, paused, changed_at) VALUES ({}, {}, {}) {}",
                p(1),
                p(2),
                at(&p(3)),
                d.upsert(&["group_name"], &[])
            ),
            set_group: format!(
                "INSERT INTO {group} (group_name, paused, changed_at, changed_by) \
                 VALUES ({}, {}, {}, {}) {}",
                p(1),
                p(2),
                at(&p(3)),
                p(4),
                d.upsert(&["group_name"], &["paused", "changed_at", "changed_by"])
            ),
            view: format!(
                "SELECT 'member' AS kind, {} AS name, NULL AS holder, shards AS n, \
                 max_per_member AS cap, weight AS b, {} AS at_us \
                 FROM {member} WHERE group_name = {} AND expires_at > {} \
                 UNION ALL \
                 SELECT 'shard' AS kind, {} AS name, {} AS holder, term AS n, NULL AS cap, \
                 {} AS b, {} AS at_us \
                 FROM {lease} WHERE name >= {} AND name < {} AND (expires_at > {} OR paused) \
                 UNION ALL \
                 SELECT 'group' AS kind, {} AS name, NULL AS holder, 0 AS n, NULL AS cap, \
                 {} AS b, {} AS at_us FROM {group} WHERE group_name = {}",
                t("member"),
                us("since"),
                p(1),
                at(&p(2)),
                t("name"),
                t("holder"),
                flag("paused"),
                us("expires_at"),
                p(3),
                p(4),
                at(&p(5)),
                t("group_name"),
                flag("paused"),
                us("changed_at"),
                p(6),
            ),
            shard_names: format!(
                "SELECT {} AS name FROM {lease} WHERE name >= {} AND name < {} ORDER BY name",
                t("name"),
                p(1),
                p(2)
            ),
            upsert_member: format!(
                "INSERT INTO {member} (group_name, member, {}) \
                 VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}) {}",
                MEMBER.join(", "),
                p(1),
                p(2),
                p(3),
                p(4),
                p(5),
                at(&p(6)),
                at(&p(7)),
                at(&p(8)),
                p(9),
                d.upsert(&["group_name", "member"], &MEMBER)
            ),
            delete_member: format!(
                "DELETE FROM {member} WHERE group_name = {} AND member = {}",
                p(1),
                p(2)
            ),
            purge_members: format!(
                "DELETE FROM {member} WHERE group_name = {} AND expires_at < {}",
                p(1),
                at(&p(2))
            ),
            live_groups: live_groups(prefix, d, None),
        }
    }
}

/// The live groups (their names as `name`, the largest shard count of their live members as
/// `shards`): all of them, or those among `among` names (parameters after now). Parameters:
/// now (µs), then the names.
pub(super) fn live_groups(prefix: &str, d: &Dialect, among: Option<usize>) -> String {
    let p = d.param;
    let names = match among {
        Some(n) => {
            let names: Vec<String> = (2..2 + n).map(p).collect();
            format!(" AND group_name IN ({})", names.join(", "))
        }
        None => String::new(),
    };
    format!(
        "SELECT {} AS name, MAX(shards) AS shards FROM {prefix}spread_member \
         WHERE expires_at > {}{names} GROUP BY group_name ORDER BY group_name",
        (d.text)("group_name"),
        (d.from_us)(&p(1)),
    )
}

/// The layer's tables. Group names and member ids compare byte for byte, as the lease's
/// names; times are the engine's timestamps, as the lease's, so a plain `SELECT *` reads well.
pub(crate) const SCHEMA: Schema = Schema {
    layer: "spread",
    tables: &[
        Table {
            name: "spread_member",
            columns: &[
                Column::new("group_name", Kind::Name(191)),
                Column::new("member", Kind::Name(191)),
                Column::new("shards", Kind::Int),
                Column::new("max_per_member", Kind::Int).null(),
                Column::new("weight", Kind::Int),
                Column::new("since", Kind::Time),
                Column::new("seen_at", Kind::Time),
                Column::new("expires_at", Kind::Time),
                Column::new("ttl_ms", Kind::Int),
            ],
            primary_key: &["group_name", "member"],
            indexes: &[],
        },
        Table {
            name: "spread_group",
            columns: &[
                Column::new("group_name", Kind::Name(191)),
                Column::new("paused", Kind::Bool),
                Column::new("changed_at", Kind::Time),
                Column::new("changed_by", Kind::Text).null(),
            ],
            primary_key: &["group_name"],
            indexes: &[],
        },
    ],
};
