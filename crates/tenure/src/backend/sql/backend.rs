//! [`SqlBackend`], the backend of every SQL engine, and the [`Engine`] trait that says what one
//! database brings to it: its sqlx driver, its dialect, how its pool is opened, and the few steps
//! that only some engines have. The operations themselves are in `operations.rs`.

use super::dialect::Dialect;
use super::statements::Statements;
use crate::backend::fresh::Freshness;
use crate::backend::{Applied, BackendKind, RedactedUrl, StoreOptions};
use crate::error::Result;
use crate::fence::{Fence, FenceDatabase};
use crate::model::Op;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use tokio::sync::broadcast;

/// The backend of every SQL engine, as sqlx's `Pool<DB>` is the pool of every driver: users name
/// it by its aliases [`PostgresBackend`](crate::backend::postgres::PostgresBackend),
/// [`MySqlBackend`](crate::backend::mysql::MySqlBackend) and
/// [`SqliteBackend`](crate::backend::sqlite::SqliteBackend). The engines are the only
/// implementations of the (sealed) `Engine` trait.
pub struct SqlBackend<E: Engine> {
    pub(in crate::backend) pool: sqlx::Pool<E::Database>,
    pub(in crate::backend) stmts: Statements,
    pub(in crate::backend) url: RedactedUrl,
    /// How long history is kept, in microseconds; `None` keeps it all.
    pub(in crate::backend) retention_us: Option<i64>,
    pub(in crate::backend) engine: E,
    /// Which of the pool's connections are too old to use (see `fresh.rs`).
    pub(in crate::backend) fresh: Arc<Freshness>,
}

impl<E: Engine> SqlBackend<E> {
    /// Connects to `url`: a PostgreSQL server (and starts listening for lease changes), a
    /// MySQL/MariaDB server (`mysql://` or `mariadb://`), or an SQLite file (created if
    /// missing). Neither creates nor checks the tables.
    ///
    /// # Errors
    /// [`Error::BadUrl`](crate::Error::BadUrl) for a URL sqlx cannot read,
    /// [`Error::Connect`](crate::Error::Connect) if the server cannot be
    /// reached or refuses the credentials, or the file cannot be opened.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        options.validate()?;
        let redacted = RedactedUrl::new(url);
        let fresh = Freshness::new();
        let (pool, engine) = E::open(url, &redacted, options, &fresh).await?;
        Ok(SqlBackend {
            pool,
            stmts: Statements::new(&options.table_prefix, &E::dialect()),
            url: redacted,
            retention_us: options.retention_us(),
            engine,
            fresh,
        })
    }

    /// The connection pool, for the caller's own transactions (e.g. with the backend's
    /// `fence`).
    pub fn pool(&self) -> &sqlx::Pool<E::Database> {
        &self.pool
    }
}

impl<E: Engine> SqlBackend<E>
where
    E::Database: FenceDatabase,
    for<'c> &'c mut <E::Database as sqlx::Database>::Connection:
        sqlx::Executor<'c, Database = E::Database>,
{
    /// Checks, inside the caller's transaction `tx`, that `candidate` still holds `term` of
    /// `name` and has not expired, and keeps a takeover waiting until `tx` ends, so that writes
    /// made in it can never land after another tenure began. The same statement as
    /// [`LeaderGuard::fence`](crate::LeaderGuard::fence), for callers that know the tenure but
    /// hold no guard. Keep such transactions short: the holder's own renewal waits for them.
    ///
    /// # Errors
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) if the lease is not (or no longer) held
    /// with that term; database errors. In both cases roll `tx` back.
    pub async fn fence(
        &self,
        tx: &mut sqlx::Transaction<'_, E::Database>,
        name: &str,
        candidate: &str,
        term: u64,
    ) -> Result<()> {
        let fence = Fence {
            kind: E::KIND,
            sql: self.stmts.fence.as_str().into(),
        };
        Fence::check(Some(&fence), &mut **tx, name, candidate, term).await
    }
}

impl<E: Engine> fmt::Debug for SqlBackend<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(E::NAME)
            .field("url", &self.url)
            .field("lease_table", &self.stmts.lease_table)
            .finish_non_exhaustive()
    }
}

// === the Engine trait ===

/// One database engine. A value of it is the engine's own state in a [`SqlBackend`] (PostgreSQL
/// keeps its one-statement cycle and its LISTEN task there; the others keep nothing).
///
/// The sqlx bounds that the shared code needs of [`Engine::Database`] are stated on the impls
/// in `operations.rs`, where they are used: Rust does not carry a trait's where-clauses to its users.
pub trait Engine: Sized + Send + Sync + 'static {
    /// The sqlx driver.
    type Database: sqlx::Database;

    /// Which engine this is, as [`Backend::kind`](crate::Backend::kind) reports it.
    const KIND: BackendKind;

    /// The name users know the backend by (`PostgresBackend`), for `Debug`.
    const NAME: &'static str;

    /// The statement that opens a write transaction.
    const BEGIN: &'static str;

    /// How this engine spells the SQL.
    fn dialect() -> Dialect;

    /// Connects a pool to `url` (its password hidden in `redacted`), set up as `options` ask,
    /// and starts what the engine runs beside it. A server engine guards its pool with
    /// `fresh` ([`Freshness::guard`]), so that connections opened before a failover are
    /// dropped; a file has no failover.
    ///
    /// # Errors
    /// [`Error::BadUrl`](crate::Error::BadUrl) for a URL sqlx cannot read,
    /// [`Error::Connect`](crate::Error::Connect) if the database cannot be reached.
    fn open(
        url: &str,
        redacted: &RedactedUrl,
        options: &StoreOptions,
        fresh: &Arc<Freshness>,
    ) -> impl Future<Output = Result<(sqlx::Pool<Self::Database>, Self)>> + Send;

    /// Decides `op` in one autocommitted statement where the engine can; `None` where the
    /// model's transaction must decide it (the default: always).
    fn one_statement(
        _backend: &SqlBackend<Self>,
        _name: &str,
        _op: &Op,
        _actor: &str,
    ) -> impl Future<Output = Result<Option<Applied>>> + Send {
        async { Ok(None) }
    }

    /// A transaction on lease `name` failed with a transient conflict (`error`; it is tried
    /// again). The MySQL engine warns here when the conflict came from another Galera node.
    fn conflict(&self, _name: &str, _error: &sqlx::Error) {}

    /// Names whose lease changed, as the database pushes them; `None` where it cannot push.
    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        None
    }
}
