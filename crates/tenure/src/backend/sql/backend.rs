//! [`SqlBackend`], the backend of every SQL engine, and the [`Engine`] trait that says what one
//! database brings to it: its sqlx driver, its dialect, how its pool is opened, and the few steps
//! that only some engines have. The operations themselves are in `operations.rs`.

use super::dialect::Dialect;
use super::statements::Statements;
use crate::backend::fresh::Freshness;
use crate::backend::url::{split_pooler, Pooler};
use crate::backend::{Applied, BackendKind, RedactedUrl, StoreOptions};
use crate::error::Error;
use crate::error::Result;
use crate::fence::{Fence, FenceDatabase};
use crate::model::{DbTime, Op};
use std::borrow::Cow;
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
    /// Reached through a transaction-mode pooler (`?pooler=transaction`): every statement is
    /// unnamed and runs inside an explicit transaction, which pins one server.
    pub(in crate::backend) pooled: bool,
    pub(in crate::backend) engine: E,
    /// Which of the pool's connections are too old to use (see `fresh.rs`).
    pub(in crate::backend) fresh: Arc<Freshness>,
}

impl<E: Engine> SqlBackend<E> {
    /// Connects to `url`: a PostgreSQL server (and starts listening for lease changes), a
    /// MySQL/MariaDB server (`mysql://` or `mariadb://`), or an SQLite file (created if
    /// missing). Neither creates nor checks the tables.
    ///
    /// A PostgreSQL URL may end in tenure's own option `?pooler=transaction` (behind PgBouncer
    /// in transaction mode and other transaction poolers: unnamed statements, each in a
    /// transaction, per-transaction settings, no LISTEN unless
    /// [`StoreOptions::notify_url`] is set); `pooler=session` is the same as a direct
    /// connection.
    ///
    /// # Errors
    /// [`Error::BadUrl`](crate::Error::BadUrl) for a URL sqlx cannot read,
    /// [`Error::Connect`](crate::Error::Connect) if the server (or the notify URL's) cannot be
    /// reached or refuses the credentials, or the file cannot be opened.
    pub async fn connect(url: &str, options: &StoreOptions) -> Result<Self> {
        options.validate()?;
        let redacted = RedactedUrl::new(url);
        let bad_url = |reason: String| Error::BadUrl {
            url: redacted.to_string(),
            reason,
        };
        let (stripped, pooler) = split_pooler(url).map_err(bad_url)?;
        if pooler == Pooler::Transaction && E::KIND != BackendKind::Postgres {
            return Err(bad_url(format!(
                "pooler=transaction is for PostgreSQL behind PgBouncer and other transaction \
                 poolers; {} has no such option",
                E::KIND
            )));
        }
        if let (Some(notify), false) = (&options.notify_url, E::KIND == BackendKind::Postgres) {
            return Err(Error::BadUrl {
                url: RedactedUrl::new(notify).to_string(),
                reason: format!(
                    "a notify URL is for PostgreSQL's LISTEN; {} has no notifications: \
                     leave it out",
                    E::KIND
                ),
            });
        }
        let pooled = pooler == Pooler::Transaction;
        let fresh = Freshness::new();
        let (pool, engine) = E::open(&stripped, &redacted, options, &fresh, pooled).await?;
        Ok(SqlBackend {
            pool,
            stmts: Statements::new(&options.table_prefix, &E::dialect(), options.epochs),
            url: redacted,
            retention_us: options.retention_us(),
            pooled,
            engine,
            fresh,
        })
    }

    /// Begins a transaction on the store's pool as tenure begins its own: behind a
    /// transaction-mode pooler with the store's per-transaction settings (`SET LOCAL
    /// lock_timeout` and `idle_in_transaction_session_timeout`, which elsewhere are set per
    /// connection); on SQLite `BEGIN IMMEDIATE`. For the caller's own fenced writes.
    ///
    /// # Errors
    /// Database errors.
    pub async fn begin(&self) -> Result<sqlx::Transaction<'static, E::Database>> {
        Ok(self.pool.begin_with(self.engine.begin()).await?)
    }

    /// Whether the store talks through a transaction-mode pooler (`?pooler=transaction`).
    pub fn transaction_pooler(&self) -> bool {
        self.pooled
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
    /// `Tenure::fence`, for callers that know the tenure but
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
            persistent: !self.pooled,
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

    /// The statement that opens a transaction (behind a transaction-mode pooler, with the
    /// settings other engines make per connection).
    fn begin(&self) -> Cow<'static, str>;

    /// How this engine spells the SQL.
    fn dialect() -> Dialect;

    /// Connects a pool to `url` (its password hidden in `redacted`; tenure's own `pooler`
    /// option already removed), set up as `options` ask, and starts what the engine runs beside
    /// it. A server engine guards its pool with `fresh` ([`Freshness::guard`]), so that
    /// connections opened before a failover are dropped; a file has no failover. `pooled`:
    /// through a transaction-mode pooler (only PostgreSQL is opened so).
    ///
    /// # Errors
    /// [`Error::BadUrl`](crate::Error::BadUrl) for a URL sqlx cannot read,
    /// [`Error::Connect`](crate::Error::Connect) if the database cannot be reached.
    fn open(
        url: &str,
        redacted: &RedactedUrl,
        options: &StoreOptions,
        fresh: &Arc<Freshness>,
        pooled: bool,
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

    /// Renews `leases` of `holder` at `now` on `conn` (inside the keep-alive's transaction) in
    /// one statement where the engine can bind every pair at once (PostgreSQL's arrays): the
    /// rows renewed. `None` where the renewal statements of
    /// [`Statements::renew`](super::Statements::renew) must, a chunk at a time (the default).
    fn renew_all(
        _backend: &SqlBackend<Self>,
        _conn: &mut <Self::Database as sqlx::Database>::Connection,
        _holder: &str,
        _leases: &[(String, u64)],
        _now: DbTime,
    ) -> impl Future<Output = Result<Option<Vec<<Self::Database as sqlx::Database>::Row>>>> + Send
    {
        async { Ok(None) }
    }

    /// A transaction on lease `name` failed with a transient conflict (`error`; it is tried
    /// again). The MySQL engine warns here when the conflict came from another Galera node.
    fn conflict(&self, _name: &str, _error: &sqlx::Error) {}

    /// Names whose lease changed, as the database pushes them; `None` where it cannot push.
    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        None
    }

    /// The store is closing: stop what runs beside the pool before the pool closes, which
    /// waits for every connection it lent out (PostgreSQL's LISTEN task holds one of them for
    /// as long as it runs), and close the connections the engine opened itself (PostgreSQL's
    /// waiting mark, MySQL's doorbells). The default has nothing to stop.
    fn close(&self) {}

    /// `op` on lease `name` committed as `applied`. An engine whose database cannot push a
    /// change tells the other processes here (SQLite's and MySQL's doorbells); the default does
    /// nothing (PostgreSQL's NOTIFY went with the transaction).
    fn applied(&self, _name: &str, _op: &Op, _applied: &Applied) {}

    /// A transaction read the database's epoch (MySQL keeps its floor for the one-statement
    /// cycle, which checks it against the server's own epoch row).
    fn saw_epoch(&self, _epoch: crate::model::Epoch) {}

    /// A transaction that signalled `topics` (their wire form, see `Topic`) committed: an
    /// engine whose database cannot push tells the other processes here (SQLite rings its
    /// doorbell with each); the default does nothing (PostgreSQL's NOTIFY went with the
    /// transaction). MySQL tells only this store's own listeners (other processes' listeners
    /// of a layer poll).
    fn committed(&self, _topics: &[String]) {}
}
