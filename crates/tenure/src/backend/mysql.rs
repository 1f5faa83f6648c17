//! The MySQL family (tested on MariaDB 10.11; only syntax MySQL 8 also accepts).
//!
//! `UTC_TIMESTAMP(6)` is fixed at the start of a statement, so the clock is read by a second
//! statement after `SELECT … FOR UPDATE` has been granted the row. Names compare byte for byte
//! (`utf8mb4_bin`), times are `DATETIME(6)` in UTC. Outcomes are never inferred from affected
//! rows: the row is read under its lock and the model decides.

use super::options::StoreOptions;
use super::sql::{impl_sql_backend, Dialect, Statements};
use super::url::RedactedUrl;
use crate::error::{Error, Result};
use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{MySql, MySqlPool, Transaction};
use std::str::FromStr;

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
];

pub(crate) fn dialect() -> Dialect {
    Dialect {
        text: |col| format!("CONVERT({col} USING utf8mb4)"),
        param: |_| "?".to_string(),
        to_us: |col| format!("TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', {col})"),
        from_us: |param| format!("TIMESTAMPADD(MICROSECOND, {param}, '1970-01-01 00:00:00')"),
        now_us: "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
        now_with_lock: false,
        for_update: "FOR UPDATE",
        share_lock: "LOCK IN SHARE MODE",
        update_returning: false,
        notify_on_event: false,
        schema: SCHEMA,
    }
}

/// The MySQL / MariaDB backend.
pub struct MySqlBackend {
    pool: MySqlPool,
    stmts: Statements,
    url: RedactedUrl,
    retention_us: Option<i64>,
    begin: &'static str,
}

impl MySqlBackend {
    /// Connects to `url` (`mysql://` or `mariadb://`).
    ///
    /// # Errors
    /// [`Error::BadUrl`] for a URL sqlx cannot read, [`Error::Connect`] if the server cannot be
    /// reached or refuses the credentials.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        options.validate()?;
        let redacted = RedactedUrl::new(url);
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
        super::probe(&connect, options.timeout, &redacted).await?;
        let pool = MySqlPoolOptions::new()
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
        Ok(MySqlBackend {
            pool,
            stmts: Statements::new(&options.table_prefix, &dialect()),
            url: redacted,
            retention_us: options.retention_us(),
            begin: "BEGIN",
        })
    }

    /// Checks, inside the caller's transaction `tx`, that `candidate` still holds `term` of
    /// `name` and has not expired, and locks the row in share mode until `tx` ends: a takeover
    /// (which locks the row for update) must wait for `tx`, so writes made in it can never land
    /// after another tenure began. Keep such transactions short: the holder's own renewal waits
    /// for them too.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease is not (or no longer) held with that term; database
    /// errors. In both cases roll `tx` back.
    pub async fn fence(
        &self,
        tx: &mut Transaction<'_, MySql>,
        name: &str,
        candidate: &str,
        term: u64,
    ) -> Result<()> {
        use sqlx::Row;
        let lock = format!(
            "SELECT CONVERT(holder USING utf8mb4) AS holder, term FROM {} WHERE name = ? LOCK IN SHARE MODE",
            self.stmts.lease_table
        );
        let Some(row) = sqlx::query(&lock)
            .bind(name)
            .fetch_optional(&mut **tx)
            .await?
        else {
            return Err(self.lost(name, candidate, term));
        };
        let holder: Option<String> = row.try_get("holder")?;
        let row_term: i64 = row.try_get("term")?;
        // The expiry is checked by a second statement: UTC_TIMESTAMP(6) in the first one was
        // fixed before the lock was granted.
        let live = format!(
            "SELECT expires_at > UTC_TIMESTAMP(6) AS live FROM {} WHERE name = ? LOCK IN SHARE MODE",
            self.stmts.lease_table
        );
        let live: bool = sqlx::query_scalar::<_, i64>(&live)
            .bind(name)
            .fetch_one(&mut **tx)
            .await?
            == 1;
        if holder.as_deref() == Some(candidate) && row_term == term as i64 && live {
            Ok(())
        } else {
            Err(self.lost(name, candidate, term))
        }
    }

    fn lost(&self, name: &str, candidate: &str, term: u64) -> Error {
        Error::LeaseLost {
            name: name.to_string(),
            candidate: candidate.to_string(),
            term,
        }
    }

    /// The connection pool, for the caller's own transactions (e.g. with [`fence`](Self::fence)).
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }

    fn subscription(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        None
    }
}

/// Every operation runs the model's transaction.
impl super::sql::OneStatement for MySqlBackend {}

impl_sql_backend!(MySqlBackend, MySql, crate::backend::BackendKind::MySql);
