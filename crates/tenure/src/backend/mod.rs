//! The storage trait and its three implementations.
//!
//! A backend does one thing per operation: in a transaction that holds the lease row's lock
//! (`SELECT … FOR UPDATE`; SQLite: `BEGIN IMMEDIATE`), it reads the row and the database's
//! clock *after* taking the lock, runs [`model::decide`](crate::model::decide), writes the row
//! and the history event it returns, and commits. The rules therefore exist once, and every
//! backend's SQL is only storage: rows in, rows out, times as database timestamps.

use crate::error::Result;
use crate::model::{DbTime, Effect, Lease, Op};
use async_trait::async_trait;
use std::fmt;
use tokio::sync::broadcast;

#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
pub mod sqlite;

mod counting;
mod options;
mod sql;
mod url;

pub use counting::{CountingBackend, Counts};
pub use options::StoreOptions;
pub use sql::SqlBackend;
pub use url::RedactedUrl;

/// Which database engine a backend talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    Postgres,
    MySql,
    Sqlite,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Postgres => "postgres",
            BackendKind::MySql => "mysql",
            BackendKind::Sqlite => "sqlite",
        })
    }
}

/// What an operation did, with the row as the database now sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The database instant at which the operation was decided.
    pub now: DbTime,
    /// The row after the operation; `None` if the name has never been used.
    pub lease: Option<Lease>,
    /// What happened.
    pub effect: Effect,
}

/// The outcome of [`Backend::renew_many`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Renewed {
    /// The database instant of the renewal.
    pub now: DbTime,
    /// The rows that were renewed. Leases asked for but missing here were not: no longer held
    /// with that term, expired, paused or handed over.
    pub leases: Vec<Lease>,
}

/// One or all rows, read together with the database's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The database instant of the read.
    pub now: DbTime,
    /// The rows, ordered by name.
    pub leases: Vec<Lease>,
}

/// One row of `tenure_history`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    /// Increasing with insertion order.
    pub id: i64,
    pub name: String,
    pub term: u64,
    pub holder: Option<String>,
    /// `acquired`, `released`, `taken_over_expired`, `demoted`, `handed_over`, `forced`,
    /// `paused` or `resumed`.
    pub event: String,
    /// Database time of the transition.
    pub at: DbTime,
    /// Who caused it: a candidate id, or the actor named by an admin call.
    pub actor: String,
    pub detail: String,
}

/// Storage for leases: implemented for PostgreSQL, the MySQL family and SQLite.
///
/// Callers normally use [`Store`](crate::Store), which validates input and bounds every call
/// with a timeout.
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
    /// statements per 5,000 leases (the keep-alive of many held locks).
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

    /// Names whose lease was released, demoted, handed over, resumed or acquired, as the
    /// database pushes them (PostgreSQL LISTEN/NOTIFY). `None` where the engine cannot push.
    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        None
    }
}

/// Opens (and closes) one connection, so that a refused connection or bad credentials are
/// reported as such — a pool would only say that it timed out.
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

/// Completes when a notification from [`Backend::subscribe`] matches (or when some were lost,
/// so that the caller looks again); never, where the backend cannot push.
pub(crate) async fn wait_for_change(
    notifications: &mut Option<broadcast::Receiver<String>>,
    matches: impl Fn(&str) -> bool,
) {
    let Some(rx) = notifications else {
        return std::future::pending().await;
    };
    loop {
        match rx.recv().await {
            Ok(name) if matches(&name) => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            Err(broadcast::error::RecvError::Closed) => return std::future::pending().await,
        }
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

impl BackendKind {
    /// The backend a URL names by its scheme.
    ///
    /// # Errors
    /// [`Error::BadUrl`](crate::Error::BadUrl) for any other scheme.
    pub fn from_url(url: &str) -> Result<BackendKind> {
        let scheme = url
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        match scheme.as_str() {
            "postgres" | "postgresql" => Ok(BackendKind::Postgres),
            "mysql" | "mariadb" => Ok(BackendKind::MySql),
            "sqlite" => Ok(BackendKind::Sqlite),
            _ => Err(crate::error::Error::BadUrl {
                url: RedactedUrl::new(url).to_string(),
                reason: "the scheme must be postgres://, mysql://, mariadb:// or sqlite://"
                    .to_string(),
            }),
        }
    }

    /// The backend a URL names, after checking what can be checked without connecting: the
    /// scheme, and that an SQLite URL names a file (with an empty path SQLite opens a private
    /// temporary database per connection, so nothing would be shared or kept).
    ///
    /// # Errors
    /// [`Error::BadUrl`](crate::Error::BadUrl), saying what is wrong.
    pub fn check_url(url: &str) -> Result<BackendKind> {
        let kind = BackendKind::from_url(url)?;
        if kind == BackendKind::Sqlite {
            // `from_url` matched the scheme case-insensitively: the first 7 bytes are ASCII.
            let rest = &url["sqlite:".len()..];
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            if rest.split('?').next().unwrap_or_default().is_empty() {
                return Err(crate::error::Error::BadUrl {
                    url: RedactedUrl::new(url).to_string(),
                    reason: "the path of the SQLite file is missing (e.g. \
                             sqlite:///var/lib/tenure/tenure.db or sqlite:tenure.db)"
                        .to_string(),
                });
            }
        }
        Ok(kind)
    }

    /// The cargo feature that compiles this backend in.
    pub fn feature(self) -> &'static str {
        match self {
            BackendKind::Postgres => "postgres",
            BackendKind::MySql => "mysql",
            BackendKind::Sqlite => "sqlite",
        }
    }
}

/// The DDL that creates tenure's tables with `prefix` on `kind`, for a DBA to apply by hand
/// (the same script [`Backend::migrate`] runs), without connecting.
///
/// # Errors
/// [`Error::Invalid`](crate::Error::Invalid) for a bad prefix,
/// [`Error::BackendNotCompiled`](crate::Error::BackendNotCompiled).
pub fn schema_script(kind: BackendKind, prefix: &str) -> Result<String> {
    crate::validate::table_prefix(prefix)?;
    let dialect = match kind {
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => <postgres::Postgres as sql::Engine>::dialect(),
        #[cfg(feature = "mysql")]
        BackendKind::MySql => <mysql::MySql as sql::Engine>::dialect(),
        #[cfg(feature = "sqlite")]
        BackendKind::Sqlite => <sqlite::Sqlite as sql::Engine>::dialect(),
        #[allow(unreachable_patterns)]
        other => {
            return Err(crate::error::Error::BackendNotCompiled {
                url: String::new(),
                backend: other.feature(),
            })
        }
    };
    Ok(sql::Statements::new(prefix, &dialect).script())
}
