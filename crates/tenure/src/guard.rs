//! What every guard is: one [`Tenure`] of one name — its fencing term, its holder, the belief
//! that ends at the local deadline (or earlier, when its owner learns that it ended), and the
//! fence of a write made under it — written once, and reached through `Deref` from a
//! [`LeaderGuard`](crate::LeaderGuard) or a [`LockGuard`](crate::LockGuard). What differs
//! between them is how a tenure is given back: [`Guard::release`], for code that holds either.

use crate::belief::View;
use crate::error::{Error, Result};
use crate::fence::{Fence, FenceDatabase};
use std::future::Future;
use std::ops::Deref;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// One tenure of one name, as a guard holds it: a term of its own (never handed to a second
/// guard), a signal for its end, and the fence of the writes made under it. Once
/// [`is_lost`](Tenure::is_lost) is true it stays true.
#[derive(Clone, Debug)]
pub struct Tenure {
    name: String,
    candidate: String,
    term: u64,
    belief: View,
    /// The store's fence statement.
    fence: Option<Fence>,
}

impl Tenure {
    pub(crate) fn new(
        name: &str,
        candidate: &str,
        term: u64,
        belief: View,
        fence: Option<Fence>,
    ) -> Tenure {
        Tenure {
            name: name.to_string(),
            candidate: candidate.to_string(),
            term,
            belief,
            fence,
        }
    }

    /// The fencing token of this tenure: unique per name and higher than every earlier one.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The name this tenure is for (for a semaphore permit: `NAME#i`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The candidate id that holds it (a lock's holder id).
    pub fn candidate(&self) -> &str {
        &self.candidate
    }

    /// The local deadline: the latest instant this tenure can last without another renewal.
    /// Renewals move it; it never lies after the database's expiry.
    pub fn deadline(&self) -> Instant {
        self.belief.deadline()
    }

    /// Completes when this tenure ends: the local deadline passed without a renewal, or its
    /// owner learned that it ended (demoted, paused, replaced, released, stopped).
    ///
    /// It watches the deadline itself as well as the owner's signal, so it completes at the
    /// deadline even when the owner's task runs late (after a process pause, say).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        self.belief.ended().await
    }

    /// A token cancelled when this tenure ends, for passing to leader-only tasks.
    ///
    /// The owner cancels it at the deadline; after a process pause that can be a moment late,
    /// so a task that must not act after the deadline checks [`is_lost`](Self::is_lost) (which
    /// reads the clock) before each step.
    pub fn lost_token(&self) -> CancellationToken {
        self.belief.token()
    }

    /// Whether this tenure has already ended: its owner said so, or the local deadline has
    /// passed. The clock is read here, so the answer is right even when the owner's task has
    /// not run yet (after a process pause, say): check this before each leader-only step.
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
        .instrument(crate::telemetry::fence_span(&self.name, self.term))
        .await
    }

    /// [`Error::LeaseLost`] for this tenure.
    pub(crate) fn lost_error(&self) -> Error {
        Error::LeaseLost {
            name: self.name.clone(),
            candidate: self.candidate.clone(),
            term: self.term,
        }
    }
}

/// A guard of one tenure — a [`LeaderGuard`](crate::LeaderGuard) or a
/// [`LockGuard`](crate::LockGuard) — for code that runs leader-only work under either: its
/// [`Tenure`] (through `Deref`) and how it is given back. Each guard has the same methods of
/// its own; this trait only lets one piece of code take both.
pub trait Guard: Deref<Target = Tenure> + Send + Sized {
    /// Ends the tenure now and releases the lease in the database, so that someone else can
    /// take over at once (see each guard's own `release`).
    ///
    /// # Errors
    /// The release's database errors (the tenure has ended locally in any case; the lease then
    /// expires by itself).
    fn release(self) -> impl Future<Output = Result<()>> + Send;

    /// As [`release`](Guard::release), with `reason` recorded as the detail of the history's
    /// `released` event.
    ///
    /// # Errors
    /// As [`release`](Guard::release).
    fn release_because(self, reason: String) -> impl Future<Output = Result<()>> + Send;
}
