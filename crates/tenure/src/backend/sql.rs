//! What the three SQL backends share: the statements, built from a small dialect description,
//! and (as a macro, because sqlx's executor traits differ per engine) the transaction that
//! runs the model.

use crate::error::{Error, Result};
use crate::model::{DbTime, Lease};

/// How one engine spells the few things that differ.
#[derive(Clone, Copy)]
pub(crate) struct Dialect {
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
    /// Whether the row lock and the clock can be read in one statement, with the clock read
    /// after the lock was granted.
    pub now_with_lock: bool,
    /// The locking clause for the row (empty where the transaction already locks).
    pub for_update: &'static str,
    /// The clause that locks a row in share mode (empty where the transaction already locks).
    pub share_lock: &'static str,
    /// Whether `UPDATE … RETURNING` exists.
    pub update_returning: bool,
    /// PostgreSQL: the statement that writes a history event also sends `NOTIFY
    /// <prefix>lease, '<name>'` (one round trip, not two), which wakes followers at commit.
    pub notify_on_event: bool,
    /// The DDL, with `{p}` standing for the table prefix.
    pub schema: &'static [&'static str],
}

/// Every statement a backend runs, with the table prefix filled in.
pub(crate) struct Statements {
    pub lock_row: String,
    pub now: String,
    pub get_row: String,
    pub list: String,
    pub insert_row: String,
    pub update_row: String,
    pub insert_history: String,
    pub prune_history: String,
    pub history: String,
    pub schema: Vec<String>,
    pub schema_version: String,
    pub init_version: String,
    pub probe_lease: String,
    pub last_tick: String,
    pub fence_row: String,
    pub lock_tick: String,
    pub insert_tick: String,
    pub update_tick: String,
    pub lease_table: String,
    pub schema_table: String,
    /// Whether `UPDATE … RETURNING` exists (PostgreSQL, SQLite); else the rows are read back.
    returning: bool,
    dialect: Dialect,
}

/// A name's history older than the retention is deleted at every this-many-th tenure of it (and
/// at every administrative event), not at every event: a lock taken and released in a loop
/// does not pay a `DELETE` each time, and a name keeps at most this many tenures' events
/// beyond the retention.
pub(crate) const PRUNE_EVERY_TERMS: u64 = 64;

/// Whether a tenure with this term, once acquired, prunes its name's old history.
pub(crate) fn acquisition_prunes(term: u64) -> bool {
    term % PRUNE_EVERY_TERMS == 0
}

/// Whether writing `event` also prunes its name's old history.
pub(crate) fn prunes_history(event: &crate::model::Event) -> bool {
    use crate::model::EventKind;
    match event.kind {
        EventKind::Released => false,
        EventKind::Acquired | EventKind::TakenOverExpired => acquisition_prunes(event.term),
        EventKind::Demoted
        | EventKind::HandedOver
        | EventKind::Forced
        | EventKind::Paused
        | EventKind::Resumed => true,
    }
}

/// How many (name, term) pairs one renewal statement carries (two parameters each, well under
/// every engine's limit).
pub(crate) const RENEW_CHUNK: usize = 5000;

/// The schema version this build writes and understands.
pub(crate) const SCHEMA_VERSION: i64 = 1;

