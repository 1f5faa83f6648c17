//! Every statement a backend runs, built once per store from the table prefix and the engine's
//! [`Dialect`]: one small function per statement, each saying its parameters in order.

use super::dialect::{Dialect, EpochSql};

/// The schema version this build writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// How many (name, term) pairs one renewal statement carries (two parameters each, well under
/// every engine's limit).
pub(crate) const RENEW_CHUNK: usize = 5000;

/// How many leases one statement of a batch of lease operations carries (`Tx::leases`): ten
/// parameters each in the write, well under every engine's limit.
pub(crate) const BATCH_CHUNK: usize = 1000;

/// The lease columns a batch writes, in the order of their parameters.
const WRITTEN: [&str; 10] = [
    "name",
    "holder",
    "term",
    "acquired_at",
    "renewed_at",
    "expires_at",
    "ttl_ms",
    "metadata",
    "handover_to",
    "paused",
];

/// Every statement a backend runs, with the table prefix filled in.
pub(crate) struct Statements {
    /// The table prefix they were built with.
    pub prefix: String,
    pub lock_row: String,
    /// The clock, and (where the dialect must check it) whether the server is read-only, and
    /// the epoch's columns (`epoch`).
    pub now: String,
    /// Where the epoch comes from (`EpochSql::None` where epochs are switched off).
    pub epoch: EpochSql,
    /// MySQL/MariaDB: the epoch row, locked (columns `server_id`, `epoch`).
    pub epoch_lock: String,
    /// MySQL/MariaDB: a new epoch row. Parameters: server id, floor, started (microseconds).
    pub epoch_insert: String,
    /// MySQL/MariaDB: the epoch row, replaced. Parameters as for `epoch_insert`.
    pub epoch_update: String,
    /// The clock alone, for a transaction that does not write.
    pub clock: String,
    /// Whether `now` has a `read_only` column to check before writing.
    pub checks_read_only: bool,
    pub get_row: String,
    pub list: String,
    pub insert_row: String,
    pub update_row: String,
    pub insert_history: String,
    /// [`insert_history`](Statements::insert_history) and the event's announcement in one
    /// statement (one round trip, not two), where the engine can push.
    pub insert_history_and_notify: Option<String>,
    /// The announcement of a change of the lease named by parameter 1 (sent at commit), where
    /// the engine can push: `NOTIFY <prefix>lease, '<name>'`.
    pub notify: Option<String>,
    pub prune_history: String,
    pub history: String,
    pub schema: Vec<String>,
    /// Stored routines, installed after the schema (see [`Dialect::routines`]).
    pub routines: Vec<String>,
    pub schema_version: String,
    pub init_version: String,
    pub probe_lease: String,
    pub last_tick: String,
    /// The fence: parameters name, holder, term; one row while that tenure is held live,
    /// share-locked (SQLite: write-locked) until the transaction ends.
    pub fence: String,
    pub lock_tick: String,
    pub insert_tick: String,
    pub update_tick: String,
    pub lease_table: String,
    pub schema_table: String,
    /// Tables beside the lease's that must exist (MySQL/MariaDB: the epoch row's), each with
    /// the statement that probes it.
    pub probes: Vec<(String, String)>,
    /// Whether `UPDATE … RETURNING` exists (PostgreSQL, SQLite); else the rows are read back.
    returning: bool,
    dialect: Dialect,
}

/// The table names, with the prefix filled in.
struct Tables {
    lease: String,
    history: String,
    tick: String,
    schema: String,
}

