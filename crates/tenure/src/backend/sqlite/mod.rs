//! SQLite: the embedded default, for processes on one host.
//!
//! Write transactions start with `BEGIN IMMEDIATE`, which takes SQLite's single write lock
//! before the row is read, so the read-decide-write of the model cannot interleave with another
//! writer. The journal is WAL with `synchronous=FULL`: a commit that the OS lost could let a
//! term be reused. `busy_timeout` is the store's timeout, below the renew budget. Times are
//! stored as readable UTC text (`2026-11-22 03:04:05.678`), with SQLite's millisecond clock.
//!
//! SQLite is good for several processes on one host sharing one file. It is not for a
//! network file system, where its locks cannot be trusted. Followers in other processes learn
//! of a release at once through a doorbell next to the file (`doorbell.rs`). A lock's uncontested cycle takes one
//! statement per operation (`one_statement.rs`).

mod doorbell;
mod engine;
mod one_statement;

pub use engine::Sqlite;

use super::sql::SqlBackend;

/// The SQLite backend.
pub type SqliteBackend = SqlBackend<Sqlite>;
