//! What the store answers: an operation's outcome, rows read with the database's clock, who
//! leads, and history entries.

use crate::model::{DbTime, Effect, Epoch, Lease};
use std::time::Duration;

/// What an operation did, with the row as the database now sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The database instant at which the operation was decided.
    pub now: DbTime,
    /// The database's epoch then: the one a new term was (or would have been) minted in.
    pub epoch: Epoch,
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

/// Who leads a name now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The lease's name.
    pub name: String,
    /// The candidate id of the leader.
    pub holder: String,
    /// The fencing token of this tenure.
    pub term: u64,
    /// Database time at which this tenure began.
    pub since: DbTime,
    /// How long the lease has left, by the database's clock at the read.
    pub remaining: Duration,
    /// What the leader published (e.g. its address).
    pub metadata: Option<String>,
}

impl LeaderInfo {
    /// The live holder of `lease` at `now`, if any.
    pub fn from_lease(lease: &Lease, now: DbTime) -> Option<LeaderInfo> {
        let holder = lease.live_holder(now)?;
        Some(LeaderInfo {
            name: lease.name.clone(),
            holder: holder.to_string(),
            term: lease.term,
            since: lease.acquired_at,
            remaining: Duration::from_millis(lease.remaining_ms(now)),
            metadata: lease.metadata.clone(),
        })
    }
}
