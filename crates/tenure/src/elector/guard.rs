//! [`LeaderGuard`]: proof of one tenure of an elector — its [`Tenure`] (term, end, fence) and
//! how the elector gives it back.

use super::Command;
use crate::error::{Error, Result};
use crate::guard::{Guard, Tenure};
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// One tenure of this elector: its term (the fencing token) and a signal that fires when the
/// tenure ends — at the latest at the local deadline, before any other candidate can start.
///
/// Clones share the same signal. Hold a clone for as long as leader-only work runs: when the
/// elector must step down (a pause, a handover), it signals [`lost`](Tenure::lost) and
/// releases the lease only once every clone has been dropped (or at the local deadline at the
/// latest), so that nobody else can start while that work still runs. The same holds for
/// [`release`](LeaderGuard::release), [`Elector::pause`](super::Elector::pause) and
/// [`Elector::shutdown`](super::Elector::shutdown). Dropping a guard does not release the lease
/// by itself.
///
/// Every guard has a term of its own: the elector never hands a term to a second guard, not
/// after a release that failed, a pause, a step-down or a restart with the same candidate id.
/// Its [`Tenure`] (reached through `Deref`: [`term`](Tenure::term), [`lost`](Tenure::lost),
/// [`is_lost`](Tenure::is_lost), [`fence`](Tenure::fence), …) is shared with every guard kind;
/// once `is_lost` is true it stays true.
#[derive(Clone, Debug)]
pub struct LeaderGuard {
    pub(super) tenure: Tenure,
    pub(super) acquired: Instant,
    /// Weak, so that outstanding guards do not keep a dropped elector's loop alive.
    pub(super) commands: mpsc::WeakSender<Command>,
    /// Dropped with the last clone: tells the elector that this tenure's work has stopped, so
    /// that a step-down may release the lease.
    pub(super) _alive: Arc<oneshot::Sender<()>>,
}

impl Deref for LeaderGuard {
    type Target = Tenure;

    fn deref(&self) -> &Tenure {
        &self.tenure
    }
}

impl LeaderGuard {
    /// The local instant at which this elector learned it leads.
    pub fn acquired(&self) -> Instant {
        self.acquired
    }

    /// Ends this tenure now and releases the lease in the database, so that a follower can take
    /// over at once. The release waits until every other clone of this guard has been dropped
    /// (their [`lost`](Tenure::lost) fires at once), or until the local deadline at the
    /// latest. The elector then waits [`Timing::release_hold_off`] (renew interval plus
    /// database timeout) before it campaigns again, so that a polling follower takes over
    /// first. If the release fails, the term stays this elector's *stale* term: it is released
    /// again before the elector campaigns, and never handed to a new guard.
    ///
    /// Releasing a tenure that already ended does nothing.
    ///
    /// [`Timing::release_hold_off`]: crate::Timing::release_hold_off
    ///
    /// # Errors
    /// [`Error::Shutdown`] if the elector has stopped; database errors of the release (the
    /// tenure has ended locally in any case; the lease then expires by itself).
    ///
    /// # Cancel safety
    /// If cancelled after the request was sent the release still happens.
    pub async fn release(self) -> Result<()> {
        self.release_inner(None).await
    }

    /// As [`release`](LeaderGuard::release), with `reason` recorded as the detail of the
    /// history's `released` event (e.g. "health check failed 3 times").
    ///
    /// # Errors
    /// As [`release`](LeaderGuard::release).
    pub async fn release_because(self, reason: impl Into<String>) -> Result<()> {
        self.release_inner(Some(reason.into())).await
    }

    async fn release_inner(self, reason: Option<String>) -> Result<()> {
        let (reply, done) = oneshot::channel();
        let commands = self.commands.upgrade().ok_or(Error::Shutdown)?;
        let term = self.term();
        // This clone must not hold up the release it asks for.
        drop(self);
        commands
            .send(Command::Release {
                term,
                reason,
                reply,
            })
            .await
            .map_err(|_| Error::Shutdown)?;
        done.await.map_err(|_| Error::Shutdown)?
    }
}

impl Guard for LeaderGuard {
    fn release(self) -> impl Future<Output = Result<()>> + Send {
        LeaderGuard::release(self)
    }

    fn release_because(self, reason: String) -> impl Future<Output = Result<()>> + Send {
        LeaderGuard::release_because(self, reason)
    }
}
