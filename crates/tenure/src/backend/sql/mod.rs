//! What the three SQL backends share: one generic [`SqlBackend`] over an [`Engine`].
//!
//! # Layout
//! - `backend.rs`: [`SqlBackend`] and the [`Engine`] trait, what one database brings to it: its
//!   sqlx driver, its [`Dialect`], how its pool is opened, and the steps only some engines have
//!   (PostgreSQL's one-statement lock cycle and its notifications).
//! - `operations.rs`: the one `impl Backend for SqlBackend<E>`: the model's transaction, the
//!   keep-alive, ticks, reads and the schema check, as ordinary generic code.
//! - `dialect.rs`: how an engine spells the few things that differ.
//! - `statements.rs`: every statement, built once from the table prefix and the dialect.
//! - `rows.rs`: a lease row as read, and its checked conversion into a [`Lease`](crate::Lease).
//! - `retention.rs`: which writes also prune a name's old history.
//! - `consul.rs`: the Consul layer's statements and its transaction (`crate::consul`'s rules
//!   run over it; lock decisions are the model's, through `apply_in`).
//! - `classify.rs`: what a database error means (try again, already there, missing table).
//!
//! The engines themselves live beside this folder: `postgres/`, `mysql/`, `sqlite/`, each with
//! the public type alias users name (`PostgresBackend = SqlBackend<Postgres>`), its `fence`,
//! and an `engine.rs`.

mod backend;
mod classify;
mod consul;
mod dialect;
mod operations;
mod retention;
mod rows;
mod statements;

pub(crate) use backend::Engine;
pub use backend::SqlBackend;
pub(crate) use classify::is_retryable;
pub(crate) use dialect::Dialect;
pub(crate) use retention::acquisition_prunes;
pub(crate) use statements::{lease_columns, Statements};
