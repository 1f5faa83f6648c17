//! The storage trait and its three implementations.
//!
//! A backend does one thing per operation: in a transaction that holds the lease row's lock
//! (`SELECT … FOR UPDATE`; SQLite: `BEGIN IMMEDIATE`), it reads the row and the database's
//! clock *after* taking the lock, runs the model's `decide`, writes the row
//! and the history event it returns, and commits. The rules therefore exist once, and every
//! backend's SQL is only storage: rows in, rows out, times as database timestamps.

use crate::error::Result;
use crate::model::{DbTime, Lease, Op};
use async_trait::async_trait;
use std::fmt;
use tokio::sync::broadcast;

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "testing")]
mod batch;
#[cfg(feature = "testing")]
mod counting;
#[cfg(feature = "testing")]
mod failing;
mod fresh;
pub(crate) mod kind;
pub(crate) mod options;
mod sql;
pub(crate) mod tx;
pub(crate) mod url;

pub(crate) use crate::records::{Applied, HistoryEntry, Snapshot};
#[cfg(feature = "testing")]
pub use batch::apply_batch;
#[cfg(feature = "testing")]
pub use counting::{CountingBackend, Counts};
#[cfg(feature = "testing")]
pub use failing::FailingBackend;
pub(crate) use kind::BackendKind;
pub(crate) use options::StoreOptions;
pub use sql::SqlBackend;
/// What [`Backend::transaction`] runs: a wrapper of a backend in tenure's own tests passes it
/// on (`testing` feature). Not part of the API.
#[cfg(feature = "testing")]
#[doc(hidden)]
pub use tx::Body as TransactionBody;
pub(crate) use url::RedactedUrl;

/// The outcome of [`Backend::renew_many`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewed {
    /// The database instant of the renewal.
    pub now: DbTime,
    /// The rows that were renewed. Leases asked for but missing here were not: no longer held
    /// with that term, expired, paused or handed over.
    pub leases: Vec<Lease>,
}

