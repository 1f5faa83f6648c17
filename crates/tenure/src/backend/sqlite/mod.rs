//! SQLite: the embedded default, for processes on one host.
//!
//! Write transactions start with `BEGIN IMMEDIATE`, which takes SQLite's single write lock
//! before the row is read, so the read-decide-write of the model cannot interleave with another
//! writer. The journal is WAL with `synchronous=FULL`: a commit that the OS lost could let a
//! term be reused. `busy_timeout` is the store's timeout, below the renew budget. Times are
//! stored as readable UTC text (`2026-11-22 03:04:05.678`), with SQLite's millisecond clock.
//!
//! SQLite is good for several processes on one host sharing one file. It is not for a
//! network file system, where its locks cannot be trusted.

mod engine;

pub use engine::Sqlite;

use super::sql::SqlBackend;
use crate::error::{Error, Result};
use sqlx::Transaction;

/// The SQLite backend.
pub type SqliteBackend = SqlBackend<Sqlite>;

impl SqliteBackend {
    /// Checks, inside the caller's transaction `tx`, that `candidate` still holds `term` of
    /// `name`, and holds SQLite's write lock from then until `tx` ends, so that no takeover can
    /// commit before the caller's writes do.
    ///
    /// The check is itself a write (`UPDATE … SET term = term`), so it takes the write lock at
    /// once; if another writer committed since `tx` began reading, SQLite refuses the upgrade
    /// (`SQLITE_BUSY_SNAPSHOT` in WAL mode) and the caller's transaction fails. Either way a
    /// stale holder's writes cannot land after a newer tenure began.
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the lease is not (or no longer) held with that term; database
    /// errors. In both cases roll `tx` back.
    pub async fn fence(
        &self,
        tx: &mut Transaction<'_, sqlx::Sqlite>,
        name: &str,
        candidate: &str,
        term: u64,
    ) -> Result<()> {
        let sql = format!(
            "UPDATE {} SET term = term WHERE name = ? AND holder = ? AND term = ? \
             AND expires_at > strftime('%Y-%m-%d %H:%M:%f', 'now')",
            self.stmts.lease_table
        );
        let done = sqlx::query(&sql)
            .bind(name)
            .bind(candidate)
            .bind(term as i64)
            .execute(&mut **tx)
            .await?;
        if done.rows_affected() == 1 {
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
