//! The MySQL family's engine: its schema, its dialect and its pool's session settings.

use super::bell::Bells;
use super::galera::Galera;
use super::one_statement::{self, CycleCalls};
use crate::backend::fresh::Freshness;
use crate::backend::sql::{Dialect, Engine, EpochSql, SqlBackend, Upsert};
use crate::backend::{BackendKind, RedactedUrl, StoreOptions};
use crate::error::{Error, Result};
use crate::model::Op;
use crate::records::Applied;
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::MySqlPool;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI64};
use std::sync::Arc;
use tokio::sync::broadcast;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS {p}lease (
    name VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    holder VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    term BIGINT NOT NULL,
    acquired_at DATETIME(6) NOT NULL,
    renewed_at DATETIME(6) NOT NULL,
    expires_at DATETIME(6) NOT NULL,
    ttl_ms BIGINT NOT NULL,
    metadata TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    handover_to VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    paused BOOLEAN NOT NULL DEFAULT FALSE
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS {p}history (
    id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    name VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    term BIGINT NOT NULL,
    holder VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    event VARCHAR(32) NOT NULL,
    at DATETIME(6) NOT NULL,
    actor TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    detail TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    INDEX {p}history_name_at (name, at)
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS {p}tick (
    name VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
    last_tick_ms BIGINT NOT NULL,
    term BIGINT NOT NULL,
    holder VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    completed_at DATETIME(6) NOT NULL
) ENGINE=InnoDB",
    "CREATE TABLE IF NOT EXISTS {p}schema (version BIGINT NOT NULL) ENGINE=InnoDB",
    // The server that began the current epoch (`@@server_id`) and its floor: terms minted on
    // another server begin a new epoch (`model::Epoch`).
    "CREATE TABLE IF NOT EXISTS {p}epoch (
    id INTEGER NOT NULL PRIMARY KEY,
    server_id BIGINT NOT NULL,
    epoch BIGINT NOT NULL,
    started_at DATETIME(6) NOT NULL
) ENGINE=InnoDB",
];

/// The MySQL / MariaDB engine of [`MySqlBackend`](super::MySqlBackend). It keeps the Galera
/// node it writes through, if the server is one (see `galera.rs`).
pub struct MySql {
    galera: Option<Galera>,
    /// None on a Galera node, which refuses named locks (followers poll there).
    bells: Option<Box<Bells>>,
    /// A lock cycle's two procedures (`one_statement.rs`).
    pub(super) calls: CycleCalls,
    /// Set once the procedures could not be called (missing, no `EXECUTE`, definer gone):
    /// from then on every operation of this store runs the transaction.
    pub(super) without_routines: AtomicBool,
    /// The floor of the epoch this store's transactions read last (-1: none yet): the acquire
    /// procedure writes only where the server's own epoch row still has it.
    pub(super) epoch_floor: AtomicI64,
}

impl Engine for MySql {
    type Database = sqlx::MySql;
    const KIND: BackendKind = BackendKind::MySql;
    const NAME: &'static str = "MySqlBackend";

