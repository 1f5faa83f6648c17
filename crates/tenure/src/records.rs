//! What the store answers: an operation's outcome, rows read with the database's clock, and
//! history entries.

use crate::model::{DbTime, Effect, Lease};

/// What an operation did, with the row as the database now sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The database instant at which the operation was decided.
    pub now: DbTime,
    /// The row after the operation; `None` if the name has never been used.
    pub lease: Option<Lease>,
    /// What happened.
    pub effect: Effect,
}

/// One or all rows, read together with the database's clock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    /// The database instant of the read.
    pub now: DbTime,
    /// The rows, ordered by name.
    pub leases: Vec<Lease>,
}

/// One row of `tenure_history`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryEntry {
    /// Increasing with insertion order.
    pub id: i64,
    /// The lease's name.
    pub name: String,
    /// The term the transition happened to.
    pub term: u64,
    /// The holder after the transition, if any.
    pub holder: Option<String>,
    /// `acquired`, `released`, `taken_over_expired`, `demoted`, `handed_over`, `forced`,
    /// `paused` or `resumed`.
    pub event: String,
    /// Database time of the transition.
    pub at: DbTime,
    /// Who caused it: a candidate id, or the actor named by an admin call.
    pub actor: String,
    /// Free text: a release's reason, a handover's target.
    pub detail: String,
}
