//! SQLite: the embedded default, for processes on one host.
//!
//! Write transactions start with `BEGIN IMMEDIATE`, which takes SQLite's single write lock
//! before the row is read, so the read-decide-write of the model cannot interleave with another
//! writer. The journal is WAL with `synchronous=FULL`: a commit that the OS lost could let a
//! term be reused. `busy_timeout` is the store's timeout, below the renew budget. Times are
//! stored as readable UTC text (`2026-11-22 03:04:05.678`), with SQLite's millisecond clock.
//!
//! SQLite is good for several processes on one host sharing one file. It is not for a
//! network file system, where its locks cannot be trusted.

use super::options::StoreOptions;
use super::sql::{impl_sql_backend, Dialect, Statements};
use super::url::RedactedUrl;
use crate::error::{Error, Result};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool, Transaction};
use std::str::FromStr;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS {p}lease (
    name TEXT NOT NULL PRIMARY KEY,
    holder TEXT,
    term INTEGER NOT NULL,
    acquired_at TEXT NOT NULL,
    renewed_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    ttl_ms INTEGER NOT NULL,
    metadata TEXT,
    handover_to TEXT,
    paused INTEGER NOT NULL DEFAULT 0
)",
    "CREATE TABLE IF NOT EXISTS {p}history (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    term INTEGER NOT NULL,
    holder TEXT,
    event TEXT NOT NULL,
    at TEXT NOT NULL,
    actor TEXT NOT NULL,
    detail TEXT NOT NULL
)",
    "CREATE INDEX IF NOT EXISTS {p}history_name_at ON {p}history (name, at)",
    "CREATE TABLE IF NOT EXISTS {p}tick (
    name TEXT NOT NULL PRIMARY KEY,
    last_tick_ms INTEGER NOT NULL,
    term INTEGER NOT NULL,
    holder TEXT NOT NULL,
    completed_at TEXT NOT NULL
)",
    "CREATE TABLE IF NOT EXISTS {p}schema (version BIGINT NOT NULL)",
];

pub(crate) fn dialect() -> Dialect {
    Dialect {
        text: |col| col.to_string(),
        param: |_| "?".to_string(),
        to_us: |col| {
            format!("(CAST(ROUND((julianday({col}) - 2440587.5) * 86400000.0) AS INTEGER) * 1000)")
        },
        from_us: |param| {
            format!("strftime('%Y-%m-%d %H:%M:%f', CAST({param} AS REAL) / 1000000.0, 'unixepoch')")
        },
        now_us: "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)",
        // BEGIN IMMEDIATE already holds the write lock when the row and clock are read.
        now_with_lock: false,
        for_update: "",
        share_lock: "",
        update_returning: true,
        notify_on_event: false,
        schema: SCHEMA,
    }
}

/// The SQLite backend.
pub struct SqliteBackend {
    pool: SqlitePool,
    stmts: Statements,
    url: RedactedUrl,
    retention_us: Option<i64>,
    begin: &'static str,
}

impl SqliteBackend {
    /// Opens (creating if missing) the database file named by `url`.
    ///
    /// # Errors
    /// [`Error::BadUrl`] for a URL sqlx cannot read, [`Error::Connect`] if the file cannot be
    /// opened.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        options.validate()?;
        let redacted = RedactedUrl::new(url);
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|e| Error::BadUrl {
                url: redacted.to_string(),
                reason: e.to_string(),
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(options.timeout);
        let pool = SqlitePoolOptions::new()
            // One connection: SQLite has one writer at a time anyway, and the pool's queue is
            // first come, first served, where writers contending through `busy_timeout` poll
            // and can starve one another. (It also keeps `:memory:` one database.)
            .max_connections(1)
            .acquire_timeout(options.timeout)
            // A transaction cancelled at the wrong instant (a timeout while the process was
            // starved, say) can leave the connection inside it: its rollback failed while a
            // statement was still active. Reused, that connection would hold the write lock
            // forever and refuse every `BEGIN`; closed, SQLite rolls it back.
            .before_acquire(|conn, _| {
                Box::pin(async move {
                    use sqlx::TransactionManager;
                    Ok(
                        <Sqlite as sqlx::Database>::TransactionManager::get_transaction_depth(conn)
                            == 0,
                    )
                })
            })
            .connect_with(connect)
            .await
            .map_err(|source| Error::Connect {
                url: redacted.to_string(),
                source,
            })?;
        Ok(SqliteBackend {
            pool,
            stmts: Statements::new(&options.table_prefix, &dialect()),
            url: redacted,
            retention_us: options.retention_us(),
            begin: "BEGIN IMMEDIATE",
        })
    }

    /// Checks, inside the caller's transaction `tx`, that `candidate` still holds `term` of
    /// `name`, and holds SQLite's write lock from then until `tx` ends, so that no takeover can
    /// commit before the caller's writes do.
    ///
    /// The check is itself a write (`UPDATE … SET term = term`), so it takes the write lock at
    /// once; if another writer committed since `tx` began reading, SQLite refuses the upgrade
    /// (`SQLITE_BUSY_SNAPSHOT` in WAL mode) and the caller's transaction fails. Either way a
    /// stale holder's writes cannot land after a newer tenure began.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease is not (or no longer) held with that term; database
    /// errors. In both cases roll `tx` back.
    pub async fn fence(
        &self,
        tx: &mut Transaction<'_, Sqlite>,
        name: &str,
        candidate: &str,
        term: u64,
    ) -> Result<()> {
        let sql = format!(
            "UPDATE {} SET term = term WHERE name = ? AND holder = ? AND term = ? \
             AND expires_at > strftime('%Y-%m-%d %H:%M:%f', 'now')",
            self.stmts.lease_table
        );
        let done = sqlx::query(&sql)
            .bind(name)
            .bind(candidate)
            .bind(term as i64)
            .execute(&mut **tx)
            .await?;
        if done.rows_affected() == 1 {
            Ok(())
        } else {
            Err(Error::LeaseLost {
                name: name.to_string(),
                candidate: candidate.to_string(),
                term,
            })
        }
    }

    /// The connection pool, for the caller's own transactions (e.g. with [`fence`](Self::fence)).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    fn subscription(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        None
    }
}

/// Every operation runs the model's transaction.
impl super::sql::OneStatement for SqliteBackend {}

impl_sql_backend!(SqliteBackend, Sqlite, crate::backend::BackendKind::Sqlite);
