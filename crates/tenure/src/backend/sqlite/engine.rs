//! The SQLite engine: its schema, its dialect and its single-connection pool.

use super::doorbell::Doorbell;
use super::one_statement::{self, CycleStatements};
use crate::backend::fresh::Freshness;
use crate::backend::sql::{Dialect, Engine, EpochSql, SqlBackend, Upsert};
use crate::backend::{BackendKind, RedactedUrl, StoreOptions};
use crate::error::{Error, Result};
use crate::model::{Effect, Op};
use crate::records::Applied;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;
use std::str::FromStr;
use std::sync::Arc;
use tokio::sync::broadcast;

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

/// The SQLite engine of [`SqliteBackend`](super::SqliteBackend): its state is the doorbell of
/// its file (none for an in-memory database, or where the bell cannot be watched).
pub struct Sqlite {
    bell: Option<Arc<Doorbell>>,
    /// The lock cycle's two one-statement operations.
    pub(super) cycle: CycleStatements,
}

impl Engine for Sqlite {
    type Database = sqlx::Sqlite;
    const KIND: BackendKind = BackendKind::Sqlite;
    const NAME: &'static str = "SqliteBackend";
    /// Takes SQLite's single write lock before the row is read.
    fn begin(&self) -> std::borrow::Cow<'static, str> {
        "BEGIN IMMEDIATE".into()
    }

    fn dialect() -> Dialect {
        Dialect {
            text: |col| col.to_string(),
            param: |_| "?".to_string(),
            to_us: |col| {
                format!(
                    "(CAST(ROUND((julianday({col}) - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
                )
            },
            from_us: |param| {
                format!(
                    "strftime('%Y-%m-%d %H:%M:%f', CAST({param} AS REAL) / 1000000.0, 'unixepoch')"
                )
            },
            now_us: "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)",
            // BEGIN IMMEDIATE already holds the write lock when the row and clock are read.
            read_only: None,
            epoch: EpochSql::None,
            now_with_lock: false,
            for_update: "",
            share_lock: "",
            update_returning: true,
            upsert: Upsert::OnConflict,
            notifies: false,
            // A write, so it takes SQLite's write lock at once (or fails with SQLITE_BUSY if
            // another writer committed since the transaction began reading).
            fence: |table| {
                format!(
                    "UPDATE {table} SET term = term WHERE name = ? AND holder = ? AND term = ? \
                     AND expires_at > strftime('%Y-%m-%d %H:%M:%f', 'now') RETURNING term"
                )
            },
            schema: SCHEMA,
            routines: |_| Vec::new(),
        }
    }

    async fn open(
        url: &str,
        redacted: &RedactedUrl,
        options: &StoreOptions,
        _fresh: &Arc<Freshness>,
        _pooled: bool,
    ) -> Result<(SqlitePool, Sqlite)> {
        let connect = SqliteConnectOptions::from_str(url)
            .map_err(|e| Error::BadUrl {
                url: redacted.to_string(),
                reason: e.to_string(),
            })?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(options.timeout);
        let file = connect.get_filename().to_path_buf();
        // Several processes opening a new file at once: while one turns it to WAL, another's
        // first connection can find it locked without its busy timeout being waited (2 of 120
        // starts of four `tenure status` at once on a new file). It tries again, within the
        // store's timeout.
        let started = std::time::Instant::now();
        let pool = loop {
            match pool_options(options).connect_with(connect.clone()).await {
                Ok(pool) => break pool,
                Err(e) if is_busy(&e) && started.elapsed() < options.timeout => {
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                Err(source) => {
                    return Err(Error::Connect {
                        url: redacted.to_string(),
                        source,
                    })
                }
            }
        };
        // Every process of an on-disk database is on this host: a doorbell beside the file.
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let bell = if in_memory { None } else { Doorbell::of(&file) };
        let cycle = CycleStatements::new(&options.table_prefix);
        Ok((pool, Sqlite { bell, cycle }))
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        self.bell.as_ref().map(|b| b.subscribe())
    }

    /// A lock's uncontested acquisition and its release in one statement each (see
    /// `one_statement.rs`); `None` where the model's transaction must decide.
    async fn one_statement(
        backend: &SqlBackend<Self>,
        name: &str,
        op: &Op,
        _actor: &str,
    ) -> Result<Option<Applied>> {
        one_statement::run(backend, name, op).await
    }

    fn applied(&self, name: &str, _op: &Op, applied: &Applied) {
        if let Some(bell) = &self.bell {
            if wakes_someone(&applied.effect) {
                bell.ring(name);
            }
        }
    }

    fn committed(&self, topics: &[String]) {
        if let Some(bell) = &self.bell {
            for topic in topics {
                bell.ring(topic);
            }
        }
    }
}

/// Whether a committed `effect` is news someone could be waiting for: a follower for a free
/// lease, a leader for a demote, a pause or a handover.
fn wakes_someone(effect: &Effect) -> bool {
    matches!(
        effect,
        Effect::Released
            | Effect::Demoted
            | Effect::HandoverRequested
            | Effect::Forced
            | Effect::Paused
            | Effect::Resumed
    )
}

/// The pool of one connection a store keeps (see `open`).
fn pool_options(options: &StoreOptions) -> SqlitePoolOptions {
    SqlitePoolOptions::new()
        // One connection: SQLite has one writer at a time anyway, and the pool's queue is
        // first come, first served, where writers contending through `busy_timeout` poll
        // and can starve one another. (It also keeps `:memory:` one database.)
        .max_connections(1)
        .acquire_timeout(options.timeout)
        // No ping before each call: the connection lives in this process, and a ping is
        // only a round trip to its worker thread (sqlx pings it when taking it back).
        .test_before_acquire(false)
        // A transaction cancelled at the wrong instant (a timeout while the process was
        // starved, say) can leave the connection inside it: its rollback failed while a
        // statement was still active. Reused, that connection would hold the write lock
        // forever and refuse every `BEGIN`; closed, SQLite rolls it back.
        .before_acquire(|conn, _| {
            Box::pin(async move {
                use sqlx::TransactionManager;
                Ok(
                    <sqlx::Sqlite as sqlx::Database>::TransactionManager::get_transaction_depth(
                        conn,
                    ) == 0,
                )
            })
        })
}

/// Whether SQLite answered `SQLITE_BUSY` (its primary code 5, whatever the extended one).
fn is_busy(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else {
        return false;
    };
    db.code()
        .and_then(|code| code.parse::<i32>().ok())
        .is_some_and(|code| code & 0xff == 5)
}
