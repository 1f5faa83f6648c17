//! The PostgreSQL engine: its schema, its dialect, its pool, and the LISTEN task that turns
//! `pg_notify` into [`Backend::subscribe`](crate::Backend::subscribe).

use super::marks::Marks;
use super::one_statement::{self, CycleStatements};
use super::renewal;
use crate::backend::fresh::Freshness;
use crate::backend::sql::{Dialect, Engine, EpochSql, SqlBackend, Upsert};
use crate::backend::url::{split_pooler, Pooler};
use crate::backend::{Applied, BackendKind, RedactedUrl, StoreOptions};
use crate::changes::ANY;
use crate::error::{is_read_only, Error, Result};
use crate::model::{DbTime, Op};
use sqlx::postgres::{PgConnectOptions, PgConnection, PgListener, PgPoolOptions, PgRow};
use sqlx::PgPool;
use std::borrow::Cow;
use std::str::FromStr;
use std::sync::Arc;
use tokio::sync::{broadcast, watch};
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
    /// The locks' keep-alive, one statement however many (`renewal.rs`).
    pub(super) renewal: String,
    /// `BEGIN`, or behind a transaction pooler `BEGIN; UNLISTEN *; SET LOCAL …` (one round trip).
    begin: Cow<'static, str>,
    /// `None` where nothing listens (a transaction pooler and no notify URL).
    notifications: Option<broadcast::Sender<String>>,
    /// Forwards `pg_notify` to `notifications`; aborted when the backend is dropped.
    listener: Option<JoinHandle<()>>,
    /// Holds this process's waiting mark while it has subscribers (`marks.rs`); `None` behind
    /// a transaction pooler, where every release runs the transaction and always notifies.
    marks: Option<Marks>,
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
    }
}

impl Engine for Postgres {
    type Database = sqlx::Postgres;
    const KIND: BackendKind = BackendKind::Postgres;
    const NAME: &'static str = "PostgresBackend";

