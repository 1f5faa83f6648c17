//! PostgreSQL.
//!
//! The row lock and the clock are read in one statement: the lock is taken in a sub-select
//! (`FOR UPDATE`) and `clock_timestamp()` in the outer one, so the clock is read after the lock
//! was granted (never `now()`, the transaction's start). Every history event also sends
//! `pg_notify('<prefix>lease', name)`, delivered at commit, which wakes followers at once; a
//! lock's release only where some process listens (`marks.rs`).

mod engine;
mod marks;
mod one_statement;
mod renewal;

pub use engine::Postgres;

use super::sql::SqlBackend;

/// The PostgreSQL backend.
pub type PostgresBackend = SqlBackend<Postgres>;
