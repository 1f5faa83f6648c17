//! [`LeaderGuard`]: proof of one tenure, with its fencing term and a signal for its end.

use super::Command;
use crate::error::{Error, Result};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

/// One tenure of this elector: its term (the fencing token) and a signal that fires when the
/// tenure ends — at the latest at the local deadline, before any other candidate can start.
///
/// Clones share the same signal. Hold a clone for as long as leader-only work runs: when the
/// elector must step down (a pause, a handover), it signals [`lost`](LeaderGuard::lost) and
/// releases the lease only once every clone has been dropped (or at the local deadline at the
/// latest), so that nobody else can start while that work still runs. Dropping a guard does not
/// release the lease by itself; use [`release`](LeaderGuard::release) or
/// [`Elector::shutdown`](super::Elector::shutdown).
#[derive(Clone, Debug)]
pub struct LeaderGuard {
    pub(super) name: String,
    pub(super) candidate: String,
    pub(super) term: u64,
    pub(super) acquired: Instant,
    pub(super) lost: CancellationToken,
    pub(super) deadline: watch::Receiver<Instant>,
    /// Weak, so that outstanding guards do not keep a dropped elector's loop alive.
    pub(super) commands: mpsc::WeakSender<Command>,
    /// Dropped with the last clone: tells the elector that this tenure's work has stopped, so
    /// that a step-down may release the lease.
    pub(super) _alive: Arc<oneshot::Sender<()>>,
}

impl LeaderGuard {
    /// The fencing token of this tenure: unique per name and higher than every earlier one.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The name this tenure is for.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The candidate id that holds it.
    pub fn candidate(&self) -> &str {
        &self.candidate
    }

    /// The local instant at which this elector learned it leads.
    pub fn acquired(&self) -> Instant {
        self.acquired
    }

    /// The local deadline: the latest instant this tenure can last without another renewal.
    /// Renewals move it; it never lies after the database's expiry.
    pub fn deadline(&self) -> Instant {
        *self.deadline.borrow()
    }

    /// Completes when this tenure ends: the local deadline passed without a renewal, the
    /// elector learned it was demoted, paused or replaced, it released, or it stopped.
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub fn lost(&self) -> WaitForCancellationFuture<'_> {
        self.lost.cancelled()
    }

    /// A token cancelled when this tenure ends, for passing to leader-only tasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether this tenure has already ended.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Ends this tenure now and releases the lease in the database, so that a follower can take
    /// over at once. The elector then waits one renew interval before it campaigns again.
    /// Releasing a tenure that already ended does nothing.
    ///
    /// # Errors
    /// [`Error::Shutdown`] if the elector has stopped; database errors of the release (the
    /// tenure has ended locally in any case; the lease then expires by itself).
    ///
    /// # Cancel safety
    /// If cancelled after the request was sent the release still happens.
    pub async fn release(self) -> Result<()> {
        let (reply, done) = oneshot::channel();
        let commands = self.commands.upgrade().ok_or(Error::Shutdown)?;
        commands
            .send(Command::Release {
                term: self.term,
                reply,
            })
            .await
            .map_err(|_| Error::Shutdown)?;
        done.await.map_err(|_| Error::Shutdown)?
    }
}
