//! The etcd layer's SQL: its statements, built once per store from the dialect and the table
//! prefix, and its tables as data (created with the lease's tables, printed by `tenure migrate
//! --print`).

use super::rules::span::Span;
use super::validate::MAX_KEY_BYTES;
use crate::backend::tx::counter::{self, Counter};
use crate::backend::tx::{Arg, BackendKind, Column, Dialect, Index, Kind, Schema, Table};

/// A query over a span of keys, in its three shapes: one key, every key from one on, and the
/// keys between two. The key parameters come after `first - 1` others.
#[derive(Debug)]
pub(super) struct Spanned {
    one: String,
    from: String,
    between: String,
}

impl Spanned {
    /// `{head} <the span's condition on kv_key>{tail}`.
    pub(super) fn new(d: &Dialect, head: &str, tail: &str, first: usize) -> Spanned {
        let (a, b) = ((d.param)(first), (d.param)(first + 1));
        Spanned {
            one: format!("{head} kv_key = {a}{tail}"),
            from: format!("{head} kv_key >= {a}{tail}"),
            between: format!("{head} kv_key >= {a} AND kv_key < {b}{tail}"),
        }
    }

    /// The statement for `span` and the span's parameters (`None` for an empty span: no key).
    pub(super) fn pick<'s>(&'s self, span: &'s Span) -> Option<(&'s str, Vec<Arg<'s>>)> {
        Some(match span {
            Span::One(k) => (self.one.as_str(), vec![Arg::Bytes(k)]),
            Span::From(k) => (self.from.as_str(), vec![Arg::Bytes(k)]),
            Span::Between(k, e) => (self.between.as_str(), vec![Arg::Bytes(k), Arg::Bytes(e)]),
            Span::Empty => return None,
        })
    }
}

/// How many parameters `insert_event` takes.
const EVENT_PARAMS: usize = 13;

/// `insert_kv`, `update_kv` and `delete_kv`, each with `insert_event` in the same statement:
/// the key's parameters first, the event's after them.
#[derive(Debug)]
pub(super) struct Logged {
    pub(super) insert: Signalling,
    pub(super) update: Signalling,
    pub(super) delete: Signalling,
}

/// A statement, and where the engine sends change signals by statement, the same statement
/// also sending one (its wire payload the last parameter): a transaction's first change
/// signals the layer's topic with it.
#[derive(Debug)]
pub(super) struct Signalling {
    pub(super) quiet: String,
    pub(super) signalling: Option<String>,
}

impl Signalling {
    /// `WITH k AS ({key}) <the event's insert>`: the key statement's `key_params` parameters,
    /// then the event's ([`EVENT_PARAMS`], `insert_event` of its first parameter's number).
    fn new(
        d: &Dialect,
        prefix: &str,
        key: &str,
        key_params: usize,
        insert_event: &dyn Fn(usize) -> String,
    ) -> Signalling {
        let event = insert_event(key_params + 1);
        let last = key_params + EVENT_PARAMS;
        Signalling {
            quiet: format!("WITH k AS ({key}) {event}"),
            signalling: d
                .notify_call(prefix, &(d.param)(last + 1))
                .map(|call| format!("WITH k AS ({key}), e AS ({event}) SELECT {call}")),
        }
    }
}

