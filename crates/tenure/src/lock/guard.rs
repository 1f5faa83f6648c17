//! [`LockGuard`]: one held lock — its [`Tenure`] (term, end, fence) — and how it is given
//! back: released, forgotten (left to expire), or released in the background on drop.

use super::{GiveBack, Inner};
use crate::error::Result;
use crate::guard::{Guard, Tenure};
use crate::telemetry::Ended;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;

/// A held lock: its [`Tenure`] (reached through `Deref`: [`term`](Tenure::term),
/// [`lost`](Tenure::lost), [`is_lost`](Tenure::is_lost), [`fence`](Tenure::fence), …; the
/// holder id is its [`candidate`](Tenure::candidate)) and release.
///
/// Dropping it releases the lock in the background (best effort, honouring `at_least`); use
/// [`release`](LockGuard::release) to know that it happened, or [`forget`](LockGuard::forget)
/// to leave the lock to expire. Either way the guard's belief ends at once, and the term is
/// never handed to another guard.
pub struct LockGuard {
    inner: Arc<Inner>,
    tenure: Tenure,
    give_back: GiveBack,
    /// Released, forgotten or given back: nothing left for `Drop` to do.
    done: bool,
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("term", &self.term())
            .finish_non_exhaustive()
    }
}

impl Deref for LockGuard {
    type Target = Tenure;

    fn deref(&self) -> &Tenure {
        &self.tenure
    }
}

impl LockGuard {
    pub(super) fn new(inner: Arc<Inner>, tenure: Tenure, give_back: GiveBack) -> LockGuard {
        LockGuard {
            inner,
            tenure,
            give_back,
            done: false,
        }
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
        let (name, term, give_back) = (self.name().to_string(), self.term(), self.give_back);
        self.inner.table().end(&name, term, Ended::Released);
        self.inner
            .release(&name, term, give_back, reason.as_deref())
            .await
    }

    /// Stops renewing and leaves the lock to expire after `ttl` (auto-expire and election
    /// modes). This guard's belief ends now; the same [`Locks`](super::Locks) takes the lock
    /// again with a new term at its next attempt while the lease lives.
    pub fn forget(mut self) {
        self.done = true;
        let (name, term) = (self.tenure.name(), self.tenure.term());
        let mut table = self.inner.table();
        let Some(held) = table.held.remove(name).filter(|h| h.belief.term() == term) else {
            return;
        };
        let until = held.belief.deadline();
        held.belief.end(Ended::Released);
        table.kept.insert(name.to_string(), (term, until));
        if table.terms.get(name).is_some_and(|t| t.ledger.is_idle()) {
            table.terms.remove(name);
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (name, term) = (self.name().to_string(), self.term());
        // The term is stale from here on: an attempt for this name releases it first.
        self.inner.table().end(&name, term, Ended::Released);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, give_back) = (self.inner.clone(), self.give_back);
        runtime.spawn(async move {
            if let Err(e) = inner.release(&name, term, give_back, None).await {
                tracing::warn!(name, term, error = %e, "release on drop failed; the term stays stale and the lock will expire");
            }
        });
    }
}

impl Guard for LockGuard {
    fn release(self) -> impl Future<Output = Result<()>> + Send {
        LockGuard::release(self)
    }

    fn release_because(self, reason: String) -> impl Future<Output = Result<()>> + Send {
        LockGuard::release_because(self, reason)
    }
}
