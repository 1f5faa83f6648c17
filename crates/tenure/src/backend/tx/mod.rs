//! The seam: one transaction on the store's database, for a feature that reads and writes rows
//! of its own beside the leases — in one transaction, under the database's clock, with every
//! lease change decided by the model under the lease row's lock.
//!
//! A feature is a [`Body`]: [`Backend::transaction`](super::Backend::transaction) begins a
//! transaction, runs the body over a [`Tx`], commits (or rolls back, as the body says), and
//! runs the body again after a transient conflict (a deadlock, a serialization failure, a
//! unique violation between two creators of one row) — the one retry loop, implemented once,
//! by the generic SQL backend. A feature keeps its own statements (built from
//! [`Tx::dialect`] and [`Tx::prefix`]), its own tables and its own error type; nothing here
//! knows any feature.
//!
//! What a transaction offers, and what it promises:
//! - [`Tx::now`]: the database's clock, read once per transaction (after the body's first
//!   statement, so after the first lock it takes); on a server that refuses writes a writing
//!   body fails with [`Error::ReadOnly`](crate::Error::ReadOnly) here.
//! - [`Tx::lease`]: an operation on a lease, decided by the model (`model::decide`: the only
//!   place a term is minted) under the lease row's lock, at the transaction's instant, with
//!   its history event. Deciding at that earlier instant, rather than after the row lock was
//!   granted, only errs towards "still held".
//! - [`Tx::leases`]: many lease operations, each decided as [`Tx::lease`] would (no standing),
//!   in a fixed number of statements: the rows locked in name order in one statement, the
//!   decisions that write only the row (a renewal) in one more, per thousand leases.
//! - [`Tx::notify`]: wakes the listeners of a [`Topic`] (a lease, or a layer's own rows) at
//!   commit, where the engine can push.
//! - [`Tx::execute`] / [`Tx::fetch`]: the feature's own statements, with [`Arg`]s in, rows out.
//!
//! # The kit
//! What every layer needs, written once here rather than again in each layer:
//! - [`ddl`]: its tables as data ([`Schema`], [`Table`], [`Column`]), rendered for each
//!   engine, created where missing and grown by the columns a newer build added;
//! - [`int`]: checked conversions between its unsigned counters and the `BIGINT`s that store
//!   them;
//! - [`cell::Statements`]: its statement bundle, built once per store from the dialect;
//! - [`counter::Counter`]: a revision counter that serializes its writers and hands out
//!   gapless values in commit order;
//! - [`Topic`]: change signals by topic, so that a layer's watchers wake for its own rows.

// A build whose features use only part of the seam leaves the rest unused. Its items are `pub`
// (in a crate-private module) only so that a test wrapper of a backend (feature `testing`:
// `backend::TransactionBody`) can pass a body on; they are not part of the API.
#![allow(dead_code, unreachable_pub)]

pub mod cell;
pub mod counter;
pub mod ddl;
pub mod int;
mod topic;

use crate::error::Result;
use crate::model::{DbTime, Epoch, Lease, Op, Standing};
use crate::records::Applied;
use async_trait::async_trait;

pub use super::kind::BackendKind;
pub(crate) use super::sql::Dialect;
// (A build without the layers that use a part of the kit leaves it unused.)
#[allow(unused_imports)]
pub use ddl::{Column, Index, Kind, Schema, Table};
pub use topic::Topic;
pub(crate) use topic::ANY;