/// The statements of the etcd tables, with the prefix filled in.
#[derive(Debug)]
pub(crate) struct Statements {
    /// The dialect's positional parameter (for lists built per call).
    param: fn(usize) -> String,
    /// The dialect's row lock (for statements built per call).
    pub(super) for_update: &'static str,
    /// The revision: every write takes it first.
    pub(super) revision: Counter,
    /// The revision, read with a share lock (a read that must not see it move).
    pub(super) revision_shared: String,
    /// The compaction floor.
    pub(super) floor: Counter,
    pub(super) kvs: Spanned,
    pub(super) kvs_count: Spanned,
    /// The bytes the etcd tables take, indexes included, as `n` (etcd's `dbSize`).
    pub(super) size: String,
    pub(super) kvs_of_lease: String,
    pub(super) insert_kv: String,
    pub(super) update_kv: String,
    pub(super) delete_kv: String,
    /// Events after a revision (parameter 1), in a span.
    pub(super) events_after: Spanned,
    /// Events from revision parameter 1 through parameter 2, in a span.
    pub(super) events_between: Spanned,
    pub(super) insert_event: String,
    /// Where one statement can change two tables (PostgreSQL's data-modifying `WITH`): a key's
    /// row written and its event logged in one round trip.
    pub(super) logged: Option<Logged>,
    pub(super) delete_events_below: String,
    pub(super) lease: String,
    pub(super) lease_locked: String,
    pub(super) leases_live: String,
    /// Leases ended by parameter 1, earliest first (a LIMIT and the lock are appended).
    pub(super) leases_ended: String,
    pub(super) insert_lease: String,
    pub(super) delete_lease: String,
    /// Renews leases ended after parameter 2 to parameter 1 plus their TTL (`IN (…)` is
    /// appended).
    pub(super) renew_leases: String,
    /// Leases by id (`IN (…)` is appended).
    pub(super) leases_by_id: String,
    /// Where `UPDATE … RETURNING` exists: renews the leases that live at the database's now
    /// to now plus their TTL, and answers the rows renewed with the revision (`IN (…)` and
    /// [`renewed`](Statements::renewed) are appended) — a keep-alive in one statement.
    pub(super) renew_leases_now: Option<String>,
    /// The `RETURNING` of [`renew_leases_now`](Statements::renew_leases_now).
    pub(super) renewed: String,
    pub(super) members_live: String,
    pub(super) member: String,
    pub(super) insert_member: String,
    pub(super) update_member: String,
    pub(super) heartbeat_member: String,
    pub(super) delete_member: String,
    pub(super) delete_ended_members: String,
    /// The fence on a lock key: parameters key, a revision at which the lock was held.
    pub(crate) fence: String,
    /// What an operator sees.
    pub(super) overview: super::overview::Sql,
}

