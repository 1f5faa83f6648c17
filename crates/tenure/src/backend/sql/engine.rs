//! What one database engine brings to [`SqlBackend`]: its sqlx driver, its dialect, how it
//! opens a pool, and the few steps that only some engines have.

use super::backend::SqlBackend;
use super::dialect::Dialect;
use crate::backend::{Applied, BackendKind, RedactedUrl, StoreOptions};
use crate::error::Result;
use crate::model::Op;
use std::future::Future;
use tokio::sync::broadcast;

/// One database engine. A value of it is the engine's own state in a [`SqlBackend`] (PostgreSQL
/// keeps its one-statement cycle and its LISTEN task there; the others keep nothing).
///
/// The sqlx bounds that the shared code needs of [`Engine::Database`] are stated on the impls
/// in `backend.rs`, where they are used: Rust does not carry a trait's where-clauses to its users.
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
    /// and starts what the engine runs beside it.
    ///
    /// # Errors
    /// [`Error::BadUrl`](crate::Error::BadUrl) for a URL sqlx cannot read,
    /// [`Error::Connect`](crate::Error::Connect) if the database cannot be reached.
    fn open(
        url: &str,
        redacted: &RedactedUrl,
        options: &StoreOptions,
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

    /// Names whose lease changed, as the database pushes them; `None` where it cannot push.
    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        None
    }
}