impl Statements {
    pub fn new(prefix: &str, d: &Dialect) -> Statements {
        let lease = format!("{prefix}lease");
        let history = format!("{prefix}history");
        let schema_table = format!("{prefix}schema");
        let p = d.param;
        let t = d.text;
        let cols = lease_columns(d, "");
        let select_row = format!("SELECT {cols} FROM {lease} WHERE name = {}", p(1));
        let lock_row = if d.now_with_lock {
            format!(
                "SELECT l.*, {} AS now_us FROM ({select_row} {}) l",
                d.now_us, d.for_update
            )
        } else {
            format!("{select_row} {}", d.for_update)
        };
        let l_cols = lease_columns(d, "l.");
        let clock_join = format!(
            "SELECT {} AS now_us, {l_cols} FROM (SELECT 1 AS one) d",
            d.now_us
        );
        Statements {
            lock_row,
            now: format!("SELECT {} AS now_us", d.now_us),
            get_row: format!("{clock_join} LEFT JOIN {lease} l ON l.name = {}", p(1)),
            list: format!("{clock_join} LEFT JOIN {lease} l ON 1 = 1 ORDER BY l.name"),
            insert_row: format!(
                "INSERT INTO {lease} (name, holder, term, acquired_at, renewed_at, expires_at, \
                 ttl_ms, metadata, handover_to, paused) \
                 VALUES ({}, {}, {}, {}, {}, {}, {}, {}, {}, {})",
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
            // Parameters in binding order (`?` is positional): the row's values, then the name.
            update_row: format!(
                "UPDATE {lease} SET holder = {}, term = {}, acquired_at = {}, renewed_at = {}, \
                 expires_at = {}, ttl_ms = {}, metadata = {}, handover_to = {}, paused = {} \
                 WHERE name = {}",
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
            ),
            insert_history: {
                let insert = format!(
                    "INSERT INTO {history} (name, term, holder, event, at, actor, detail) \
                     VALUES ({}, {}, {}, {}, {}, {}, {})",
                    p(1),
                    p(2),
                    p(3),
                    p(4),
                    (d.from_us)(&p(5)),
                    p(6),
                    p(7)
                );
                if d.notify_on_event {
                    // The prefix is validated to identifier characters: safe inside quotes.
                    format!("WITH h AS ({insert}) SELECT pg_notify('{lease}', {})", p(1))
                } else {
                    insert
                }
            },
            prune_history: format!(
                "DELETE FROM {history} WHERE name = {} AND at < {}",
                p(1),
                (d.from_us)(&p(2))
            ),
            history: format!(
                "SELECT id, {} AS name, term, {} AS holder, event, {} AS at_us, {} AS actor, \
                 {} AS detail FROM {history} WHERE name = {} ORDER BY id DESC LIMIT {}",
                t("name"),
                t("holder"),
                (d.to_us)("at"),
                t("actor"),
                t("detail"),
                p(1),
                p(2)
            ),
            schema: d
                .schema
                .iter()
                .map(|s| s.replace("{p}", prefix))
                .collect(),
            schema_version: format!("SELECT MAX(version) AS version FROM {schema_table}"),
            init_version: format!(
                "INSERT INTO {schema_table} (version) SELECT {SCHEMA_VERSION} FROM (SELECT 1 AS one) d \
                 WHERE NOT EXISTS (SELECT 1 FROM {schema_table})"
            ),
            probe_lease: format!("SELECT name FROM {lease} WHERE 1 = 0"),
            last_tick: format!(
                "SELECT {} AS now_us, t.last_tick_ms FROM (SELECT 1 AS one) d \
                 LEFT JOIN {prefix}tick t ON t.name = {}",
                d.now_us,
                p(1)
            ),
            fence_row: format!(
                "SELECT {} AS holder, term, {} AS expires_us, {} AS now_us FROM {lease} \
                 WHERE name = {} {}",
                t("holder"),
                (d.to_us)("expires_at"),
                d.now_us,
                p(1),
                d.share_lock
            ),
            lock_tick: format!(
                "SELECT last_tick_ms FROM {prefix}tick WHERE name = {} {}",
                p(1),
                d.for_update
            ),
            insert_tick: format!(
                "INSERT INTO {prefix}tick (last_tick_ms, term, holder, completed_at, name) \
                 VALUES ({}, {}, {}, {}, {})",
                p(1),
                p(2),
                p(3),
                (d.from_us)(&p(4)),
                p(5)
            ),
            update_tick: format!(
                "UPDATE {prefix}tick SET last_tick_ms = {}, term = {}, holder = {}, \
                 completed_at = {} WHERE name = {}",
                p(1),
                p(2),
                p(3),
                (d.from_us)(&p(4)),
                p(5)
            ),
            lease_table: lease,
            schema_table,
            returning: d.update_returning,
            dialect: *d,
        }
    }

    /// The keep-alive of `n` held leases ([`Op::Renew`](crate::model::Op::Renew) for each): an
    /// `UPDATE` whose parameters are, in order, now, now, holder, now, holder, then `n` (name,
    /// term) pairs; and, where the engine has no `UPDATE … RETURNING`, a `SELECT` of the renewed
    /// rows whose parameters are holder, now, then the pairs.
    pub fn renew(&self, n: usize) -> (String, Option<String>) {
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

    /// The DDL as one script.
    pub fn script(&self) -> String {
        let mut out = String::new();
        for s in &self.schema {
            out.push_str(s.trim());
            out.push_str(";\n\n");
        }
        out.push_str(&self.init_version);
        out.push_str(";\n");
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

/// The raw column values of a lease row, before they become a [`Lease`].
pub(crate) struct RawLease {
    pub name: String,
    pub holder: Option<String>,
    pub term: i64,
    pub acquired_us: i64,
    pub renewed_us: i64,
    pub expires_us: i64,
    pub ttl_ms: i64,
    pub metadata: Option<String>,
    pub handover_to: Option<String>,
    pub paused: bool,
}

impl RawLease {
    pub fn into_lease(self, table: &str) -> Result<Lease> {
        let unsigned = |v: i64, what: &str| {
            u64::try_from(v).map_err(|_| Error::Corrupt {
                table: table.to_string(),
                reason: format!("negative {what} {v} for {:?}", self.name),
            })
        };
        Ok(Lease {
            term: unsigned(self.term, "term")?,
            ttl_ms: unsigned(self.ttl_ms, "ttl_ms")?,
            holder: self.holder,
            acquired_at: DbTime(self.acquired_us),
            renewed_at: DbTime(self.renewed_us),
            expires_at: DbTime(self.expires_us),
            metadata: self.metadata,
            handover_to: self.handover_to,
            paused: self.paused,
            name: self.name,
        })
    }
}

/// Whether an error is a transient conflict after which the whole transaction may simply be
/// tried again: a unique violation (two creators of one row), a deadlock or a serialization
/// failure. Nothing was committed in these cases.
pub(crate) fn is_retryable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            matches!(db.kind(), sqlx::error::ErrorKind::UniqueViolation)
                || matches!(db.code().as_deref(), Some("40001" | "40P01"))
        }
        _ => false,
    }
}

/// Whether an error says that a table, index or type already exists (PostgreSQL's answer to
/// a concurrent `CREATE … IF NOT EXISTS`).
pub(crate) fn is_duplicate_object(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("42P07" | "42710")),
        _ => false,
    }
}