impl Statements {
    pub(crate) fn new(prefix: &str, d: &Dialect, kind: BackendKind) -> Statements {
        let p = d.param;
        let (kv, ev) = (KV.named(prefix), EVENT.named(prefix));
        let (lease, member) = (LEASE.named(prefix), MEMBER.named(prefix));
        let revision = REVISION.named(prefix);
        let kv_columns = format!(
            "SELECT kv_key, value, create_revision, mod_revision, version, lease FROM {kv}"
        );
        let ev_columns = format!(
            "SELECT revision, seq, kind, kv_key, value, create_revision, version, lease, \
             prev_value, prev_create_revision, prev_mod_revision, prev_version, prev_lease \
             FROM {ev}"
        );
        let lease_columns = format!(
            "SELECT id, ttl_s, {} AS granted_us, {} AS expires_us FROM {lease}",
            (d.to_us)("granted_at"),
            (d.to_us)("expires_at")
        );
        let member_columns = format!(
            "SELECT id, {} AS name, {} AS peer_urls, {} AS client_urls, {} AS started_us, \
             {} AS expires_us FROM {member}",
            (d.text)("name"),
            (d.text)("peer_urls"),
            (d.text)("client_urls"),
            (d.to_us)("started_at"),
            (d.to_us)("expires_at")
        );
        let at = |n: usize| (d.from_us)(&p(n));
        let params = |from: usize, to: usize| (from..=to).map(p).collect::<Vec<_>>().join(", ");
        let insert_kv = format!(
            "INSERT INTO {kv} (kv_key, value, create_revision, mod_revision, version, lease) \
             VALUES ({})",
            params(1, 6)
        );
        let update_kv = format!(
            "UPDATE {kv} SET value = {}, create_revision = {}, mod_revision = {}, version = {}, \
             lease = {} WHERE kv_key = {}",
            p(1),
            p(2),
            p(3),
            p(4),
            p(5),
            p(6)
        );
        let delete_kv = format!("DELETE FROM {kv} WHERE kv_key = {}", p(1));
        // Its parameters from `first` on.
        let insert_event = |first: usize| {
            format!(
                "INSERT INTO {ev} (revision, seq, kind, kv_key, value, create_revision, version, \
                 lease, prev_value, prev_create_revision, prev_mod_revision, prev_version, \
                 prev_lease) VALUES ({})",
                params(first, first + EVENT_PARAMS - 1)
            )
        };
        Statements {
            param: d.param,
            for_update: d.for_update,
            revision: Counter::new(&REVISION, prefix, d),
            revision_shared: format!("SELECT idx FROM {revision} WHERE id = 1 {}", d.share_lock),
            floor: Counter::new(&FLOOR, prefix, d),
            kvs: Spanned::new(d, &format!("{kv_columns} WHERE"), " ORDER BY kv_key", 1),
            kvs_count: Spanned::new(d, &format!("SELECT COUNT(*) AS n FROM {kv} WHERE"), "", 1),
            kvs_of_lease: format!("{kv_columns} WHERE lease = {} ORDER BY kv_key", p(1)),
            logged: (kind == BackendKind::Postgres).then(|| Logged {
                insert: Signalling::new(d, prefix, &insert_kv, 6, &insert_event),
                update: Signalling::new(d, prefix, &update_kv, 6, &insert_event),
                delete: Signalling::new(d, prefix, &delete_kv, 1, &insert_event),
            }),
            insert_kv,
            update_kv,
            delete_kv,
            events_after: Spanned::new(
                d,
                &format!("{ev_columns} WHERE revision > {} AND", p(1)),
                " ORDER BY revision, seq",
                2,
            ),
            events_between: Spanned::new(
                d,
                &format!(
                    "{ev_columns} WHERE revision >= {} AND revision <= {} AND",
                    p(1),
                    p(2)
                ),
                " ORDER BY revision, seq",
                3,
            ),
            insert_event: insert_event(1),
            delete_events_below: format!("DELETE FROM {ev} WHERE revision < {}", p(1)),
            lease: format!("{lease_columns} WHERE id = {}", p(1)),
            lease_locked: format!("{lease_columns} WHERE id = {} {}", p(1), d.for_update),
            leases_live: format!(
                "{lease_columns} WHERE expires_at > {} ORDER BY expires_at, id",
                at(1)
            ),
            leases_ended: format!(
                "{lease_columns} WHERE expires_at <= {} ORDER BY expires_at, id",
                at(1)
            ),
            insert_lease: format!(
                "INSERT INTO {lease} (id, ttl_s, granted_at, expires_at) VALUES ({}, {}, {}, {})",
                p(1),
                p(2),
                at(3),
                at(4)
            ),
            delete_lease: format!("DELETE FROM {lease} WHERE id = {}", p(1)),
            renew_leases: format!(
                "UPDATE {lease} SET expires_at = {} WHERE expires_at > {} AND id",
                (d.from_us)(&format!("({} + ttl_s * 1000000)", p(1))),
                at(2)
            ),
            leases_by_id: format!("{lease_columns} WHERE id"),
            renew_leases_now: d.update_returning.then(|| {
                format!(
                    "UPDATE {lease} SET expires_at = {} WHERE expires_at > {} AND id",
                    (d.from_us)(&format!("({} + ttl_s * 1000000)", d.now_us)),
                    (d.from_us)(d.now_us)
                )
            }),
            renewed: format!(
                " RETURNING id, ttl_s, {} AS granted_us, {} AS expires_us, \
                 (SELECT idx FROM {revision} WHERE id = 1) AS revision_idx",
                (d.to_us)("granted_at"),
                (d.to_us)("expires_at")
            ),
            members_live: format!("{member_columns} WHERE expires_at > {}", at(1)),
            member: format!("{member_columns} WHERE id = {}", p(1)),
            insert_member: format!(
                "INSERT INTO {member} (id, name, peer_urls, client_urls, started_at, expires_at) \
                 VALUES ({}, {}, {}, {}, {}, {})",
                p(1),
                p(2),
                p(3),
                p(4),
                at(5),
                at(6)
            ),
            update_member: format!(
                "UPDATE {member} SET name = {}, peer_urls = {}, client_urls = {}, \
                 started_at = {}, expires_at = {} WHERE id = {}",
                p(1),
                p(2),
                p(3),
                at(4),
                at(5),
                p(6)
            ),
            heartbeat_member: format!(
                "UPDATE {member} SET expires_at = {} WHERE id = {} AND expires_at > {}",
                at(1),
                p(2),
                at(3)
            ),
            delete_member: format!("DELETE FROM {member} WHERE id = {}", p(1)),
            delete_ended_members: format!("DELETE FROM {member} WHERE expires_at <= {}", at(1)),
            fence: fence(&kv, d),
            overview: super::overview::Sql::new(&kv, &lease, d, kind),
            size: size_of(kind, prefix),
        }
    }

