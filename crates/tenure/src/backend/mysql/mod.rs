//! The MySQL family (tested on MariaDB 10.11; only syntax MySQL 8 also accepts).
//!
//! `UTC_TIMESTAMP(6)` is fixed at the start of a statement, so the clock is read by a second
//! statement after `SELECT … FOR UPDATE` has been granted the row. Names compare byte for byte
//! (`utf8mb4_bin`), times are `DATETIME(6)` in UTC. Outcomes are never inferred from affected
//! rows: the row is read under its lock and the model decides — except in the two stored
//! procedures of a lock's uncontested cycle (`one_statement.rs`: one round trip, not five),
//! which write only where the model writes the same row. Followers learn of a release at once
//! through a doorbell of named locks (`GET_LOCK`, `bell.rs`).

mod bell;
mod engine;
mod galera;
mod one_statement;

pub use engine::MySql;

use super::sql::SqlBackend;

/// The MySQL / MariaDB backend.
pub type MySqlBackend = SqlBackend<MySql>;