impl Statements {
    /// The statements of `prefix` in dialect `d`; `epochs: false` mints every term in epoch
    /// zero (a test's setting: how tenure behaved before epochs).
    pub(crate) fn new(prefix: &str, d: &Dialect, epochs: bool) -> Statements {
        let t = Tables {
            lease: format!("{prefix}lease"),
            history: format!("{prefix}history"),
            tick: format!("{prefix}tick"),
            schema: format!("{prefix}schema"),
        };
        let epoch = if epochs { d.epoch } else { EpochSql::None };
        let epoch_table = format!("{prefix}epoch");
        let p = d.param;
        // The read-only check rides on the `now` statement, which the model's transaction
        // skips where the row lock already read the clock.
        debug_assert!(!(d.now_with_lock && d.read_only.is_some()));
        Statements {
            prefix: prefix.to_string(),
            lock_row: lock_row(&t, d, epoch),
            now: now(d, epoch, &epoch_table),
            epoch,
            epoch_lock: format!(
                "SELECT server_id, epoch FROM {epoch_table} WHERE id = 1 {}",
                d.for_update
            ),
            epoch_insert: format!(
                "INSERT INTO {epoch_table} (id, server_id, epoch, started_at) \
                 VALUES (1, {}, {}, {})",
                p(1),
                p(2),
                (d.from_us)(&p(3))
            ),
            epoch_update: format!(
                "UPDATE {epoch_table} SET server_id = {}, epoch = {}, started_at = {} WHERE id = 1",
                p(1),
                p(2),
                (d.from_us)(&p(3))
            ),
            probes: match epoch {
                EpochSql::ServerRow => vec![(
                    epoch_table.clone(),
                    format!("SELECT id FROM {epoch_table} WHERE 1 = 0"),
                )],
                _ => Vec::new(),
            },
            clock: format!("SELECT {} AS now_us", d.now_us),
            checks_read_only: d.read_only.is_some(),
            get_row: format!(
                "{} LEFT JOIN {} l ON l.name = {}",
                clock_join(d),
                t.lease,
                (d.param)(1)
            ),
            list: format!(
                "{} LEFT JOIN {} l ON 1 = 1 ORDER BY l.name",
                clock_join(d),
                t.lease
            ),
            insert_row: insert_row(&t, d),
            update_row: update_row(&t, d),
            insert_history: insert_history(&t, d),
            insert_history_and_notify: d
                .notify_call(prefix, &p(1))
                .map(|call| format!("WITH h AS ({}) SELECT {call}", insert_history(&t, d))),
            notify: d
                .notify_call(prefix, &p(1))
                .map(|call| format!("SELECT {call}")),
            prune_history: prune_history(&t, d),
            history: history(&t, d),
            schema: d.schema.iter().map(|s| s.replace("{p}", prefix)).collect(),
            routines: (d.routines)(prefix),
            schema_version: format!("SELECT MAX(version) AS version FROM {}", t.schema),
            init_version: init_version(&t),
            probe_lease: format!("SELECT name FROM {} WHERE 1 = 0", t.lease),
            last_tick: last_tick(&t, d),
            fence: (d.fence)(&t.lease),
            lock_tick: lock_tick(&t, d),
            insert_tick: insert_tick(&t, d),
            update_tick: update_tick(&t, d),
            lease_table: t.lease,
            schema_table: t.schema,
            returning: d.update_returning,
            dialect: *d,
        }
    }

    /// How the engine spells its SQL.
    pub(crate) fn dialect(&self) -> &Dialect {
        &self.dialect
    }

