//! [`LockGuard`]: one held lock, with its fencing term, a signal for its end, and release.

use super::{GiveBack, Inner};
use crate::belief::View;
use crate::error::{Error, Result};
use crate::fence::{Fence, FenceDatabase};
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// A held lock: its fencing term, a signal for its end, release.
///
/// Dropping it releases the lock in the background (best effort, honouring `at_least`); use
/// [`release`](LockGuard::release) to know that it happened, or [`forget`](LockGuard::forget)
/// to leave the lock to expire. Either way the guard's belief ends at once, and the term is
/// never handed to another guard.
pub struct LockGuard {
    inner: Arc<Inner>,
    name: String,
    term: u64,
    give_back: GiveBack,
    belief: View,
    /// Released, forgotten or given back: nothing left for `Drop` to do.
    done: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name)
            .field("term", &self.term)
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(super) fn new(
        inner: Arc<Inner>,
        name: &str,
        term: u64,
        give_back: GiveBack,
        belief: View,
    ) -> LockGuard {
        LockGuard {
            inner,
            name: name.to_string(),
            term,
            give_back,
            belief,
            done: false,
        }
    }

    /// The fencing token of this tenure of the lock.
    pub fn term(&self) -> u64 {
        self.term
    }
    /// The lock's name (for a semaphore permit: `NAME#i`).
    pub fn name(&self) -> &str {
        &self.name
    }
    /// The holder id.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }
    /// The local deadline: the lock is held at most until then without another renewal.
    pub fn deadline(&self) -> Instant {
        self.belief.deadline()
    }
    /// Completes when the lock is lost: not renewed by its deadline (watched here as well, so
    /// it completes at the deadline even if the keep-alive task runs late), or taken away
    /// (paused, handed over, demoted).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        self.belief.ended().await
    }
    /// A token cancelled when the lock is lost. After a process pause it can fire a moment
    /// after the deadline; check [`is_lost`](Self::is_lost) before each step.
    pub fn lost_token(&self) -> CancellationToken {
        self.belief.token()
    }
    /// Whether the lock is lost: taken away, or its deadline has passed (read from the clock).
    /// Once true, it stays true.
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
    pub async fn fence<'c, X>(&self, executor: X) -> Result<()>
    where
        X: sqlx::Executor<'c> + 'c,
        X::Database: FenceDatabase,
    {
        if self.is_lost() {
            return Err(Error::LeaseLost {
                name: self.name.clone(),
                candidate: self.inner.holder.clone(),
                term: self.term,
            });
        }
        let fence = self.inner.store.fence();
        Fence::check(fence, executor, &self.name, &self.inner.holder, self.term).await
    }

    /// Releases the lock now (it stays unavailable until `acquired_at + at_least`).
    ///
    /// # Errors
    /// Database errors; the lock then expires by itself, and this process releases the term
    /// again before it next campaigns for the name.
    pub async fn release(self) -> Result<()> {
        self.release_inner(None).await
    }

    /// As [`release`](LockGuard::release), with `reason` as the detail of the history's
    /// `released` event: recorded even where the lock's cycles are not
    /// ([`LockOptions::record_every_cycle`](super::LockOptions::record_every_cycle)).
    ///
    /// # Errors
    /// As [`release`](LockGuard::release).
    pub async fn release_because(self, reason: impl Into<String>) -> Result<()> {
        self.release_inner(Some(reason.into())).await
    }

    async fn release_inner(mut self, reason: Option<String>) -> Result<()> {
        self.done = true;
        self.inner.table().end(&self.name, self.term);
        let (name, term, give_back) = (self.name.clone(), self.term, self.give_back);
        self.inner
            .release(&name, term, give_back, reason.as_deref())
            .await
    }

    /// Stops renewing and leaves the lock to expire after `ttl` (auto-expire and election
    /// modes). This guard's belief ends now; the same [`Locks`](super::Locks) takes the lock
    /// again with a new term at its next attempt while the lease lives.
    pub fn forget(mut self) {
        self.done = true;
        let mut table = self.inner.table();
        let Some(held) = table
            .held
            .remove(&self.name)
            .filter(|h| h.belief.term() == self.term)
        else {
            return;
        };
        let until = held.belief.deadline();
        held.belief.end();
        table.kept.insert(self.name.clone(), (self.term, until));
        if table
            .terms
            .get(&self.name)
            .is_some_and(|t| t.ledger.is_idle())
        {
            table.terms.remove(&self.name);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // The term is stale from here on: an attempt for this name releases it first.
        self.inner.table().end(&self.name, self.term);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, name, term, give_back) = (
            self.inner.clone(),
            self.name.clone(),
            self.term,
            self.give_back,
        );
        runtime.spawn(async move {
            if let Err(e) = inner.release(&name, term, give_back, None).await {
                tracing::warn!(name, term, error = %e, "release on drop failed; the term stays stale and the lock will expire");
            }
        });
    }
}
