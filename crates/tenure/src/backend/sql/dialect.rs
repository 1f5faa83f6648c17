//! How one engine spells the few things that differ between the three SQL dialects.

/// Where an engine's epoch comes from (see `model::Epoch`), read with the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EpochSql {
    /// One history (SQLite; or a store with epochs switched off): epoch zero.
    None,
    /// PostgreSQL: an expression of the timeline of the WAL insert position (`tli`), read in
    /// the same statement as the clock; it fails on a standby, which never leads.
    Timeline(&'static str),
    /// MySQL/MariaDB: `@@server_id` read with the clock, against the server that began the
    /// current epoch in `<prefix>epoch`; a new server begins a new epoch.
    ServerRow,
}

/// How an engine spells an insert that updates the row it collides with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Upsert {
    /// `ON CONFLICT (key) DO UPDATE SET c = excluded.c` (PostgreSQL, SQLite).
    OnConflict,
    /// `ON DUPLICATE KEY UPDATE c = VALUES(c)` (MySQL, MariaDB).
    OnDuplicateKey,
}

/// How one engine spells the few things that differ.
#[derive(Clone, Copy)]
pub struct Dialect {
    /// Positional parameter `n` (1-based): `$1` or `?`.
    pub param: fn(usize) -> String,
    /// A text column as the driver's plain string type (MySQL reports `utf8mb4_bin` columns
    /// as binary strings).
    pub text: fn(&str) -> String,
    /// A timestamp column as microseconds since the epoch (BIGINT).
    pub to_us: fn(&str) -> String,
    /// A microseconds parameter as a timestamp value.
    pub from_us: fn(&str) -> String,
    /// The database's current time, read when the expression is evaluated.
    pub now_us: &'static str,
    /// An expression that is true when the server is read-only, read with the clock by every
    /// write transaction, where the server would otherwise let tenure write (MySQL/MariaDB:
    /// `@@global.read_only`, which users with `SUPER` or `READ ONLY ADMIN` may ignore).
    /// `None` where the server itself refuses (PostgreSQL's standby, a read-only SQLite file).
    pub read_only: Option<&'static str>,
    /// Where the epoch comes from.
    pub epoch: EpochSql,
    /// Whether the row lock and the clock can be read in one statement, with the clock read
    /// after the lock was granted.
    pub now_with_lock: bool,
    /// The locking clause for the row (empty where the transaction already locks).
    pub for_update: &'static str,
    /// The clause that locks a row in share mode (empty where the transaction already locks).
    pub share_lock: &'static str,
    /// Whether `UPDATE … RETURNING` exists.
    pub update_returning: bool,
    /// How an insert that collides with a row updates it instead ([`Dialect::upsert`]).
    pub upsert: Upsert,
    /// PostgreSQL: a transition someone may wait for sends `NOTIFY <prefix>lease, '<name>'`,
    /// which wakes followers and waiters at commit (with its history event, in the same
    /// statement: one round trip, not two).
    pub notifies: bool,
    /// The fence statement on the lease table `table`: parameters name, holder, term; one row
    /// when that holder still holds that term live, with the row locked against a takeover
    /// until the transaction ends; no row otherwise.
    pub fence: fn(table: &str) -> String,
    /// The DDL, with `{p}` standing for the table prefix.
    pub schema: &'static [&'static str],
    /// Stored routines `migrate` installs after the schema for the table prefix given (MySQL:
    /// the lock cycle's procedures); one that cannot be installed is warned about, not fatal.
    pub routines: fn(prefix: &str) -> Vec<String>,
}

impl Dialect {
    /// The query that locks row `id` of the counter table `table` (columns `id`, `idx`),
    /// adds one, and answers the new value (`idx`) with a writer's clock and epoch read after
    /// the lock, in one statement, for [`Tx::fetch_clocked`]; no row where the counter's row
    /// does not exist yet. PostgreSQL: `UPDATE … RETURNING idx, <clock>`. `None` elsewhere:
    /// SQLite's `BEGIN IMMEDIATE` takes the lock before any clock; MySQL/MariaDB has no
    /// `UPDATE … RETURNING` (the `UPDATE` and the clock's `SELECT` as one multi-statement
    /// script, `LAST_INSERT_ID(idx + 1)` carrying the value, made fewer round trips but no
    /// faster lock cycles on MariaDB, and was taken out).
    ///
    /// [`Tx::fetch_clocked`]: crate::backend::tx::Tx::fetch_clocked
    pub fn clocked_bump(&self, table: &str, id: u8) -> Option<String> {
        (self.now_with_lock && self.update_returning).then(|| {
            format!(
                "UPDATE {table} SET idx = idx + 1 WHERE id = {id} RETURNING idx, {} AS now_us{}",
                self.now_us,
                super::statements::timeline_column(self.epoch)
            )
        })
    }

    /// Where a statement sends the change signals ([`notifies`](Dialect::notifies)): the
    /// expression that sends the one whose wire payload ([`Topic::encode`]) is the expression
    /// `payload`, at commit, to every listener of the store with table prefix `prefix`
    /// (`pg_notify('<prefix>lease', <payload>)`), for a statement that also writes; its body
    /// then tells the transaction ([`Tx::notified`]).
    ///
    /// [`Topic::encode`]: crate::backend::tx::Topic::encode
    /// [`Tx::notified`]: crate::backend::tx::Tx::notified
    pub fn notify_call(&self, prefix: &str, payload: &str) -> Option<String> {
        // The prefix is validated to identifier characters: safe inside quotes.
        self.notifies
            .then(|| format!("pg_notify('{prefix}lease', {payload})"))
    }

    /// The clause after `INSERT INTO t (…) VALUES (…), …` that turns a collision on the
    /// primary key `key` into an update of `columns` to the values the statement inserts (no
    /// columns: the existing row is kept as it is). One statement, whatever the rows.
    pub fn upsert(&self, key: &[&str], columns: &[&str]) -> String {
        match self.upsert {
            Upsert::OnConflict if columns.is_empty() => {
                format!("ON CONFLICT ({}) DO NOTHING", key.join(", "))
            }
            Upsert::OnConflict => format!(
                "ON CONFLICT ({}) DO UPDATE SET {}",
                key.join(", "),
                columns
                    .iter()
                    .map(|c| format!("{c} = excluded.{c}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            // MySQL has no "do nothing": a key column set to itself changes nothing.
            Upsert::OnDuplicateKey if columns.is_empty() => {
                format!("ON DUPLICATE KEY UPDATE {0} = {0}", key[0])
            }
            Upsert::OnDuplicateKey => format!(
                "ON DUPLICATE KEY UPDATE {}",
                columns
                    .iter()
                    .map(|c| format!("{c} = VALUES({c})"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }
    }
}