    fn begin(&self) -> std::borrow::Cow<'static, str> {
        "BEGIN".into()
    }

    fn dialect() -> Dialect {
        Dialect {
            text: |col| format!("CONVERT({col} USING utf8mb4)"),
            param: |_| "?".to_string(),
            to_us: |col| format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {col})"),
            from_us: |param| format!("TIMESTAMPADD(MICROSECOND, {param}, '1970-01-01 00:00:00')"),
            now_us: "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
            read_only: Some("CAST(@@global.read_only AS SIGNED)"),
            epoch: EpochSql::ServerRow,
            now_with_lock: false,
            for_update: "FOR UPDATE",
            share_lock: "LOCK IN SHARE MODE",
            update_returning: false,
            upsert: Upsert::OnDuplicateKey,
            notifies: false,
            // A locking read sees the newest committed row once its lock is granted, so a
            // takeover that committed meanwhile leaves no row. UTC_TIMESTAMP(6) is read when the
            // statement starts, before a wait for the lock; that only makes the expiry check
            // later by the wait, and a takeover must wait for this transaction either way.
            fence: |table| {
                format!(
                    "SELECT term FROM {table} WHERE name = ? AND holder = ? AND term = ? \
                     AND expires_at > UTC_TIMESTAMP(6) AND @@global.read_only = 0 \
                     LOCK IN SHARE MODE"
                )
            },
            schema: SCHEMA,
            routines: one_statement::routines,
        }
    }

    fn saw_epoch(&self, epoch: crate::model::Epoch) {
        let floor = i64::try_from(epoch.floor()).unwrap_or(-1);
        self.epoch_floor
            .store(floor, std::sync::atomic::Ordering::Relaxed);
    }

    fn conflict(&self, name: &str, error: &sqlx::Error) {
        if let Some(galera) = &self.galera {
            galera.conflict(name, error);
        }
    }

    async fn open(
        url: &str,
        redacted: &RedactedUrl,
        options: &StoreOptions,
        fresh: &Arc<Freshness>,
        _pooled: bool,
    ) -> Result<(MySqlPool, MySql)> {
        let normalized = match url.strip_prefix("mariadb:") {
            Some(rest) => format!("mysql:{rest}"),
            None => url.to_string(),
        };
        let connect = MySqlConnectOptions::from_str(&normalized).map_err(|e| Error::BadUrl {
            url: redacted.to_string(),
            reason: e.to_string(),
        })?;
        // A holder stopped inside its transaction would hold the row lock and block every other
        // candidate: MariaDB ends such sessions after the store's timeout (MySQL has no such
        // setting; there the lock lasts until the holder resumes or its connection dies), and
        // no lock wait outlasts it.
        let session_s = options.timeout.as_secs().max(1);
        crate::backend::probe(&connect, options.timeout, redacted).await?;
        let connect_for_bells = connect.clone();
        let pool = fresh
            .guard(MySqlPoolOptions::new())
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    // READ COMMITTED: a row is locked and read at its latest version anyway,
                    // and REPEATABLE READ's gap locks make creators of *different* new names
                    // deadlock each other.
                    sqlx::Executor::execute(
                        &mut *conn,
                        "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                    )
                    .await?;
                    let lock_wait = format!("SET SESSION innodb_lock_wait_timeout = {session_s}");
                    sqlx::Executor::execute(&mut *conn, lock_wait.as_str()).await?;
                    let idle = format!("SET SESSION idle_transaction_timeout = {session_s}");
                    if let Err(e) = sqlx::Executor::execute(&mut *conn, idle.as_str()).await {
                        tracing::debug!(error = %e, "no idle_transaction_timeout (MySQL)");
                    }
                    Ok(())
                })
            })
            .max_connections(options.max_connections)
            .acquire_timeout(options.timeout)
            .connect_with(connect)
            .await
            .map_err(|source| Error::Connect {
                url: redacted.to_string(),
                source,
            })?;
        let galera = Galera::detect(&pool)
            .await
            .map_err(|source| Error::Connect {
                url: redacted.to_string(),
                source,
            })?;
        if let Some(galera) = &galera {
            galera.announce(redacted.as_str());
        }
        // Galera refuses GET_LOCK with WSREP_ON (MDEV-30473): no doorbell there.
        let bells = galera
            .is_none()
            .then(|| Box::new(Bells::start(connect_for_bells, &options.table_prefix)));
        Ok((
            pool,
            MySql {
                galera,
                bells,
                calls: CycleCalls::new(&options.table_prefix),
                without_routines: AtomicBool::new(false),
                epoch_floor: AtomicI64::new(-1),
            },
        ))
    }

    /// A lock's uncontested acquisition and its release in one `CALL` of a procedure each (see
    /// `one_statement.rs`); `None` where the model's transaction must decide.
    async fn one_statement(
        backend: &SqlBackend<Self>,
        name: &str,
        op: &Op,
        _actor: &str,
    ) -> Result<Option<Applied>> {
        one_statement::run(backend, name, op).await
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        self.bells.as_ref().map(|b| b.subscribe())
    }

    /// Ends the doorbells' connections: the holder's (its bells given back) and the waiters'.
    fn close(&self) {
        if let Some(bells) = &self.bells {
            bells.close();
        }
    }

    fn applied(&self, name: &str, op: &Op, applied: &Applied) {
        if let Some(bells) = &self.bells {
            bells.applied(name, op, applied);
        }
    }

    fn committed(&self, topics: &[String]) {
        if let Some(bells) = &self.bells {
            bells.echo(topics);
        }
    }
}
