//! [`LeaderGuard`]: proof of one tenure, with its fencing term and a signal for its end.

use super::Command;
use crate::belief::View;
use crate::error::{Error, Result};
use crate::fence::{Fence, FenceDatabase};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// One tenure of this elector: its term (the fencing token) and a signal that fires when the
/// tenure ends — at the latest at the local deadline, before any other candidate can start.
///
/// Clones share the same signal. Hold a clone for as long as leader-only work runs: when the
/// elector must step down (a pause, a handover), it signals [`lost`](LeaderGuard::lost) and
/// releases the lease only once every clone has been dropped (or at the local deadline at the
/// latest), so that nobody else can start while that work still runs. The same holds for
/// [`release`](LeaderGuard::release), [`Elector::pause`](super::Elector::pause) and
/// [`Elector::shutdown`](super::Elector::shutdown). Dropping a guard does not release the lease
/// by itself.
///
/// Every guard has a term of its own: the elector never hands a term to a second guard, not
/// after a release that failed, a pause, a step-down or a restart with the same candidate id.
/// Once [`is_lost`](LeaderGuard::is_lost) is true it stays true.
#[derive(Clone, Debug)]
pub struct LeaderGuard {
    pub(super) name: String,
    pub(super) candidate: String,
    pub(super) term: u64,
    pub(super) acquired: Instant,
    pub(super) belief: View,
    /// Weak, so that outstanding guards do not keep a dropped elector's loop alive.
    pub(super) commands: mpsc::WeakSender<Command>,
    /// Dropped with the last clone: tells the elector that this tenure's work has stopped, so
    /// that a step-down may release the lease.
    pub(super) _alive: Arc<oneshot::Sender<()>>,
    /// The store's fence statement.
    pub(super) fence: Option<Fence>,
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
        self.belief.deadline()
    }

    /// Completes when this tenure ends: the local deadline passed without a renewal, the
    /// elector learned it was demoted, paused or replaced, it released, or it stopped.
    ///
    /// It watches the deadline itself as well as the elector's signal, so it completes at the
    /// deadline even when the elector's task runs late (after a process pause, say).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        self.belief.ended().await
    }

    /// A token cancelled when this tenure ends, for passing to leader-only tasks.
    ///
    /// The elector cancels it at the deadline; after a process pause that can be a moment
    /// late, so a task that must not act after the deadline checks [`is_lost`](Self::is_lost)
    /// (which reads the clock) before each step.
    pub fn lost_token(&self) -> CancellationToken {
        self.belief.token()
    }

    /// Whether this tenure has already ended: the elector said so, or the local deadline has
    /// passed. The clock is read here, so the answer is right even when the elector's task
    /// has not run yet (after a process pause, say): check this before each leader-only step.
    pub fn is_lost(&self) -> bool {
        self.belief.has_ended()
    }

    /// Fences a write: checks, inside the caller's own transaction on the lease's database,
    /// that this tenure still holds the lease, and keeps any takeover waiting until that
    /// transaction ends — so what the transaction writes can never land after a newer tenure
    /// began (P2), whatever the clocks or pauses. Call it in the transaction, before its
    /// commit (typically right before), and keep the transaction short: the holder's own
    /// renewal waits for it too.
    ///
    /// `executor` is the transaction's connection: `&mut *tx` for an sqlx `Transaction` of
    /// [`sqlx::Postgres`], [`sqlx::MySql`] or [`sqlx::Sqlite`].
    ///
    /// # Errors
    /// [`Error::LeaseLost`] if the tenure has ended (locally, or in the database);
    /// [`Error::CannotFence`] if the transaction is on another kind of database than the
    /// guard's store; database errors. In every case, roll the transaction back.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # #[tokio::main] async fn main() -> Result<(), tenure::Error> {
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let url = format!("sqlite://{}", dir.path().join("fence.db").display());
    /// let store = tenure::Store::connect(&url).await?;
    /// let elector = tenure::Elector::builder(store, "billing-cron").spawn()?;
    /// let guard = elector.wait_until_leader().await?;
    ///
    /// let pool = sqlx::SqlitePool::connect(&url).await?; // the application's own pool
    /// sqlx::query("CREATE TABLE IF NOT EXISTS invoices (id INTEGER, term INTEGER)")
    ///     .execute(&pool)
    ///     .await?;
    /// let mut tx = pool.begin().await?;
    /// sqlx::query("INSERT INTO invoices VALUES (1, ?)")
    ///     .bind(guard.term() as i64)
    ///     .execute(&mut *tx)
    ///     .await?;
    /// guard.fence(&mut *tx).await?; // still ours: no takeover can commit before we do
    /// tx.commit().await?;
    /// # drop(guard);
    /// # elector.shutdown().await;
    /// # Ok(()) }
    /// ```
    pub async fn fence<'c, X>(&self, executor: X) -> Result<()>
    where
        X: sqlx::Executor<'c> + 'c,
        X::Database: FenceDatabase,
    {
        if self.is_lost() {
            return Err(self.lost_error());
        }
        Fence::check(
            self.fence.as_ref(),
            executor,
            &self.name,
            &self.candidate,
            self.term,
        )
        .await
    }

    fn lost_error(&self) -> Error {
        Error::LeaseLost {
            name: self.name.clone(),
            candidate: self.candidate.clone(),
            term: self.term,
        }
    }

    /// Ends this tenure now and releases the lease in the database, so that a follower can take
    /// over at once. The release waits until every other clone of this guard has been dropped
    /// (their [`lost`](LeaderGuard::lost) fires at once), or until the local deadline at the
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
        let term = self.term;
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
