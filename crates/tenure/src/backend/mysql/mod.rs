//! The MySQL family (tested on MariaDB 10.11; only syntax MySQL 8 also accepts).
//!
//! `UTC_TIMESTAMP(6)` is fixed at the start of a statement, so the clock is read by a second
//! statement after `SELECT … FOR UPDATE` has been granted the row. Names compare byte for byte
//! (`utf8mb4_bin`), times are `DATETIME(6)` in UTC. Outcomes are never inferred from affected
//! rows: the row is read under its lock and the model decides.

mod engine;

pub use engine::MySql;

use super::sql::SqlBackend;
use crate::error::{Error, Result};
use sqlx::Transaction;

/// The MySQL / MariaDB backend.
pub type MySqlBackend = SqlBackend<MySql>;

impl MySqlBackend {
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
        tx: &mut Transaction<'_, sqlx::MySql>,
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
}