/// Storage for leases: implemented for PostgreSQL, the MySQL family and SQLite.
///
/// Only [`Store`](crate::Store) calls it (it validates input and bounds every call with its
/// timeout); implement or wrap it to instrument tenure or put it on other storage. Its methods,
/// in order: who it is (`kind`, `url`); the lease operations, each decided by the model in one
/// transaction (`apply`, and `renew_many`, the keep-alive of many locks); the schedules' ticks
/// (`last_tick`, `complete_tick`); the reads (`get`, `list`, `history`); the tables (`migrate`,
/// `check_schema`, `schema_sql`, `fence_sql`); what the database pushes (`subscribe`); and
/// one transaction for whatever else reads and writes several rows at once (`transaction`).
/// It is one trait, not four, because the SQL implementation's sqlx bounds would otherwise be
/// written out on every part.
#[async_trait]
pub trait Backend: Send + Sync + fmt::Debug + 'static {
    /// Which engine this is.
    fn kind(&self) -> BackendKind;

    /// The database URL, with any password replaced.
    fn url(&self) -> &RedactedUrl;

    /// Applies `op` to `name` atomically, recording `actor` in the history.
    ///
    /// # Errors
    /// Database failures. The operation's effect is then unknown: it may have committed.
    ///
    /// # Cancel safety
    /// Dropping the future rolls the transaction back unless the commit was already sent, in
    /// which case the effect is unknown (as for any error).
    async fn apply(&self, name: &str, op: &Op, actor: &str) -> Result<Applied>;

    /// Renews the tenures `leases` (name, term) held by `holder`, each with its row's own ttl,
    /// exactly as [`Op::Renew`] would one by one, in one transaction of a fixed number of
    /// statements (PostgreSQL), or of a fixed number per 5,000 leases (the keep-alive of many
    /// held locks, which asks for at most 10,000 at a time).
    ///
    /// # Errors
    /// Database failures; then nothing is known to be renewed.
    async fn renew_many(&self, holder: &str, leases: &[(String, u64)]) -> Result<Renewed>;

    /// The last completed tick of the schedule `name` (milliseconds since the epoch), if any,
    /// with the database's clock.
    async fn last_tick(&self, name: &str) -> Result<(Option<i64>, DbTime)>;

    /// Records tick `tick_ms` of the schedule `name` as completed, fenced: in one transaction
    /// that first checks (and share-locks) that `holder` still holds `term` of the lease
    /// `name`. Returns `false` if that tick (or a later one) was already recorded.
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease is not held with that term;
    /// database errors.
    async fn complete_tick(
        &self,
        name: &str,
        holder: &str,
        term: u64,
        tick_ms: i64,
    ) -> Result<bool>;

    /// Reads one row (an empty `leases` if the name is unknown).
    async fn get(&self, name: &str) -> Result<Snapshot>;

    /// Reads every row.
    async fn list(&self) -> Result<Snapshot>;

    /// The newest `limit` transitions of `name`, newest first.
    async fn history(&self, name: &str, limit: u32) -> Result<Vec<HistoryEntry>>;

    /// Creates the tables if they do not exist and records the schema version.
    async fn migrate(&self) -> Result<()>;

    /// Checks that the tables exist and have a schema version this build understands.
    async fn check_schema(&self) -> Result<()>;

    /// The DDL that [`migrate`](Backend::migrate) runs, for a DBA to apply by hand.
    fn schema_sql(&self) -> String;

    /// The fence statement on this backend's lease table (see `tenure fence-sql`): parameters
    /// name, holder, term; one row while that tenure is held. `None` where there is no SQL
    /// table to fence against (test and wrapper backends may pass the inner one's on).
    fn fence_sql(&self) -> Option<String> {
        None
    }

    /// Whether the database is reached through a transaction-mode pooler (`?pooler=transaction`):
    /// then the fence statement must run unnamed (not prepared and cached) in the caller's
    /// transaction too.
    fn transaction_pooler(&self) -> bool {
        false
    }

    /// Names whose lease was released, demoted, handed over, resumed or acquired, as the
    /// database pushes them (PostgreSQL LISTEN/NOTIFY) or a doorbell rings them (SQLite's
    /// file, or `"\0"` for "any name" when it may have missed one; MySQL's named locks).
    /// `None` where the engine does not listen (behind a transaction pooler without a notify
    /// URL).
    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        None
    }

    /// Runs `body` in one transaction (begun, run, committed or rolled back as it says, and
    /// run again after a transient conflict): the seam of the features that keep rows of
    /// their own beside the leases (`tx.rs`). The body's type is crate-private, so only
    /// tenure's own backends and wrappers implement this; the default refuses.
    ///
    /// # Errors
    /// What the body returns, database errors; [`Error::Unsupported`](crate::Error::Unsupported)
    /// by default.
    async fn transaction(&self, _body: &mut dyn tx::Body) -> Result<()> {
        Err(crate::Error::Unsupported("transactions"))
    }

    /// Stops using the connections open now: a call timed out or found the server read-only,
    /// so they may lead to a server that is no longer the primary, or hang. Later calls open
    /// new ones (through DNS, a virtual IP or a proxy, to wherever the primary is now). Called
    /// by [`Store`](crate::Store); the default does nothing.
    fn discard_connections(&self) {}

    /// Closes the connections and waits until each is closed (and, on SQLite, its worker
    /// thread has answered its last command): a process that exits right after lets nothing
    /// of tenure's run on behind it. Later calls fail. The default does nothing.
    async fn close(&self) {}
}

