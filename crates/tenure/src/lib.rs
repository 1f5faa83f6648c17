//! tenure: leader election and cluster locks on the database you already run — PostgreSQL,
//! MySQL/MariaDB or SQLite — with a fencing token for every tenure.
//!
//! # Guarantees
//! In short (the exact statement, what the promises rest on and what is not promised:
//! `docs/promises.md` in the repository):
//! - **P1** Terms per name only go up, while the database keeps its commits; every
//!   [`LeaderGuard`] and [`LockGuard`] has a term of its own.
//! - **P2** Writes of an old tenure fenced with [`Tenure::fence`] (or checked by a resource
//!   that rejects lower terms) never land after a newer tenure began, with no timing assumption.
//! - **P3** One leader at a time, given a healthy database clock and no pause longer than the
//!   safety margin.
//! - **P4** Doubt means "not leader"; loss is reported by the local deadline, even when the
//!   database cannot be reached.
//! - **P5** A stale holder's renew, release or step-down never changes its successor's lease.
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
//! let guard = elector.wait_until_leader().await?; // waits until this process leads
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
//! The public surface is this page: the items below, plus [`backend`] for those who implement
//! or wrap storage, and [`validate`] for checking names and ids before using them. See
//! `docs/architecture.md` in the repository for the layers and the path of one campaign.
//! - `model`: the lease rules with no IO — `decide(now, row, op)`; the only place they live
//!   (public with the `testing` feature).
//! - [`backend`]: the storage trait and the PostgreSQL, MySQL and SQLite implementations, which
//!   run the model inside a transaction holding the row lock, with the database's clock; and
//!   the seam (`backend/tx/`, crate-private): one transaction for a layer that keeps rows of
//!   its own beside the leases, run in the one retry loop, and the kit every layer shares
//!   (tables as data, checked integers, statement cells, revision counters, change signals by
//!   topic). `layers.rs` names every layer with tables: connecting, migrating and checking a
//!   store cover them.
//! - [`Store`]: the one door to the database — the operations (campaign, release, demote,
//!   handover, pause, resume, leader, list, history), validated and bounded by a timeout.
//! - [`Timing`]: the client-side timing model and its safety check.
//! - [`Tenure`] and [`Guard`]: what every guard is (term, end, fence) and how it is given back.
//! - [`Elector`]: the campaign loop, the role watch and [`LeaderGuard`].
//! - [`Locks`]: cluster locks and semaphores, kept alive in batches.
//! - [`Schedule`]: leader-only schedules with the last completed tick in the database.
//! - `consul` (feature `consul`): Consul's sessions and KV, a layer on the seam.
//! - `etcd` (feature `etcd`): etcd's v3 keys, revisions, log, leases and lock and election
//!   recipes, a layer on the seam.
//! - [`telemetry`]: every metric tenure records (through the `metrics` facade; the
//!   application installs the exporter), recorded from the store's round trip and from the
//!   start and end of every belief.
//!
//! # Features
//! `sqlite`, `postgres`, `mysql` (all on by default) select the backends. `consul` compiles in
//! the Consul layer (and its tables), `etcd` the etcd layer (and its tables). `testing`
//! exposes the tools of tenure's own tests: the `model` module (`decide`), raw [`Store`]
//! operations, `backend::CountingBackend` and `backend::FailingBackend`.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

pub mod backend;
mod belief;
pub mod candidates;
mod changes;
mod config;
#[cfg(feature = "consul")]
pub mod consul;
mod doctests;
mod elector;
mod error;
#[cfg(feature = "etcd")]
pub mod etcd;
mod fence;
mod guard;
mod layers;
mod lock;
#[cfg(feature = "testing")]
pub mod model;
// Its items are `pub` for the `testing` build; without it they are the crate's own.
#[cfg(not(feature = "testing"))]
#[allow(unreachable_pub)]
mod model;
mod records;
mod rng;
mod schedule;
pub mod spread;
mod store;
pub mod telemetry;
pub mod validate;

pub use backend::kind::BackendKind;
pub use backend::options::StoreOptions;
pub use backend::url::RedactedUrl;
pub use changes::{ChangeKey, Changes, Topic};
pub use config::{Timing, TimingBuilder};
pub use elector::{Elector, ElectorBuilder, LeaderGuard, Role};
pub use error::{Error, Result};
pub use fence::FenceDatabase;
pub use guard::{Guard, Tenure};
pub use layers::schema_script;
pub use lock::{LockGuard, LockOptions, Locks, Semaphore};
pub use model::{DbTime, Effect, Lease, Op, Purpose, StepDownReason};
pub use records::{Applied, HistoryEntry, LeaderInfo, Snapshot};
pub use schedule::{Cadence, Schedule, Tick};
pub use spread::{Assignment, Member, ShardGuard, Spread};
pub use store::Store;

#[doc(hidden)]
pub use rng::seed_thread_rng as __seed_thread_rng;

/// The README's Rust examples compile as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