    /// `IN (…)` with `n` parameters numbered from `first`.
    pub(super) fn in_list(&self, first: usize, n: usize) -> String {
        let list: Vec<String> = (first..first + n).map(self.param).collect();
        format!(" IN ({})", list.join(", "))
    }
}

/// The fence statement on the key table `kv`: one row while the key exists as it was at the
/// given revision (created at or before it), locked against a delete (an unlock, a revoke, an
/// expiry) until the caller's transaction ends — a share lock on PostgreSQL and MySQL (which
/// also refuses a read-only server, as the lease's fence), SQLite's write lock (taken by the
/// no-op update).
fn fence(kv: &str, d: &Dialect) -> String {
    let (key, rev) = ((d.param)(1), (d.param)(2));
    if d.share_lock.is_empty() {
        return format!(
            "UPDATE {kv} SET create_revision = create_revision \
             WHERE kv_key = {key} AND create_revision <= {rev} RETURNING create_revision"
        );
    }
    let writable = d
        .read_only
        .map(|read_only| format!(" AND {read_only} = 0"))
        .unwrap_or_default();
    format!(
        "SELECT create_revision FROM {kv} WHERE kv_key = {key} AND create_revision <= {rev}\
         {writable} {}",
        d.share_lock
    )
}

/// The revision counter: every write takes it first and adds one.
pub(super) const REVISION: Table = counter::table("etcd_revision");
/// The compaction floor: the oldest revision still readable (0: nothing compacted yet).
pub(super) const FLOOR: Table = counter::table("etcd_compaction");

// Keys are bytes of at most MAX_KEY_BYTES, compared byte for byte.
#[allow(clippy::cast_possible_truncation)]
const KEY: Kind = Kind::Key(MAX_KEY_BYTES as u16);

/// The keys as they are now.
const KV: Table = Table {
    name: "etcd_kv",
    columns: &[
        Column::new("kv_key", KEY),
        Column::new("value", Kind::Bytes),
        Column::new("create_revision", Kind::Int),
        Column::new("mod_revision", Kind::Int),
        Column::new("version", Kind::Int),
        Column::new("lease", Kind::Int),
    ],
    primary_key: &["kv_key"],
    indexes: &[Index {
        name: "lease",
        columns: &["lease"],
    }],
};

