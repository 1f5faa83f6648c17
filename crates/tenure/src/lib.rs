//! tenure: leader election and cluster locks on the database you already run.
pub mod backend;
mod config;
pub mod elector;
mod error;
pub mod model;
mod store;
pub mod validate;

pub use backend::{
    Applied, Backend, BackendKind, HistoryEntry, RedactedUrl, Snapshot, StoreOptions,
};
pub use config::{Timing, TimingBuilder};
pub use elector::{Elector, ElectorBuilder, LeaderGuard, Role};
pub use error::{Error, Result};
pub use model::{DbTime, Effect, Lease, Op, StepDownReason};
pub use store::{LeaderInfo, Store};
