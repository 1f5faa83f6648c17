//! The PostgreSQL engine: its schema, its dialect, its pool, and the LISTEN task that turns
//! `pg_notify` into [`Backend::subscribe`](crate::Backend::subscribe).

use super::one_statement::{self, CycleStatements};
use crate::backend::fresh::Freshness;
use crate::backend::sql::{Dialect, Engine, SqlBackend};
use crate::backend::{Applied, BackendKind, RedactedUrl, StoreOptions};
use crate::error::{Error, Result};
use crate::model::Op;
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use sqlx::PgPool;
use std::str::FromStr;
use std::sync::Arc;
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

/// The PostgreSQL engine of [`PostgresBackend`](super::PostgresBackend).
pub struct Postgres {
    /// The lock cycle's two one-statement operations.
    pub(super) cycle: CycleStatements,
    notifications: broadcast::Sender<String>,
    /// Forwards `pg_notify` to `notifications`; aborted when the backend is dropped.
    listener: JoinHandle<()>,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.listener.abort();
    }
}

impl Engine for Postgres {
    type Database = sqlx::Postgres;
    const KIND: BackendKind = BackendKind::Postgres;
    const NAME: &'static str = "PostgresBackend";
    const BEGIN: &'static str = "BEGIN";

    fn dialect() -> Dialect {
        Dialect {
            text: |col| col.to_string(),
            param: |n| format!("${n}"),
            to_us: |col| format!("(EXTRACT(EPOCH FROM {col}) * 1000000)::BIGINT"),
            from_us: |param| {
                format!("(TIMESTAMPTZ 'epoch' + {param}::BIGINT * INTERVAL '1 microsecond')")
            },
            now_us: "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000000)::BIGINT",
            read_only: None,
            now_with_lock: true,
            for_update: "FOR UPDATE",
            share_lock: "FOR SHARE",
            update_returning: true,
            notify_on_event: true,
            // The row is share-locked in the sub-select; the clock in the outer query is read
            // after the lock was granted.
            fence: |table| {
                format!(
                    "SELECT l.term FROM (SELECT holder, term, expires_at FROM {table} \
                     WHERE name = $1 FOR SHARE) l \
                     WHERE l.holder = $2 AND l.term = $3 AND l.expires_at > clock_timestamp()"
                )
            },
            schema: SCHEMA,
        }
    }

    async fn open(
        url: &str,
        redacted: &RedactedUrl,
        options: &StoreOptions,
        fresh: &Arc<Freshness>,
    ) -> Result<(PgPool, Postgres)> {
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
        crate::backend::probe(&connect, options.timeout, redacted).await?;
        let pool = fresh
            .guard(PgPoolOptions::new())
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
        let (notifications, _) = broadcast::channel(1024);
        let listener = match listener.listen(&channel).await {
            Ok(()) => tokio::spawn(forward(listener, notifications.clone())),
            // A standby refuses LISTEN ("cannot execute LISTEN during recovery", 25006). Start
            // anyway, so that every campaign says why it does not lead (`Error::ReadOnly`) and
            // the store leads once the server is promoted; listen from then on.
            Err(e) if is_read_only(&e) => {
                tracing::warn!(
                    url = %redacted,
                    "the server is a standby: no notifications until it takes writes; polling"
                );
                tokio::spawn(listen_later(pool.clone(), channel, notifications.clone()))
            }
            Err(e) => return Err(connect_error(e)),
        };
        Ok((
            pool,
            Postgres {
                cycle: CycleStatements::new(&options.table_prefix, &Self::dialect()),
                notifications,
                listener,
            },
        ))
    }

    /// A campaign for a vacant lease, a release, and every answer that writes nothing, in one
    /// statement (see `one_statement.rs`); `None` where the model's transaction must decide.
    async fn one_statement(
        backend: &SqlBackend<Self>,
        name: &str,
        op: &Op,
        actor: &str,
    ) -> Result<Option<Applied>> {
        one_statement::run(backend, name, op, actor).await
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        Some(self.notifications.subscribe())
    }
}

/// Whether `e` is the server's refusal because it is read-only (SQLSTATE 25006).
fn is_read_only(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "25006")
}

/// LISTENs on `channel` as soon as the server takes it (tried every second), then forwards.
async fn listen_later(pool: PgPool, channel: String, out: broadcast::Sender<String>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        let Ok(mut listener) = PgListener::connect_with(&pool).await else {
            continue;
        };
        if listener.listen(&channel).await.is_ok() {
            tracing::info!("the server takes LISTEN now: notifications resume");
            return forward(listener, out).await;
        }
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
