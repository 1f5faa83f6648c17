//! tenure: leader election and cluster locks on the database you already run — PostgreSQL,
//! MySQL/MariaDB or SQLite — with a fencing token for every tenure.
//!
//! # Guarantees
//! - **P1** Terms per name are unique and strictly increase (while the database keeps its
//!   commits). Every [`LeaderGuard`] has a term of its own.
//! - **P2** Writes fenced with [`fence`](backend::postgres::PostgresBackend::fence) (or checked
//!   by a resource that rejects lower terms) of an old tenure never land after a newer tenure
//!   began, with no timing assumption.
//! - **P3** With a healthy database clock and no pause longer than the safety margin, no two
//!   candidates believe they lead at the same time.
//! - **P4** Every ambiguity (timeout, dropped connection, late answer) resolves to "not leader";
//!   loss is reported by the local deadline even when the database is unreachable.
//! - **P5** Renew, release or step-down of a stale holder never change a successor's lease.
//! - **P6** After a holder crashes, a live candidate leads within ttl + jitter + one round trip.
//!
//! # Quick start
//! ```
//! use std::time::Duration;
//! use tenure::{Elector, Store, Timing};
//!
//! # #[tokio::main] async fn main() -> Result<(), tenure::Error> {
//! # let dir = tempfile::tempdir().unwrap();
//! # let url = format!("sqlite://{}", dir.path().join("quick.db").display());
//! // "postgres://…", "mysql://…" or "sqlite://PATH": the tables are created on first use.
//! let store = Store::connect(&url).await?;
//! let elector = Elector::builder(store.clone(), "billing-cron")
//!     .metadata("10.0.0.7:8080")
//!     .timing(Timing::from_ttl(Duration::from_secs(10))?)
//!     .spawn()?;
//!
//! let guard = elector.leader().await?; // waits until this process leads
//! println!("leading with fencing token {}", guard.term());
//! tokio::select! {
//!     _ = guard.lost() => println!("lost leadership: stop leader-only work now"),
//!     _ = tokio::time::sleep(Duration::from_millis(100)) => println!("work done"),
//! }
//! assert_eq!(store.leader("billing-cron").await?.unwrap().term, guard.term());
//! drop(guard); // the leader-only work has stopped: nothing holds the tenure any more
//! elector.shutdown().await; // releases, so a follower takes over at once
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`model`]: the lease rules with no IO — `decide(now, row, op)`; the only place they live.
//! - [`backend`]: the storage trait and the PostgreSQL, MySQL and SQLite implementations, which
//!   run the model inside a transaction holding the row lock, with the database's clock.
//! - [`Store`]: the operations (campaign, release, demote, handover, pause, resume, leader,
//!   list, history), validated and bounded by a timeout.
//! - [`Timing`]: the client-side timing model and its safety check.
//! - [`elector`]: the campaign loop, the role watch and [`LeaderGuard`].
//! - [`lock`]: cluster locks and semaphores, kept alive in batches.
//! - [`schedule`]: leader-only schedules with the last completed tick in the database.
//! - [`validate`]: names, candidate ids, table prefixes.
//!
//! # Features
//! `sqlite`, `postgres`, `mysql` (all on by default) select the backends.

pub mod backend;
mod belief;
mod config;
pub mod elector;
mod error;
pub mod lock;
pub mod model;
mod rng;
pub mod schedule;
mod store;
pub mod validate;

pub use backend::{
    Applied, Backend, BackendKind, HistoryEntry, RedactedUrl, Renewed, Snapshot, StoreOptions,
};
pub use config::{Timing, TimingBuilder};
pub use elector::{Elector, ElectorBuilder, LeaderGuard, Role};
pub use error::{Error, Result};
pub use lock::{LockGuard, LockOptions, Locks, Semaphore};
pub use model::{DbTime, Effect, Lease, Op, StepDownReason};
pub use schedule::{Cadence, Schedule, Tick};
pub use store::{ChangeKey, LeaderInfo, Store};

#[doc(hidden)]
pub use rng::seed_thread_rng as __seed_thread_rng;

/// The README's Rust examples compile as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