    fn begin(&self) -> Cow<'static, str> {
        self.begin.clone()
    }

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
            // The WAL file name of the insert position begins with its timeline (8 hex digits).
            epoch: EpochSql::Timeline(
                "('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::BIGINT",
            ),
            now_with_lock: true,
            for_update: "FOR UPDATE",
            share_lock: "FOR SHARE",
            update_returning: true,
            upsert: Upsert::OnConflict,
            notifies: true,
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
            routines: |_| Vec::new(),
        }
    }

    async fn open(
        url: &str,
        redacted: &RedactedUrl,
        options: &StoreOptions,
        fresh: &Arc<Freshness>,
        pooled: bool,
    ) -> Result<(PgPool, Postgres)> {
        let mut connect = PgConnectOptions::from_str(url).map_err(|e| Error::BadUrl {
            url: redacted.to_string(),
            reason: e.to_string(),
        })?;
        if pooled {
            // A startup parameter PgBouncer refuses unless told to ignore it; tenure reads no
            // floating-point values.
            connect = connect.extra_float_digits(None);
        }
        let connect_error = |source| Error::Connect {
            url: redacted.to_string(),
            source,
        };
        // A holder stopped (SIGSTOP, a VM pause) inside its transaction would hold the row lock
        // and block every other candidate for as long as it is stopped: the server ends such
        // sessions after the store's timeout, and no lock wait outlasts it either. Behind a
        // transaction pooler a session setting would leak to other clients of the server (or
        // be lost): there each transaction sets them for itself, in its BEGIN.
        let session_ms = options.timeout.as_millis().max(1);
        let settings = format!(
            "lock_timeout = {session_ms}; SET LOCAL idle_in_transaction_session_timeout = \
             {session_ms}"
        );
        crate::backend::probe(&connect, options.timeout, redacted).await?;
        let listen_here = !pooled && options.notify_url.is_none();
        let mut pool = fresh.guard(PgPoolOptions::new());
        if !pooled {
            pool = pool.after_connect(move |conn, _| {
                Box::pin(async move {
                    let set = format!(
                        "SET idle_in_transaction_session_timeout = {session_ms}; \
                         SET lock_timeout = {session_ms}"
                    );
                    sqlx::Executor::execute(conn, set.as_str()).await?;
                    Ok(())
                })
            });
        }
        let pool = pool
            // One more than asked for where the listener keeps one for itself.
            .max_connections(options.max_connections + u32::from(listen_here))
            .acquire_timeout(options.timeout)
            .connect_with(connect.clone())
            .await
            .map_err(connect_error)?;
        let mark_connect = connect;
        let channel = format!("{}lease", options.table_prefix);
        let listening = match &options.notify_url {
            Some(notify) => {
                let (notify_pool, shown) = notify_pool(notify, options, fresh).await?;
                Some(listen(&notify_pool, channel.clone(), &shown, fresh).await?)
            }
            None if listen_here => {
                Some(listen(&pool, channel.clone(), redacted.as_str(), fresh).await?)
            }
            None => {
                tracing::info!(
                    url = %redacted,
                    "behind a transaction-mode pooler tenure cannot LISTEN (it needs a session): \
                     followers notice a released lease by polling, every renew interval; for \
                     push notifications give a direct PostgreSQL URL with --notify-url \
                     (StoreOptions::notify_url)"
                );
                None
            }
        };
        let (notifications, listener) = match listening {
            Some((notifications, task)) => (Some(notifications), Some(task)),
            None => (None, None),
        };
        let marks = notifications
            .as_ref()
            .filter(|_| !pooled)
            .map(|out| Marks::start(mark_connect, &channel, out.clone()));
        // `UNLISTEN *`: a client that LISTENed through the pooler (tenure itself without
        // `?pooler=transaction`, say) leaves that on the server, which would then deliver
        // notifications to us at our commit; UNLISTEN takes effect at the commit, before that.
        let begin = if pooled {
            Cow::Owned(format!("BEGIN; UNLISTEN *; SET LOCAL {settings}"))
        } else {
            Cow::Borrowed("BEGIN")
        };
        Ok((
            pool,
            Postgres {
                cycle: CycleStatements::new(&options.table_prefix, &Self::dialect()),
                renewal: renewal::statement(&options.table_prefix, &Self::dialect()),
                begin,
                notifications,
                listener,
                marks,
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

    /// The locks' keep-alive in one statement, the pairs as two arrays (see `renewal.rs`).
    async fn renew_all(
        backend: &SqlBackend<Self>,
        conn: &mut PgConnection,
        holder: &str,
        leases: &[(String, u64)],
        now: DbTime,
    ) -> Result<Option<Vec<PgRow>>> {
        renewal::run(backend, conn, holder, leases, now)
            .await
            .map(Some)
    }

    /// Stops the LISTEN task, which gives its connection back to the pool (the pool's close
    /// waits for it), and the waiting mark's, whose connection closes and lets the mark go.
    fn close(&self) {
        if let Some(listener) = &self.listener {
            listener.abort();
        }
        if let Some(marks) = &self.marks {
            marks.stop();
        }
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        let receiver = self
            .notifications
            .as_ref()
            .map(broadcast::Sender::subscribe);
        if let Some(marks) = &self.marks {
            marks.want();
        }
        receiver
    }
}

/// A pool of one connection to the notify URL `url`: a direct PostgreSQL server (or a
/// session-mode pool), never a transaction pooler; and the URL as errors show it. Guarded by
/// the store's `fresh` as the store's own pool is, so that the listener's connection follows a
/// failover too.
async fn notify_pool(
    url: &str,
    options: &StoreOptions,
    fresh: &Arc<Freshness>,
) -> Result<(PgPool, String)> {
    let redacted = RedactedUrl::new(url);
    let shown = format!("{redacted} (the notify URL)");
    let bad = |reason: String| Error::BadUrl {
        url: shown.clone(),
        reason,
    };
    if BackendKind::check_url(url).ok() != Some(BackendKind::Postgres) {
        return Err(bad(
            "notifications come from PostgreSQL's LISTEN: give a postgres:// URL of the same \
             database, connecting directly"
                .to_string(),
        ));
    }
    let (stripped, pooler) = split_pooler(url).map_err(&bad)?;
    if pooler == Pooler::Transaction {
        return Err(bad(
            "LISTEN needs a session of its own: give a direct URL (or a session-mode pool), \
             not a transaction pooler"
                .to_string(),
        ));
    }
    let connect = PgConnectOptions::from_str(&stripped).map_err(|e| bad(e.to_string()))?;
    let connect_error = |source| Error::Connect {
        url: shown.clone(),
        source,
    };
    crate::backend::probe(&connect, options.timeout, &redacted)
        .await
        .map_err(|e| match e {
            Error::Connect { source, .. } => connect_error(source),
            other => other,
        })?;
    let pool = fresh
        .guard(PgPoolOptions::new())
        .max_connections(1)
        .acquire_timeout(options.timeout)
        .connect_with(connect)
        .await
        .map_err(connect_error)?;
    Ok((pool, shown))
}

/// LISTENs on `channel` through `pool` (of the server `shown`) and forwards what arrives to
/// the returned sender, from a task of its own that follows the primary (see [`follow`]).
async fn listen(
    pool: &PgPool,
    channel: String,
    shown: &str,
    fresh: &Arc<Freshness>,
) -> Result<(broadcast::Sender<String>, JoinHandle<()>)> {
    let connect_error = |source| Error::Connect {
        url: shown.to_string(),
        source,
    };
    let mut listener = PgListener::connect_with(pool)
        .await
        .map_err(connect_error)?;
    let (notifications, _) = broadcast::channel(1024);
    let listening = match listener.listen(&channel).await {
        Ok(()) => Some(listener),
        // A standby refuses LISTEN ("cannot execute LISTEN during recovery", 25006). Start
        // anyway, so that every campaign says why it does not lead (`Error::ReadOnly`) and
        // the store leads once the server is promoted; listen from then on.
        Err(e) if is_read_only(&e) => {
            tracing::warn!(
                url = %shown,
                "the server is a standby: no notifications until it takes writes; polling"
            );
            None
        }
        Err(e) => return Err(connect_error(e)),
    };
    let task = tokio::spawn(follow(
        pool.clone(),
        channel,
        listening,
        fresh.discards(),
        notifications.clone(),
    ));
    Ok((notifications, task))
}

/// Forwards notifications while it LISTENs, and LISTENs again on a fresh connection:
/// - at every freshness mark (a call timed out or found the server read-only: a failover may
///   have happened, and the held connection may lead to the old primary — after a switchover
///   a live standby that notifies nobody): the held connection goes back to the pool, which
///   closes it as stale, and a new one LISTENs wherever the URL leads now;
/// - every second while the server refuses LISTEN (a standby, until it is promoted).
///
/// Each new LISTEN wakes everyone once ([`ANY`]): what was sent meanwhile is lost. `PgListener`
/// reconnects by itself after a connection error (through the pool: a fresh connection after
/// a mark); followers also poll every renew interval, which covers what a gap loses.
async fn follow(
    pool: PgPool,
    channel: String,
    mut listener: Option<PgListener>,
    mut discards: watch::Receiver<u64>,
    out: broadcast::Sender<String>,
) {
    enum Event {
        Note(std::result::Result<sqlx::postgres::PgNotification, sqlx::Error>),
        Discarded,
        Retry,
        Gone,
    }
    loop {
        let event = match listener.as_mut() {
            Some(held) => tokio::select! {
                note = held.recv() => Event::Note(note),
                changed = discards.changed() => match changed {
                    Ok(()) => Event::Discarded,
                    Err(_) => Event::Gone,
                },
            },
            None => tokio::select! {
                () = tokio::time::sleep(std::time::Duration::from_secs(1)) => Event::Retry,
                changed = discards.changed() => match changed {
                    Ok(()) => Event::Retry,
                    Err(_) => Event::Gone,
                },
            },
        };
        match event {
            Event::Note(Ok(note)) => {
                let _ = out.send(note.payload().to_string());
            }
            Event::Note(Err(e)) => {
                tracing::debug!(error = %e, "LISTEN connection lost; reconnecting");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Event::Discarded | Event::Retry => {
                // Given back (and closed, as stale) before a fresh one is taken.
                drop(listener.take());
                listener = relisten(&pool, &channel).await;
                if listener.is_some() {
                    tracing::debug!(%channel, "listening on a fresh connection");
                    let _ = out.send(ANY.to_string());
                }
            }
            Event::Gone => return,
        }
    }
}

/// A new listener on `channel`, if the server takes LISTEN now.
async fn relisten(pool: &PgPool, channel: &str) -> Option<PgListener> {
    let mut listener = PgListener::connect_with(pool).await.ok()?;
    listener.listen(channel).await.ok()?;
    Some(listener)
}