    /// The keep-alive of `n` held leases ([`Op::Renew`](crate::model::Op::Renew) for each): an
    /// `UPDATE` whose parameters are, in order, now, now, holder, now, holder, then `n` (name,
    /// term) pairs; and, where the engine has no `UPDATE … RETURNING`, a `SELECT` of the renewed
    /// rows whose parameters are holder, now, then the pairs.
    pub(crate) fn renew(&self, n: usize) -> (String, Option<String>) {
        let d = &self.dialect;
        let p = d.param;
        let pairs = |first: usize| {
            (0..n)
                .map(|i| format!("({}, {})", p(first + 2 * i), p(first + 2 * i + 1)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let cols = lease_columns(d, "");
        let update = format!(
            "UPDATE {lease} SET renewed_at = {now}, expires_at = {expires}, handover_to = NULL \
             WHERE holder = {holder} AND expires_at > {now_again} AND NOT paused \
             AND (handover_to IS NULL OR handover_to = {holder_again}) \
             AND (name, term) IN ({pairs}){returning}",
            lease = self.lease_table,
            now = (d.from_us)(&p(1)),
            expires = (d.from_us)(&format!("({} + ttl_ms * 1000)", p(2))),
            holder = p(3),
            now_again = (d.from_us)(&p(4)),
            holder_again = p(5),
            pairs = pairs(6),
            returning = if self.returning {
                format!(" RETURNING {cols}")
            } else {
                String::new()
            },
        );
        let read_back = (!self.returning).then(|| {
            format!(
                "SELECT {cols} FROM {lease} WHERE holder = {} AND renewed_at = {} \
                 AND (name, term) IN ({})",
                p(1),
                (d.from_us)(&p(2)),
                pairs(3),
                lease = self.lease_table,
            )
        });
        (update, read_back)
    }

    /// The rows of `n` leases, locked in the order of their names (so that two batches never
    /// wait for each other in a cycle). Parameters: the `n` names.
    pub(crate) fn lock_rows(&self, n: usize) -> String {
        let d = &self.dialect;
        let names: Vec<String> = (1..=n).map(d.param).collect();
        format!(
            "SELECT {} FROM {} WHERE name IN ({}) ORDER BY name {}",
            lease_columns(d, ""),
            self.lease_table,
            names.join(", "),
            d.for_update
        )
    }

    /// `n` lease rows written as the model decided them, in one statement: rows that exist
    /// and that this transaction has locked (`existing`: an insert that meets its row updates
    /// it, which nobody else can have changed), or new rows (a plain insert, so that a
    /// concurrent creator of one of them makes it fail as a conflict, and the transaction run
    /// again decides on the row that creator wrote). Parameters per row, in order: name,
    /// holder, term, acquired, renewed, expires (microseconds), ttl_ms, metadata,
    /// handover_to, paused.
    pub(crate) fn write_rows(&self, n: usize, existing: bool) -> String {
        let d = &self.dialect;
        let p = d.param;
        let rows: Vec<String> = (0..n)
            .map(|i| {
                let at = |k: usize| p(10 * i + k);
                format!(
                    "({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
                    at(1),
                    at(2),
                    at(3),
                    (d.from_us)(&at(4)),
                    (d.from_us)(&at(5)),
                    (d.from_us)(&at(6)),
                    at(7),
                    at(8),
                    at(9),
                    at(10)
                )
            })
            .collect();
        let update = match existing {
            true => d.upsert(&["name"], &WRITTEN[1..]),
            false => String::new(),
        };
        format!(
            "INSERT INTO {} ({}) VALUES {} {update}",
            self.lease_table,
            WRITTEN.join(", "),
            rows.join(", "),
        )
    }

    /// The DDL as one script.
    pub(crate) fn script(&self) -> String {
        let mut out = String::new();
        for s in &self.schema {
            out.push_str(s.trim());
            out.push_str(";\n\n");
        }
        out.push_str(&self.init_version);
        out.push_str(";\n");
        // A routine's body has statements of its own: the mysql client needs a delimiter.
        for r in &self.routines {
            out.push_str(&format!("\nDELIMITER //\n{} //\nDELIMITER ;\n", r.trim()));
        }
        out
    }
}

/// The lease row's columns as every query reads them (times as microseconds, text as the
/// driver's plain strings), optionally qualified (`l.`).
pub(crate) fn lease_columns(d: &Dialect, q: &str) -> String {
    let t = d.text;
    format!(
        "{} AS name, {} AS holder, {q}term AS term, {} AS acquired_us, {} AS renewed_us, \
         {} AS expires_us, {q}ttl_ms AS ttl_ms, {} AS metadata, {} AS handover_to, \
         {q}paused AS paused",
        t(&format!("{q}name")),
        t(&format!("{q}holder")),
        (d.to_us)(&format!("{q}acquired_at")),
        (d.to_us)(&format!("{q}renewed_at")),
        (d.to_us)(&format!("{q}expires_at")),
        t(&format!("{q}metadata")),
        t(&format!("{q}handover_to")),
    )
}

/// The row, locked for the model's transaction, with the clock (and the timeline) read after
/// the lock was granted where the engine can do both in one statement (`now_us`, `tli`).
/// Parameter: name.
fn lock_row(t: &Tables, d: &Dialect, epoch: EpochSql) -> String {
    let select_row = format!(
        "SELECT {} FROM {} WHERE name = {}",
        lease_columns(d, ""),
        t.lease,
        (d.param)(1)
    );
    if d.now_with_lock {
        format!(
            "SELECT l.*, {} AS now_us{} FROM ({select_row} {}) l",
            d.now_us,
            timeline_column(epoch),
            d.for_update
        )
    } else {
        format!("{select_row} {}", d.for_update)
    }
}

/// `, <timeline> AS tli` where the epoch is PostgreSQL's timeline, else nothing.
pub(crate) fn timeline_column(epoch: EpochSql) -> String {
    match epoch {
        EpochSql::Timeline(tli) => format!(", {tli} AS tli"),
        _ => String::new(),
    }
}

/// The clock (`now_us`), whether the server is read-only where the dialect must check it
/// (`read_only`), and the epoch's columns: PostgreSQL's timeline (`tli`); on MySQL/MariaDB
/// the server (`server_id`) and the epoch row's (`epoch_server`, `epoch_floor`, both NULL
/// before the first epoch).
fn now(d: &Dialect, epoch: EpochSql, epoch_table: &str) -> String {
    let read_only = d
        .read_only
        .map(|expr| format!(", {expr} AS read_only"))
        .unwrap_or_default();
    match epoch {
        EpochSql::ServerRow => format!(
            "SELECT {} AS now_us{read_only}, CAST(@@server_id AS SIGNED) AS server_id, \
             e.server_id AS epoch_server, e.epoch AS epoch_floor \
             FROM (SELECT 1 AS one) d LEFT JOIN {epoch_table} e ON e.id = 1",
            d.now_us
        ),
        _ => format!(
            "SELECT {} AS now_us{read_only}{}",
            d.now_us,
            timeline_column(epoch)
        ),
    }
}

/// The clock as a one-row table, left-joined to lease rows by [`Statements::get_row`] and
/// [`Statements::list`], so that a read always answers with the clock.
fn clock_join(d: &Dialect) -> String {
    format!(
        "SELECT {} AS now_us, {} FROM (SELECT 1 AS one) d",
        d.now_us,
        lease_columns(d, "l.")
    )
}

/// Parameters: name, holder, term, acquired, renewed, expires (microseconds), ttl_ms,
/// metadata, handover_to, paused.
fn insert_row(t: &Tables, d: &Dialect) -> String {
    let p = d.param;
    format!(
        "INSERT INTO {} (name, holder, term, acquired_at, renewed_at, expires_at, \
         ttl_ms, metadata, handover_to, paused) \
         VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
        t.lease,
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
    )
}

/// Parameters in binding order (`?` is positional): the row's values as for
/// [`insert_row`] but the name, then the name.
fn update_row(t: &Tables, d: &Dialect) -> String {
    let p = d.param;
    format!(
        "UPDATE {} SET holder = {}, term = {}, acquired_at = {}, renewed_at = {}, \
         expires_at = {}, ttl_ms = {}, metadata = {}, handover_to = {}, paused = {} \
         WHERE name = {}",
        t.lease,
        p(1),
        p(2),
        (d.from_us)(&p(3)),
        (d.from_us)(&p(4)),
        (d.from_us)(&p(5)),
        p(6),
        p(7),
        p(8),
        p(9),
        p(10)
    )
}

/// Parameters: name, term, holder, event, at (microseconds), actor, detail.
fn insert_history(t: &Tables, d: &Dialect) -> String {
    let p = d.param;
    format!(
        "INSERT INTO {} (name, term, holder, event, at, actor, detail) \
         VALUES ({}, {}, {}, {}, {}, {}, {})",
        t.history,
        p(1),
        p(2),
        p(3),
        p(4),
        (d.from_us)(&p(5)),
        p(6),
        p(7)
    )
}

/// Parameters: name, the oldest instant kept (microseconds).
fn prune_history(t: &Tables, d: &Dialect) -> String {
    format!(
        "DELETE FROM {} WHERE name = {} AND at < {}",
        t.history,
        (d.param)(1),
        (d.from_us)(&(d.param)(2))
    )
}

/// Parameters: name, limit.
fn history(t: &Tables, d: &Dialect) -> String {
    let text = d.text;
    format!(
        "SELECT id, {} AS name, term, {} AS holder, event, {} AS at_us, {} AS actor, \
         {} AS detail FROM {} WHERE name = {} ORDER BY id DESC LIMIT {}",
        text("name"),
        text("holder"),
        (d.to_us)("at"),
        text("actor"),
        text("detail"),
        t.history,
        (d.param)(1),
        (d.param)(2)
    )
}

/// Records [`SCHEMA_VERSION`] in a new schema table; leaves a recorded version alone.
fn init_version(t: &Tables) -> String {
    format!(
        "INSERT INTO {schema} (version) SELECT {SCHEMA_VERSION} FROM (SELECT 1 AS one) d \
         WHERE NOT EXISTS (SELECT 1 FROM {schema})",
        schema = t.schema
    )
}

/// The last completed tick of a schedule, if any, with the clock. Parameter: name.
fn last_tick(t: &Tables, d: &Dialect) -> String {
    format!(
        "SELECT {} AS now_us, t.last_tick_ms FROM (SELECT 1 AS one) d \
         LEFT JOIN {} t ON t.name = {}",
        d.now_us,
        t.tick,
        (d.param)(1)
    )
}

/// A schedule's tick row, locked. Parameter: name.
fn lock_tick(t: &Tables, d: &Dialect) -> String {
    format!(
        "SELECT last_tick_ms FROM {} WHERE name = {} {}",
        t.tick,
        (d.param)(1),
        d.for_update
    )
}

/// Parameters: tick_ms, term, holder, completed (microseconds), name.
fn insert_tick(t: &Tables, d: &Dialect) -> String {
    let p = d.param;
    format!(
        "INSERT INTO {} (last_tick_ms, term, holder, completed_at, name) \
         VALUES ({}, {}, {}, {}, {})",
        t.tick,
        p(1),
        p(2),
        p(3),
        (d.from_us)(&p(4)),
        p(5)
    )
}

/// Parameters as for [`insert_tick`].
fn update_tick(t: &Tables, d: &Dialect) -> String {
    let p = d.param;
    format!(
        "UPDATE {} SET last_tick_ms = {}, term = {}, holder = {}, \
         completed_at = {} WHERE name = {}",
        t.tick,
        p(1),
        p(2),
        p(3),
        (d.from_us)(&p(4)),
        p(5)
    )
}
