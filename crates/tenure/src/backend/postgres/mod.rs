//! PostgreSQL.
//!
//! The row lock and the clock are read in one statement: the lock is taken in a sub-select
//! (`FOR UPDATE`) and `clock_timestamp()` in the outer one, so the clock is read after the lock
//! was granted (never `now()`, the transaction's start). Every history event also sends
//! `pg_notify('<prefix>lease', name)`, delivered at commit, which wakes followers at once.

mod one_statement;

use super::options::StoreOptions;
use super::sql::{impl_sql_backend, Dialect, Statements};
use super::url::RedactedUrl;
use crate::error::{Error, Result};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::{PgPool, Postgres, Transaction};
use std::str::FromStr;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS {p}lease (
    name TEXT COLLATE \"C\" NOT NULL PRIMARY KEY,
    holder TEXT COLLATE \"C\",
    term BIGINT NOT NULL,
    acquired_at TIMESTAMPTZ NOT NULL,
    renewed_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    ttl_ms BIGINT NOT NULL,
    metadata TEXT,
    handover_to TEXT COLLATE \"C\",
    paused BOOLEAN NOT NULL DEFAULT FALSE
)",
    "CREATE TABLE IF NOT EXISTS {p}history (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name TEXT COLLATE \"C\" NOT NULL,
    term BIGINT NOT NULL,
    holder TEXT,
    event TEXT NOT NULL,
    at TIMESTAMPTZ NOT NULL,
    actor TEXT NOT NULL,
    detail TEXT NOT NULL
)",
    "CREATE INDEX IF NOT EXISTS {p}history_name_at ON {p}history (name, at)",
    "CREATE TABLE IF NOT EXISTS {p}tick (
    name TEXT COLLATE \"C\" NOT NULL PRIMARY KEY,
    last_tick_ms BIGINT NOT NULL,
    term BIGINT NOT NULL,
    holder TEXT NOT NULL,
    completed_at TIMESTAMPTZ NOT NULL
)",
    "CREATE TABLE IF NOT EXISTS {p}schema (version BIGINT NOT NULL)",
];

pub(crate) fn dialect() -> Dialect {
    Dialect {
        text: |col| col.to_string(),
        param: |n| format!("${n}"),
        to_us: |col| format!("(EXTRACT(EPOCH FROM {col}) * 1000000)::BIGINT"),
        from_us: |param| {
            format!("(TIMESTAMPTZ 'epoch' + {param}::BIGINT * INTERVAL '1 microsecond')")
        },
        now_us: "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT",
        now_with_lock: true,
        for_update: "FOR UPDATE",
        share_lock: "FOR SHARE",
        update_returning: true,
        notify_on_event: true,
        schema: SCHEMA,
    }
}

/// The PostgreSQL backend.
pub struct PostgresBackend {
    pool: PgPool,
    stmts: Statements,
    cycle: one_statement::CycleStatements,
    url: RedactedUrl,
    retention_us: Option<i64>,
    begin: &'static str,
    notifications: broadcast::Sender<String>,
    listener: JoinHandle<()>,
}

