//! Fenced writes in the caller's own transaction (P2): one statement per dialect, run by
//! [`LeaderGuard::fence`](crate::LeaderGuard::fence), [`LockGuard::fence`](crate::LockGuard::fence),
//! the schedule's tick completion, and by programs in any language through `tenure fence-sql`
//! and `TENURE_FENCE_SQL`.
//!
//! The statement takes three parameters in order — name, holder, term — and returns one row
//! while that holder still holds that term and the lease has not expired, with the lease row
//! locked against a takeover until the transaction ends (PostgreSQL and MySQL: a share lock;
//! SQLite: the database's write lock). No row means the tenure is over: roll back.

use crate::backend::BackendKind;
use crate::error::{Error, Result};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// A database whose transactions tenure can fence: [`sqlx::Postgres`], [`sqlx::MySql`] and
/// [`sqlx::Sqlite`] (as the features compile them in). Sealed.
pub trait FenceDatabase: sqlx::Database + sealed::Sealed {
    /// The engine, checked against the guard's store.
    const KIND: BackendKind;

    /// Runs the fence statement `sql` on `executor` (`persistent`: as a named, cached
    /// statement; not behind a transaction pooler); whether it returned a row.
    #[doc(hidden)]
    fn fence_row<'e, 'c: 'e, X>(
        executor: X,
        sql: &'e str,
        persistent: bool,
        name: &'e str,
        holder: &'e str,
        term: i64,
    ) -> Pin<Box<dyn Future<Output = sqlx::Result<bool>> + Send + 'e>>
    where
        X: sqlx::Executor<'c, Database = Self> + 'e;
}

mod sealed {
    pub trait Sealed {}
}

macro_rules! fence_database {
    ($feature:literal, $db:ty, $kind:expr) => {
        #[cfg(feature = $feature)]
        impl sealed::Sealed for $db {}

        #[cfg(feature = $feature)]
        impl FenceDatabase for $db {
            const KIND: BackendKind = $kind;

            fn fence_row<'e, 'c: 'e, X>(
                executor: X,
                sql: &'e str,
                persistent: bool,
                name: &'e str,
                holder: &'e str,
                term: i64,
            ) -> Pin<Box<dyn Future<Output = sqlx::Result<bool>> + Send + 'e>>
            where
                X: sqlx::Executor<'c, Database = Self> + 'e,
            {
                Box::pin(async move {
                    let row = sqlx::query(sql)
                        .persistent(persistent)
                        .bind(name)
                        .bind(holder)
                        .bind(term)
                        .fetch_optional(executor)
                        .await?;
                    Ok(row.is_some())
                })
            }
        }
    };
}

fence_database!("postgres", sqlx::Postgres, BackendKind::Postgres);
fence_database!("mysql", sqlx::MySql, BackendKind::MySql);
fence_database!("sqlite", sqlx::Sqlite, BackendKind::Sqlite);

/// The fence of one store: its engine and its statement (with the store's table prefix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Fence {
    pub kind: BackendKind,
    pub sql: Arc<str>,
    /// Whether the statement may be named (prepared and cached); not behind a transaction
    /// pooler, where the caller's transaction is on a server other clients share too.
    pub persistent: bool,
}

impl Fence {
    /// Checks in `executor`'s transaction that `holder` still holds `term` of `name`, and
    /// keeps a takeover waiting until that transaction ends.
    pub(crate) async fn check<'c, X>(
        fence: Option<&Fence>,
        executor: X,
        name: &str,
        holder: &str,
        term: u64,
    ) -> Result<()>
    where
        X: sqlx::Executor<'c> + 'c,
        X::Database: FenceDatabase,
    {
        let Some(fence) = fence else {
            return Err(Error::CannotFence {
                reason:
                    "its store has no SQL lease table (a test or wrapper backend): fence with a \
                         guard of a store connected to the database itself"
                        .into(),
            });
        };
        let kind = <X::Database as FenceDatabase>::KIND;
        if kind != fence.kind {
            return Err(Error::CannotFence {
                reason: format!(
                    "the guard's lease is in a {} database, the transaction is on {kind}: \
                     fence in a transaction on the database that holds the lease",
                    fence.kind
                ),
            });
        }
        let term_i64 = i64::try_from(term).map_err(|_| Error::Invalid {
            what: "term",
            value: term.to_string(),
            rule: "must fit a signed 64-bit integer",
        })?;
        let held = <X::Database as FenceDatabase>::fence_row(
            executor,
            &fence.sql,
            fence.persistent,
            name,
            holder,
            term_i64,
        )
        .await?;
        if held {
            Ok(())
        } else {
            Err(Error::LeaseLost {
                name: name.to_string(),
                candidate: holder.to_string(),
                term,
            })
        }
    }
}