/// The log: one row per changed key per revision, with the key's state after (`kind` 0, a
/// put) or its deletion (`kind` 1), and its state before (`prev_version` 0: it did not exist).
const EVENT: Table = Table {
    name: "etcd_event",
    columns: &[
        Column::new("revision", Kind::Int),
        Column::new("seq", Kind::Int),
        Column::new("kind", Kind::Int),
        Column::new("kv_key", KEY),
        Column::new("value", Kind::Bytes),
        Column::new("create_revision", Kind::Int),
        Column::new("version", Kind::Int),
        Column::new("lease", Kind::Int),
        Column::new("prev_value", Kind::Bytes),
        Column::new("prev_create_revision", Kind::Int),
        Column::new("prev_mod_revision", Kind::Int),
        Column::new("prev_version", Kind::Int),
        Column::new("prev_lease", Kind::Int),
    ],
    primary_key: &["revision", "seq"],
    indexes: &[],
};

/// The leases, each ending at `expires_at` by the database's clock.
const LEASE: Table = Table {
    name: "etcd_lease",
    columns: &[
        Column::new("id", Kind::Int),
        Column::new("ttl_s", Kind::Int),
        Column::new("granted_at", Kind::Time),
        Column::new("expires_at", Kind::Time),
    ],
    primary_key: &["id"],
    indexes: &[Index {
        name: "expires",
        columns: &["expires_at"],
    }],
};

/// The members: every `tenure serve` that speaks etcd's API on this database, while it
/// heartbeats.
const MEMBER: Table = Table {
    name: "etcd_member",
    columns: &[
        Column::new("id", Kind::Int),
        Column::new("name", Kind::Name(191)),
        Column::new("peer_urls", Kind::Text),
        Column::new("client_urls", Kind::Text),
        Column::new("started_at", Kind::Time),
        Column::new("expires_at", Kind::Time),
    ],
    primary_key: &["id"],
    indexes: &[],
};

/// The statement of the bytes the etcd tables take on disk, their indexes included, as `n`:
/// PostgreSQL's relation sizes, MySQL's `information_schema` (InnoDB's estimate, updated with
/// its statistics), the pages of SQLite's `dbstat`.
fn size_of(kind: BackendKind, prefix: &str) -> String {
    let tables = SCHEMA
        .tables
        .iter()
        .map(|t| format!("'{}'", t.named(prefix)))
        .collect::<Vec<_>>()
        .join(", ");
    match kind {
        BackendKind::Postgres => format!(
            "SELECT CAST(COALESCE(SUM(pg_total_relation_size(to_regclass(t))), 0) AS BIGINT) AS n \
             FROM unnest(ARRAY[{tables}]) AS t"
        ),
        BackendKind::MySql => format!(
            "SELECT CAST(COALESCE(SUM(data_length + index_length), 0) AS SIGNED) AS n \
             FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND table_name IN ({tables})"
        ),
        BackendKind::Sqlite | BackendKind::Memory => format!(
            "SELECT COALESCE(SUM(pgsize), 0) AS n FROM dbstat \
             WHERE aggregate = TRUE AND name IN \
             (SELECT name FROM sqlite_master WHERE tbl_name IN ({tables}))"
        ),
    }
}

/// The etcd tables.
pub(crate) const SCHEMA: Schema = Schema {
    layer: "etcd",
    tables: &[KV, EVENT, LEASE, MEMBER, REVISION, FLOOR],
};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendKind;

    #[test]
    fn tables_render_on_every_engine() {
        let my = SCHEMA.script(BackendKind::MySql, "tenure_");
        let kv = my.iter().find(|s| s.contains("tenure_etcd_kv (")).unwrap();
        assert!(kv.contains("kv_key VARBINARY(2048) NOT NULL"), "{kv}");
        assert!(kv.contains("INDEX tenure_etcd_kv_lease (lease)"), "{kv}");
        let pg = SCHEMA.script(BackendKind::Postgres, "tenure_");
        assert!(pg.iter().any(|s| s.contains("kv_key BYTEA NOT NULL")));
        assert!(pg.iter().any(|s| s.contains("PRIMARY KEY (revision, seq)")));
        assert_eq!(SCHEMA.tables.len(), 6);
    }
}