impl Drop for PostgresBackend {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl PostgresBackend {
    /// Connects to `url` and starts listening for lease changes.
    ///
    /// # Errors
    /// [`Error::BadUrl`] for a URL sqlx cannot read, [`Error::Connect`] if the server cannot be
    /// reached or refuses the credentials.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        options.validate()?;
        let redacted = RedactedUrl::new(url);
        let connect = PgConnectOptions::from_str(url).map_err(|e| Error::BadUrl {
            url: redacted.to_string(),
            reason: e.to_string(),
        })?;
        let connect_error = |source| Error::Connect {
            url: redacted.to_string(),
            source,
        };
        // A holder stopped (SIGSTOP, a VM pause) inside its transaction would hold the row lock
        // and block every other candidate for as long as it is stopped: the server ends such
        // sessions after the store's timeout, and no lock wait outlasts it either.
        let session_ms = options.timeout.as_millis().max(1);
        super::probe(&connect, options.timeout, &redacted).await?;
        let pool = PgPoolOptions::new()
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    let set = format!(
                        "SET idle_in_transaction_session_timeout = {session_ms}; \
                         SET lock_timeout = {session_ms}"
                    );
                    sqlx::Executor::execute(conn, set.as_str()).await?;
                    Ok(())
                })
            })
            // One more than asked for: the listener keeps one for itself.
            .max_connections(options.max_connections + 1)
            .acquire_timeout(options.timeout)
            .connect_with(connect)
            .await
            .map_err(connect_error)?;
        let channel = format!("{}lease", options.table_prefix);
        let mut listener = PgListener::connect_with(&pool)
            .await
            .map_err(connect_error)?;
        listener.listen(&channel).await.map_err(connect_error)?;
        let (notifications, _) = broadcast::channel(1024);
        let listener = tokio::spawn(forward(listener, notifications.clone()));
        Ok(PostgresBackend {
            pool,
            stmts: Statements::new(&options.table_prefix, &dialect()),
            cycle: one_statement::CycleStatements::new(&options.table_prefix, &dialect()),
            url: redacted,
            retention_us: options.retention_us(),
            begin: "BEGIN",
            notifications,
            listener,
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
        tx: &mut Transaction<'_, Postgres>,
        name: &str,
        candidate: &str,
        term: u64,
    ) -> Result<()> {
        let sql = format!(
            "SELECT l.holder = $2 AND l.term = $3 AND l.expires_at > clock_timestamp() AS held \
             FROM (SELECT holder, term, expires_at FROM {} WHERE name = $1 FOR SHARE) l",
            self.stmts.lease_table
        );
        let held: Option<Option<bool>> = sqlx::query_scalar(&sql)
            .bind(name)
            .bind(candidate)
            .bind(term as i64)
            .fetch_optional(&mut **tx)
            .await?;
        if held.flatten() == Some(true) {
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
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    fn subscription(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.notifications.subscribe())
    }
}

/// Forwards notifications to subscribers. `PgListener` reconnects by itself after an error;
/// what was sent meanwhile is lost, which followers cover by polling every renew interval.
async fn forward(mut listener: PgListener, out: broadcast::Sender<String>) {
    loop {
        match listener.recv().await {
            Ok(note) => {
                let _ = out.send(note.payload().to_string());
            }
            Err(e) => {
                tracing::debug!(error = %e, "LISTEN connection lost; reconnecting");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
        }
    }
}

impl super::sql::OneStatement for PostgresBackend {
    /// A campaign for a vacant lease, a release, and every answer that writes nothing, in one
    /// statement (see `one_statement.rs`); `None` where the model's transaction must decide.
    async fn one_statement(
        &self,
        name: &str,
        op: &crate::model::Op,
        actor: &str,
    ) -> Result<Option<crate::backend::Applied>> {
        use crate::model::Op;
        use sqlx::Row;
        let query = match op {
            // Whatever term it names: the statement only acquires a vacant lease.
            Op::Campaign {
                candidate,
                ttl_ms,
                metadata,
                ..
            } => sqlx::query(&self.cycle.acquire)
                .bind(name)
                .bind(candidate)
                .bind(*ttl_ms as i64)
                .bind(metadata)
                .bind(actor),
            Op::Release {
                candidate,
                term,
                at_least_ms,
                reason,
            } => sqlx::query(&self.cycle.release)
                .bind(name)
                .bind(candidate)
                .bind(*term as i64)
                .bind(*at_least_ms as i64)
                .bind(actor)
                .bind(reason.as_deref().unwrap_or_default()),
            _ => return Ok(None),
        };
        let row = match query.fetch_optional(&self.pool).await {
            Ok(Some(row)) => row,
            // A name never used: the transaction inserts it.
            Ok(None) => return Ok(None),
            Err(e) if super::sql::is_retryable(&e) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let wrote: bool = row.try_get("wrote")?;
        let now = crate::model::DbTime(row.try_get("now_us")?);
        let lease = self.lease_from(&row)?;
        if let Some(keep) = self
            .retention_us
            .filter(|_| one_statement::prune_due(op, wrote, lease.term))
        {
            // The acquisition has committed: a failed prune must not make it look failed (the
            // caller would give up a tenure it holds). The next due prune deletes the rows.
            let pruned = sqlx::query(&self.stmts.prune_history)
                .bind(name)
                .bind(now.0.saturating_sub(keep))
                .execute(&self.pool)
                .await;
            if let Err(e) = pruned {
                tracing::warn!(name, error = %e, "pruning old history failed; kept for now");
            }
        }
        Ok(match one_statement::outcome(op, wrote, now, lease, name) {
            one_statement::Outcome::Done(applied) => Some(applied),
            one_statement::Outcome::Fallback => None,
        })
    }
}

impl_sql_backend!(
    PostgresBackend,
    Postgres,
    crate::backend::BackendKind::Postgres
);
