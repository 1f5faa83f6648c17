//! Fencing an etcd lock from the application's own transaction: an etcd lock's token is its
//! key's create revision (etcd's `IsOwner`), and this statement proves, inside the caller's
//! transaction on the same database, that the key still exists as it was then — and keeps it
//! so until that transaction ends: an unlock, a revoke or an expiry (each a delete of the key)
//! waits for the caller's commit, so writes fenced by it can never land after the next holder
//! began. The same contract as tenure's own fence (`tenure fence-sql`), for etcd locks.
//!
//! The statement asks that the key was created at or before the revision it is given, not at
//! it: a lock key is deleted when its lock ends and created anew (at a later revision) when
//! taken again, so any revision at which the lock was held names that one tenure — the key's
//! create revision (`Mutex.IsOwner`'s) as well as `ETCD_LOCK_REV`, the revision of the lock's
//! answer that `etcdctl lock` gives its command, which is later than the create revision when
//! the lock was waited for.

use super::call::{Call, Reply};
use super::error::{Error, Result};
use super::statements::Statements;
use super::Etcd;
use crate::backend::BackendKind;

/// The fence statement for etcd locks on `kind` with table prefix `prefix` (what `tenure
/// fence-sql --etcd` prints), without connecting. Parameters, in order: the lock's key (bytes,
/// e.g. `LockResponse.key`, `Mutex.Key()`, `$ETCD_LOCK_KEY`) and a revision at which the lock
/// was held (an integer: the key's create revision, or the lock answer's header revision,
/// `$ETCD_LOCK_REV`). One row: the lock is still that one, and held against any delete until
/// the transaction ends. No row: it is gone, roll back.
///
/// PostgreSQL and MySQL/MariaDB lock the key's row in share mode (MySQL also refuses a
/// read-only server, as tenure's own fence); SQLite takes the database's write lock with a
/// no-op update.
///
/// # Errors
/// [`crate::Error::Invalid`] for a bad prefix or an engine without SQL,
/// [`crate::Error::BackendNotCompiled`].
pub fn fence_sql(kind: BackendKind, prefix: &str) -> crate::Result<String> {
    crate::validate::table_prefix(prefix)?;
    let dialect = crate::backend::dialect(kind)?;
    Ok(Statements::new(prefix, &dialect, kind).fence)
}

impl Etcd {
    /// The fence statement of this store's database and table prefix (see [`fence_sql`]).
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn fence_sql(&self) -> Result<String> {
        match self.call(Call::Fence).await? {
            Reply::Fence(sql) => Ok(sql),
            _ => Err(Error::Store(crate::Error::Unsupported(
                "an etcd call answered another call's reply",
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_statement_per_engine() {
        #[cfg(feature = "postgres")]
        {
            let pg = fence_sql(BackendKind::Postgres, "tenure_").unwrap();
            assert_eq!(
                pg,
                "SELECT create_revision FROM tenure_etcd_kv WHERE kv_key = $1 AND \
                 create_revision <= $2 FOR SHARE"
            );
        }
        #[cfg(feature = "mysql")]
        {
            let my = fence_sql(BackendKind::MySql, "app_").unwrap();
            assert!(my.starts_with("SELECT create_revision FROM app_etcd_kv WHERE kv_key = ?"));
            assert!(my.contains("@@global.read_only") && my.ends_with("LOCK IN SHARE MODE"));
        }
        #[cfg(feature = "sqlite")]
        {
            let lite = fence_sql(BackendKind::Sqlite, "tenure_").unwrap();
            assert!(lite.starts_with("UPDATE tenure_etcd_kv SET create_revision = create_revision"));
            assert!(lite.ends_with("RETURNING create_revision"));
        }
        assert!(fence_sql(BackendKind::Sqlite, "bad prefix").is_err());
    }
}