/// Whether an error says that a table does not exist.
pub(crate) fn is_missing_table(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("42P01" | "42S02" | "1146"))
                || db.message().contains("no such table")
        }
        _ => false,
    }
}

/// A backend's way to decide some operations in one statement (PostgreSQL's lock cycle); by
/// default every operation runs the model's transaction.
pub(crate) trait OneStatement {
    /// The answer to `op`, or `None` where the model's transaction must decide it.
    async fn one_statement(
        &self,
        _name: &str,
        _op: &crate::model::Op,
        _actor: &str,
    ) -> Result<Option<crate::backend::Applied>> {
        Ok(None)
    }
}

/// Implements [`Backend`](crate::backend::Backend) for a struct with fields `pool`
/// (`sqlx::Pool<$db>`), `stmts` ([`Statements`]), `url`, `retention_us` (`Option<i64>`) and
/// `begin` (the statement that opens a write transaction), and an impl of [`OneStatement`].
macro_rules! impl_sql_backend {
    ($ty:ty, $db:ty, $kind:expr) => {
        impl $ty {
            fn raw_lease(
                row: &<$db as sqlx::Database>::Row,
            ) -> std::result::Result<$crate::backend::sql::RawLease, sqlx::Error> {
                use sqlx::Row;
                Ok($crate::backend::sql::RawLease {
                    name: row.try_get("name")?,
                    holder: row.try_get("holder")?,
                    term: row.try_get("term")?,
                    acquired_us: row.try_get("acquired_us")?,
                    renewed_us: row.try_get("renewed_us")?,
                    expires_us: row.try_get("expires_us")?,
                    ttl_ms: row.try_get("ttl_ms")?,
                    metadata: row.try_get("metadata")?,
                    handover_to: row.try_get("handover_to")?,
                    paused: row.try_get("paused")?,
                })
            }

            fn lease_from(
                &self,
                row: &<$db as sqlx::Database>::Row,
            ) -> $crate::error::Result<$crate::model::Lease> {
                Self::raw_lease(row)?.into_lease(&self.stmts.lease_table)
            }

            /// Rows of a `clock_join` query: the clock, and the lease if the join matched.
            fn snapshot_from(
                &self,
                rows: &[<$db as sqlx::Database>::Row],
            ) -> $crate::error::Result<$crate::backend::Snapshot> {
                use sqlx::Row;
                let mut now = None;
                let mut leases = Vec::new();
                for row in rows {
                    now = Some($crate::model::DbTime(row.try_get::<i64, _>("now_us")?));
                    if row.try_get::<Option<String>, _>("name")?.is_some() {
                        leases.push(self.lease_from(row)?);
                    }
                }
                let now = now.ok_or_else(|| $crate::error::Error::Corrupt {
                    table: self.stmts.lease_table.clone(),
                    reason: "the clock query returned no row".to_string(),
                })?;
                Ok($crate::backend::Snapshot { now, leases })
            }

            async fn apply_once(
                &self,
                name: &str,
                op: &$crate::model::Op,
                actor: &str,
            ) -> $crate::error::Result<$crate::backend::Applied> {
                use sqlx::Row;
                let s = &self.stmts;
                let mut tx = self.pool.begin_with(self.begin).await?;
                let row = sqlx::query(&s.lock_row)
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await?;
                let mut now = None;
                let current = match &row {
                    Some(row) => {
                        if let Ok(Some(us)) = row.try_get::<Option<i64>, _>("now_us") {
                            now = Some($crate::model::DbTime(us));
                        }
                        Some(self.lease_from(row)?)
                    }
                    None => None,
                };
                let now = match now {
                    Some(now) => now,
                    None => $crate::model::DbTime(
                        sqlx::query(&s.now)
                            .fetch_one(&mut *tx)
                            .await?
                            .try_get::<i64, _>("now_us")?,
                    ),
                };
                let decision = $crate::model::decide(now, name, current.as_ref(), op);
                if let (true, Some(lease)) = (decision.write, &decision.lease) {
                    let query = if current.is_some() {
                        sqlx::query(&s.update_row)
                    } else {
                        sqlx::query(&s.insert_row).bind(&lease.name)
                    };
                    let query = query
                        .bind(&lease.holder)
                        .bind(lease.term as i64)
                        .bind(lease.acquired_at.0)
                        .bind(lease.renewed_at.0)
                        .bind(lease.expires_at.0)
                        .bind(lease.ttl_ms as i64)
                        .bind(&lease.metadata)
                        .bind(&lease.handover_to)
                        .bind(lease.paused);
                    let query = if current.is_some() {
                        query.bind(&lease.name)
                    } else {
                        query
                    };
                    query.execute(&mut *tx).await?;
                }
                if let Some(event) = &decision.event {
                    let prune = $crate::backend::sql::prunes_history(event);
                    if let Some(keep) = self.retention_us.filter(|_| prune) {
                        sqlx::query(&s.prune_history)
                            .bind(name)
                            .bind(now.0.saturating_sub(keep))
                            .execute(&mut *tx)
                            .await?;
                    }
                    sqlx::query(&s.insert_history)
                        .bind(name)
                        .bind(event.term as i64)
                        .bind(&event.holder)
                        .bind(event.kind.as_str())
                        .bind(now.0)
                        .bind(actor)
                        .bind(&event.detail)
                        .execute(&mut *tx)
                        .await?;
                }
                tx.commit().await?;
                Ok($crate::backend::Applied {
                    now,
                    lease: decision.lease,
                    effect: decision.effect,
                })
            }
        }

        #[async_trait::async_trait]
        impl $crate::backend::Backend for $ty {
            fn kind(&self) -> $crate::backend::BackendKind {
                $kind
            }

            fn url(&self) -> &$crate::backend::RedactedUrl {
                &self.url
            }

            async fn apply(
                &self,
                name: &str,
                op: &$crate::model::Op,
                actor: &str,
            ) -> $crate::error::Result<$crate::backend::Applied> {
                use $crate::backend::sql::OneStatement as _;
                if let Some(applied) = self.one_statement(name, op, actor).await? {
                    return Ok(applied);
                }
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    match self.apply_once(name, op, actor).await {
                        Err($crate::error::Error::Database(e))
                            if attempt < 8 && $crate::backend::sql::is_retryable(&e) =>
                        {
                            tracing::debug!(name, error = %e, "transient conflict; retrying");
                            let pause = rand::random::<u64>() % (2 * attempt as u64 + 1);
                            tokio::time::sleep(std::time::Duration::from_millis(pause)).await;
                        }
                        other => return other,
                    }
                }
            }

            async fn renew_many(
                &self,
                holder: &str,
                leases: &[(String, u64)],
            ) -> $crate::error::Result<$crate::backend::Renewed> {
                use sqlx::Row;
                let s = &self.stmts;
                let mut tx = self.pool.begin_with(self.begin).await?;
                let now = $crate::model::DbTime(
                    sqlx::query(&s.now)
                        .fetch_one(&mut *tx)
                        .await?
                        .try_get::<i64, _>("now_us")?,
                );
                let mut renewed = Vec::with_capacity(leases.len());
                for chunk in leases.chunks($crate::backend::sql::RENEW_CHUNK) {
                    let (update, read_back) = s.renew(chunk.len());
                    let mut query = sqlx::query(&update)
                        .bind(now.0)
                        .bind(now.0)
                        .bind(holder)
                        .bind(now.0)
                        .bind(holder);
                    for (name, term) in chunk {
                        query = query.bind(name).bind(*term as i64);
                    }
                    let rows = match read_back {
                        None => query.fetch_all(&mut *tx).await?,
                        Some(select) => {
                            query.execute(&mut *tx).await?;
                            let mut query = sqlx::query(&select).bind(holder).bind(now.0);
                            for (name, term) in chunk {
                                query = query.bind(name).bind(*term as i64);
                            }
                            query.fetch_all(&mut *tx).await?
                        }
                    };
                    for row in &rows {
                        renewed.push(self.lease_from(row)?);
                    }
                }
                tx.commit().await?;
                Ok($crate::backend::Renewed { now, leases: renewed })
            }

            async fn last_tick(
                &self,
                name: &str,
            ) -> $crate::error::Result<(Option<i64>, $crate::model::DbTime)> {
                use sqlx::Row;
                let row = sqlx::query(&self.stmts.last_tick)
                    .bind(name)
                    .fetch_one(&self.pool)
                    .await?;
                Ok((
                    row.try_get("last_tick_ms")?,
                    $crate::model::DbTime(row.try_get("now_us")?),
                ))
            }

            async fn complete_tick(
                &self,
                name: &str,
                holder: &str,
                term: u64,
                tick_ms: i64,
            ) -> $crate::error::Result<bool> {
                use sqlx::Row;
                let s = &self.stmts;
                let mut tx = self.pool.begin_with(self.begin).await?;
                let lease = sqlx::query(&s.fence_row)
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await?;
                let held = match &lease {
                    Some(row) => {
                        row.try_get::<Option<String>, _>("holder")?.as_deref() == Some(holder)
                            && row.try_get::<i64, _>("term")? == term as i64
                            && row.try_get::<i64, _>("expires_us")?
                                > row.try_get::<i64, _>("now_us")?
                    }
                    None => false,
                };
                if !held {
                    return Err($crate::error::Error::LeaseLost {
                        name: name.to_string(),
                        candidate: holder.to_string(),
                        term,
                    });
                }
                let now: i64 = sqlx::query(&s.now)
                    .fetch_one(&mut *tx)
                    .await?
                    .try_get("now_us")?;
                let last: Option<i64> = sqlx::query(&s.lock_tick)
                    .bind(name)
                    .fetch_optional(&mut *tx)
                    .await?
                    .map(|row| row.try_get("last_tick_ms"))
                    .transpose()?;
                let statement = match last {
                    Some(last) if last >= tick_ms => return Ok(false),
                    Some(_) => &s.update_tick,
                    None => &s.insert_tick,
                };
                sqlx::query(statement)
                    .bind(tick_ms)
                    .bind(term as i64)
                    .bind(holder)
                    .bind(now)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(true)
            }

            async fn get(&self, name: &str) -> $crate::error::Result<$crate::backend::Snapshot> {
                let rows = sqlx::query(&self.stmts.get_row)
                    .bind(name)
                    .fetch_all(&self.pool)
                    .await?;
                self.snapshot_from(&rows)
            }

            async fn list(&self) -> $crate::error::Result<$crate::backend::Snapshot> {
                let rows = sqlx::query(&self.stmts.list).fetch_all(&self.pool).await?;
                self.snapshot_from(&rows)
            }

            async fn history(
                &self,
                name: &str,
                limit: u32,
            ) -> $crate::error::Result<Vec<$crate::backend::HistoryEntry>> {
                use sqlx::Row;
                let rows = sqlx::query(&self.stmts.history)
                    .bind(name)
                    .bind(i64::from(limit))
                    .fetch_all(&self.pool)
                    .await?;
                rows.iter()
                    .map(|row| {
                        Ok($crate::backend::HistoryEntry {
                            id: row.try_get("id")?,
                            name: row.try_get("name")?,
                            term: u64::try_from(row.try_get::<i64, _>("term")?).unwrap_or(0),
                            holder: row.try_get("holder")?,
                            event: row.try_get("event")?,
                            at: $crate::model::DbTime(row.try_get("at_us")?),
                            actor: row.try_get("actor")?,
                            detail: row.try_get("detail")?,
                        })
                    })
                    .collect()
            }

            async fn migrate(&self) -> $crate::error::Result<()> {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    let result: std::result::Result<(), sqlx::Error> = async {
                        for ddl in &self.stmts.schema {
                            sqlx::query(ddl).execute(&self.pool).await?;
                        }
                        sqlx::query(&self.stmts.init_version)
                            .execute(&self.pool)
                            .await?;
                        Ok(())
                    }
                    .await;
                    match result {
                        // Concurrent `CREATE TABLE IF NOT EXISTS` can collide in PostgreSQL's
                        // catalog; the other creator has then done the work.
                        Err(e)
                            if attempt < 6
                                && ($crate::backend::sql::is_retryable(&e)
                                    || $crate::backend::sql::is_duplicate_object(&e)) => {}
                        Err(e) => return Err(e.into()),
                        Ok(()) => return self.check_schema().await,
                    }
                }
            }

            async fn check_schema(&self) -> $crate::error::Result<()> {
                use sqlx::Row;
                let missing = |table: &str| $crate::error::Error::SchemaMissing {
                    table: table.to_string(),
                    url: self.url.to_string(),
                };
                let version = match sqlx::query(&self.stmts.schema_version)
                    .fetch_one(&self.pool)
                    .await
                {
                    Ok(row) => row.try_get::<Option<i64>, _>("version")?,
                    Err(e) if $crate::backend::sql::is_missing_table(&e) => {
                        return Err(missing(&self.stmts.schema_table));
                    }
                    Err(e) => return Err(e.into()),
                };
                if let Err(e) = sqlx::query(&self.stmts.probe_lease)
                    .fetch_optional(&self.pool)
                    .await
                {
                    return Err(if $crate::backend::sql::is_missing_table(&e) {
                        missing(&self.stmts.lease_table)
                    } else {
                        e.into()
                    });
                }
                match version {
                    None => Err(missing(&self.stmts.schema_table)),
                    Some(found) if found > $crate::backend::sql::SCHEMA_VERSION => {
                        Err($crate::error::Error::SchemaTooNew {
                            found,
                            supported: $crate::backend::sql::SCHEMA_VERSION,
                            url: self.url.to_string(),
                        })
                    }
                    Some(_) => Ok(()),
                }
            }

            fn schema_sql(&self) -> String {
                self.stmts.script()
            }

            fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
                self.subscription()
            }
        }

        impl std::fmt::Debug for $ty {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct(stringify!($ty))
                    .field("url", &self.url)
                    .field("lease_table", &self.stmts.lease_table)
                    .finish_non_exhaustive()
            }
        }
    };
}

pub(crate) use impl_sql_backend;