/// Opens (and closes) one connection, so that a refused connection or bad credentials are
/// reported as such — a pool would only say that it timed out (the servers' backends).
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
pub(crate) async fn probe<C>(
    connect: &C,
    timeout: std::time::Duration,
    url: &RedactedUrl,
) -> Result<()>
where
    C: sqlx::ConnectOptions,
    C::Connection: Sized,
{
    use sqlx::Connection;
    let error = |source| crate::error::Error::Connect {
        url: url.to_string(),
        source,
    };
    match tokio::time::timeout(timeout, connect.connect()).await {
        Ok(Ok(connection)) => {
            let _ = connection.close().await;
            Ok(())
        }
        Ok(Err(e)) => Err(error(e)),
        Err(_) => Err(error(sqlx::Error::PoolTimedOut)),
    }
}

/// Connects to the database named by `url` and prepares its tables (unless
/// [`StoreOptions::auto_create`] is off, in which case they must exist).
///
/// URLs: `postgres://…` / `postgresql://…`, `mysql://…` / `mariadb://…`, `sqlite://PATH` /
/// `sqlite:PATH` (created if missing).
///
/// # Errors
/// [`Error::BadUrl`](crate::Error::BadUrl), [`Error::Connect`](crate::Error::Connect),
/// [`Error::SchemaMissing`](crate::Error::SchemaMissing) and database errors.
pub async fn connect(url: &str, options: &StoreOptions) -> Result<std::sync::Arc<dyn Backend>> {
    options.validate()?;
    let backend: std::sync::Arc<dyn Backend> = match BackendKind::check_url(url)? {
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => {
            std::sync::Arc::new(postgres::PostgresBackend::connect(url, options).await?)
        }
        #[cfg(feature = "mysql")]
        BackendKind::MySql => {
            std::sync::Arc::new(mysql::MySqlBackend::connect(url, options).await?)
        }
        #[cfg(feature = "sqlite")]
        BackendKind::Sqlite => {
            std::sync::Arc::new(sqlite::SqliteBackend::connect(url, options).await?)
        }
        #[allow(unreachable_patterns)]
        other => {
            return Err(crate::error::Error::BackendNotCompiled {
                url: RedactedUrl::new(url).to_string(),
                backend: other.feature(),
            })
        }
    };
    if options.auto_create {
        backend.migrate().await?;
    } else {
        backend.check_schema().await?;
    }
    Ok(backend)
}

/// The fence statement on `kind` with table prefix `prefix` (what `tenure fence-sql` prints),
/// without connecting. Parameters, in order: name, holder, term.
///
/// # Errors
/// As [`schema_script`](crate::schema_script).
pub fn fence_sql(kind: BackendKind, prefix: &str) -> Result<String> {
    crate::validate::table_prefix(prefix)?;
    Ok(sql::Statements::new(prefix, &dialect(kind)?, true).fence)
}

pub(crate) fn dialect(kind: BackendKind) -> Result<sql::Dialect> {
    Ok(match kind {
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => <postgres::Postgres as sql::Engine>::dialect(),
        #[cfg(feature = "mysql")]
        BackendKind::MySql => <mysql::MySql as sql::Engine>::dialect(),
        #[cfg(feature = "sqlite")]
        BackendKind::Sqlite => <sqlite::Sqlite as sql::Engine>::dialect(),
        BackendKind::Memory => {
            return Err(crate::error::Error::Invalid {
                what: "backend",
                value: kind.to_string(),
                rule: "an in-memory backend has no SQL schema",
            })
        }
        #[allow(unreachable_patterns)]
        other => {
            return Err(crate::error::Error::BackendNotCompiled {
                url: String::new(),
                backend: other.feature(),
            })
        }
    })
}

/// The DDL of the lease's tables and routines with `prefix` on `kind` (the script
/// [`Backend::migrate`] runs), without connecting.
///
/// # Errors
/// [`Error::Invalid`](crate::Error::Invalid) for a bad prefix,
/// [`Error::BackendNotCompiled`](crate::Error::BackendNotCompiled).
pub(crate) fn lease_script(kind: BackendKind, prefix: &str) -> Result<String> {
    crate::validate::table_prefix(prefix)?;
    Ok(sql::Statements::new(prefix, &dialect(kind)?, true).script())
}
