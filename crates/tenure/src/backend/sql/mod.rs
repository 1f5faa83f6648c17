//! What the three SQL backends share: one generic [`SqlBackend`] over an [`Engine`].
//!
//! # Layout
//! - `backend.rs`: [`SqlBackend`] and the [`Engine`] trait, what one database brings to it: its
//!   sqlx driver, its [`Dialect`], how its pool is opened, and the steps only some engines have
//!   (PostgreSQL's one-statement lock cycle and its notifications).
//! - `operations.rs`: the one `impl Backend for SqlBackend<E>`: a lease operation (the model's
//!   transaction), the keep-alive, ticks and reads, as ordinary generic code.
//! - `decided.rs`: writing what the model decided — one lease's row, event and announcement,
//!   and a batch of lease operations in a fixed number of statements (`Tx::leases`).
//! - `schema.rs`: creating and checking the tables (and the engine's stored routines).
//! - `transaction.rs`: the seam's one implementation (`Tx` over a transaction of the pool,
//!   see `backend/tx.rs`) and the one retry loop every transaction runs in.
//! - `dialect.rs`: how an engine spells the few things that differ.
//! - `statements.rs`: every statement, built once from the table prefix and the dialect.
//! - `rows.rs`: a lease row as read, and its checked conversion into a [`Lease`](crate::Lease).
//! - `retention.rs`: which writes also prune a name's old history.
//!
//! The engines themselves live beside this folder: `postgres/`, `mysql/`, `sqlite/`, each with
//! the public type alias users name (`PostgresBackend = SqlBackend<Postgres>`), its `fence`,
//! and an `engine.rs`.

mod backend;
mod decided;
mod dialect;
mod operations;
mod retention;
mod rows;
mod schema;
mod statements;
mod transaction;

pub(crate) use crate::backend::tx::int::bigint;
pub(crate) use backend::Engine;
pub use backend::SqlBackend;
pub(crate) use dialect::{Dialect, EpochSql, Upsert};
#[cfg(feature = "postgres")]
pub(crate) use retention::acquisition_prunes;
pub(crate) use statements::{lease_columns, Statements};