/// A parameter of a feature's statement.
#[derive(Clone, Copy, Debug)]
pub enum Arg<'a> {
    Int(i64),
    OptInt(Option<i64>),
    Text(&'a str),
    OptText(Option<&'a str>),
    Bytes(&'a [u8]),
    Bool(bool),
}

/// A row a feature's query returned: its columns by name, each read as one type.
pub trait Row: Send + Sync {
    fn int(&self, column: &str) -> Result<i64>;
    fn opt_int(&self, column: &str) -> Result<Option<i64>>;
    fn text(&self, column: &str) -> Result<String>;
    fn opt_text(&self, column: &str) -> Result<Option<String>>;
    fn bytes(&self, column: &str) -> Result<Vec<u8>>;
    fn boolean(&self, column: &str) -> Result<bool>;
}

/// One transaction, as a [`Body`] sees it.
#[async_trait]
pub trait Tx: Send {
    /// Which engine it is (a feature's DDL differs per engine).
    fn kind(&self) -> BackendKind;
    /// How the database spells its SQL.
    fn dialect(&self) -> &Dialect;
    /// The store's table prefix (validated: identifier characters only).
    fn prefix(&self) -> &str;
    /// The database's clock, read once per transaction.
    async fn now(&mut self) -> Result<DbTime>;
    /// The epoch the transaction writes in, read with [`Tx::now`]'s clock (a body that does
    /// not write, or a store with epochs off: [`Epoch::ZERO`]). A layer's counter starts a new
    /// epoch at its floor ([`Counter::next_in_epoch`]), as terms do.
    async fn epoch(&mut self) -> Result<Epoch>;
    /// `op` on the lease `name`, decided by the model under the row's lock at [`Tx::now`] —
    /// among the candidates of the name where a campaign has a `standing` — written with its
    /// history event (`actor`) and announcement.
    async fn lease(
        &mut self,
        name: &str,
        op: &Op,
        actor: &str,
        standing: Option<&Standing<'_>>,
    ) -> Result<Applied>;
    /// `ops` on their leases (each name once), each decided by the model at [`Tx::now`] as
    /// [`lease`](Tx::lease) would decide it without a standing, under the rows' locks (taken
    /// in name order, in one statement per chunk), written with their history events
    /// (`actor`) and announcements; the answers in the order of `ops`.
    async fn leases(&mut self, ops: &[(&str, Op)], actor: &str) -> Result<Vec<Applied>>;
    /// The row of the lease `name` as the transaction sees it (no lock), if there is one.
    async fn read_lease(&mut self, name: &str) -> Result<Option<Lease>>;
    /// Wakes the listeners of `topic` at commit, where the engine pushes (PostgreSQL's
    /// NOTIFY, SQLite's doorbell; MySQL's listeners poll).
    async fn notify(&mut self, topic: Topic<'_>) -> Result<()>;
    /// What [`notify`](Tx::notify) does once the body's own statement has sent the signal
    /// ([`Dialect::notify_call`]): `topic` is signalled at commit (to this process's listeners
    /// too, and through the engines that push after the commit); no statement.
    fn notified(&mut self, topic: Topic<'_>);
    /// Runs a statement. (Never infer an outcome from affected-row counts: their meaning
    /// differs between engines and connection flags; read the rows back.)
    async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<()>;
    /// Runs a query; its rows.
    async fn fetch(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Box<dyn Row>>>;
    /// Runs a query of a writing body that locks a row and reads the clock's columns after
    /// the lock ([`Dialect::clocked_bump`]); its rows. The first row's clock and epoch become
    /// the transaction's, as [`Tx::now`] would have read them after the lock: one round trip,
    /// not two. (No row: the clock is read by the next [`Tx::now`].)
    async fn fetch_clocked(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Box<dyn Row>>>;
}

/// How a body's transaction ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Commit,
    /// Nothing the body wrote is kept (it refused the request; the answer is in the body).
    Rollback,
}

/// A feature's work in one transaction. It keeps its own answer: the transaction may run it
/// more than once (after a transient conflict), so [`run`](Body::run) starts afresh each time.
#[async_trait]
pub trait Body: Send {
    /// Whether it may write: a writer's transaction begins as the engine begins writes
    /// (SQLite: `BEGIN IMMEDIATE`) and its clock read checks that the server takes writes.
    fn writes(&self) -> bool;
    /// The work, over the transaction; how it ends.
    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome>;
    /// What the work is, for the `op` label of the store's round trip (`telemetry.rs`).
    fn op(&self) -> &'static str {
        "transaction"
    }
    /// The database's clock as the work read it, once it ran: the store records its offset
    /// from the local wall clock.
    fn db_now(&self) -> Option<DbTime> {
        None
    }
    /// The tables of the layer the work belongs to, if any: a statement that finds one of them
    /// missing is answered with [`Error::SchemaMissing`](crate::Error::SchemaMissing) naming
    /// it (a store wrapped by hand and never migrated), not a database error at every call.
    fn schema(&self) -> Option<&'static Schema> {
        None
    }
    /// The one lease name the work is about, if one: an attribute of the call's span.
    fn name(&self) -> Option<&str> {
        None
    }
    /// The lease's term as the work left it, once it ran, if it touched one lease: an
    /// attribute of the call's span.
    fn term(&self) -> Option<u64> {
        None
    }
}
