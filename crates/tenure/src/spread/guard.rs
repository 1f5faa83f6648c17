//! [`ShardGuard`]: one shard a member owns — its [`Tenure`] on the shard's lease (term,
//! `lost()`, fence) — that tells its member when the work let go of it.

use crate::guard::{Guard, Tenure};
use crate::model::{Op, Purpose};
use crate::store::Store;
use std::future::Future;
use std::ops::Deref;
use tokio::sync::mpsc;

/// A shard's guard coming back to its member.
pub(super) struct Returned {
    pub(super) shard: u32,
    pub(super) term: u64,
    /// The guard released the lease itself and the database confirmed it; otherwise the
    /// member's next tick releases it.
    pub(super) released: bool,
}

/// One shard owned by a [`Member`](super::Member): a tenure of the shard's lease — reached
/// through `Deref`: [`term`](Tenure::term), [`lost`](Tenure::lost),
/// [`is_lost`](Tenure::is_lost), [`fence`](Tenure::fence), … — and which shard it is. It is a
/// [`Guard`], so code that runs work under any guard runs it under a shard.
///
/// Work on the shard until [`lost`](crate::Tenure::lost) completes, then drop the guard (or
/// [`release`](ShardGuard::release) it). The tenure ends when the lease could not be renewed
/// in time, when the member leaves, when the group is paused, and when the member gives the
/// shard to another member (a rebalance): then the lease is released only once this guard is
/// dropped, so the next owner starts after this work stopped — or, if the guard is kept, once
/// the lease expires.
pub struct ShardGuard {
    tenure: Tenure,
    shard: u32,
    shards: u32,
    /// Its own release, and a dropped guard's when the member is gone.
    store: Store,
    /// To the member, which releases a dropped guard's lease in its next tick.
    back: mpsc::UnboundedSender<Returned>,
    /// Released or dropped: nothing left for `Drop` to do.
    done: bool,
}

impl std::fmt::Debug for ShardGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardGuard")
            .field("shard", &self.shard)
            .field("shards", &self.shards)
            .field("term", &self.term())
            .finish_non_exhaustive()
    }
}

impl ShardGuard {
    pub(super) fn new(
        tenure: Tenure,
        shard: u32,
        shards: u32,
        store: Store,
        back: mpsc::UnboundedSender<Returned>,
    ) -> ShardGuard {
        ShardGuard {
            tenure,
            shard,
            shards,
            store,
            back,
            done: false,
        }
    }

    /// Which shard (0-based, below [`shards`](ShardGuard::shards)).
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// How many shards the group has, as this member counts them.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// Releases the shard's lease now and waits for the database's answer. The tenure ends
    /// at once, before the release is sent.
    ///
    /// # Errors
    /// Database errors; the member then releases it at its next tick (or it expires).
    pub async fn release(self) -> crate::Result<()> {
        self.release_inner(None).await
    }

    /// As [`release`](ShardGuard::release), with `reason` as the detail of the history's
    /// `released` event.
    ///
    /// # Errors
    /// As [`release`](ShardGuard::release).
    pub async fn release_because(self, reason: impl Into<String>) -> crate::Result<()> {
        self.release_inner(Some(reason.into())).await
    }

    async fn release_inner(mut self, reason: Option<String>) -> crate::Result<()> {
        self.done = true;
        self.tenure.lost_token().cancel();
        let result = release(&self.store, &self.tenure, reason).await;
        let back = Returned {
            shard: self.shard,
            term: self.tenure.term(),
            released: result.is_ok(),
        };
        // A member that is gone has nothing left to learn.
        let _ = self.back.send(back);
        result
    }
}

/// Releases `tenure`'s lease.
async fn release(store: &Store, tenure: &Tenure, reason: Option<String>) -> crate::Result<()> {
    let op = Op::Release {
        candidate: tenure.candidate().to_string(),
        term: tenure.term(),
        at_least_ms: 0,
        reason,
        purpose: Purpose::Lock {
            record_every_cycle: false,
        },
    };
    store
        .apply_valid(tenure.name(), &op, tenure.candidate())
        .await
        .map(drop)
}

impl Deref for ShardGuard {
    type Target = Tenure;

    fn deref(&self) -> &Tenure {
        &self.tenure
    }
}

impl Guard for ShardGuard {
    fn release(self) -> impl Future<Output = crate::Result<()>> + Send {
        ShardGuard::release(self)
    }

    fn release_because(self, reason: String) -> impl Future<Output = crate::Result<()>> + Send {
        ShardGuard::release_because(self, reason)
    }
}

impl Drop for ShardGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // The tenure ends here, before anything else can run.
        self.tenure.lost_token().cancel();
        let back = Returned {
            shard: self.shard,
            term: self.tenure.term(),
            released: false,
        };
        if self.back.send(back).is_ok() {
            return;
        }
        // The member is gone: release in the background, or let the lease expire.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, tenure) = (self.store.clone(), self.tenure.clone());
        runtime.spawn(async move {
            if let Err(e) = release(&store, &tenure, None).await {
                tracing::warn!(name = tenure.name(), term = tenure.term(), error = %e, "spread: releasing a dropped shard failed; it expires");
            }
        });
    }
}
