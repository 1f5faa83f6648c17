//! PostgreSQL.
//!
//! The row lock and the clock are read in one statement: the lock is taken in a sub-select
//! (`FOR UPDATE`) and `clock_timestamp()` in the outer one, so the clock is read after the lock
//! was granted (never `now()`, the transaction's start). Every history event also sends
//! `pg_notify('<prefix>lease', name)`, delivered at commit, which wakes followers at once.

mod engine;
mod one_statement;

pub use engine::Postgres;

use super::sql::SqlBackend;
use crate::error::{Error, Result};
use sqlx::Transaction;

/// The PostgreSQL backend.
pub type PostgresBackend = SqlBackend<Postgres>;

impl PostgresBackend {
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
        tx: &mut Transaction<'_, sqlx::Postgres>,
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
}
