//! [`ShardGuard`]: one shard a member owns — an ordinary lock guard on the shard's lease (its
//! term, `lost()`, fence) that tells its member when the work let go of it.

use crate::guard::{Guard, Tenure};
use crate::lock::LockGuard;
use std::future::Future;
use std::ops::Deref;
use tokio::sync::mpsc;

/// A shard's guard coming back to its member: the lock to release (`None`: the work released
/// it itself).
pub(super) struct Returned {
    pub(super) shard: u32,
    pub(super) term: u64,
    pub(super) lock: Option<LockGuard>,
}

/// One shard owned by a [`Member`](super::Member): a lock on the shard's lease — its
/// [`Tenure`] reached through `Deref`: [`term`](Tenure::term), [`lost`](Tenure::lost),
/// [`is_lost`](Tenure::is_lost), [`fence`](Tenure::fence), … — and which shard it is. It is a
/// [`Guard`], so code that runs work under any guard runs it under a shard.
///
/// Work on the shard until [`lost`](crate::Tenure::lost) completes, then drop the guard (or
/// [`release`](ShardGuard::release) it). The tenure ends when the lease could not be renewed
/// in time, when the member leaves, and when the member gives the shard to another member
/// (a rebalance): then the lease is released only once this guard is dropped, so the next
/// owner starts after this work stopped — or, if the guard is kept, once the lease expires.
pub struct ShardGuard {
    /// Taken out when the guard is released or dropped.
    lock: Option<LockGuard>,
    shard: u32,
    shards: u32,
    /// To the member, which releases a dropped guard's lease and waits for the answer (if
    /// the member is gone, the lock's own drop releases it in the background).
    back: mpsc::UnboundedSender<Returned>,
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
        lock: LockGuard,
        shard: u32,
        shards: u32,
        back: mpsc::UnboundedSender<Returned>,
    ) -> ShardGuard {
        ShardGuard {
            lock: Some(lock),
            shard,
            shards,
            back,
        }
    }

    /// Which shard (0-based, below [`shards`](ShardGuard::shards)).
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// How many shards the group has.
    pub fn shards(&self) -> u32 {
        self.shards
    }

    /// Releases the shard's lease now and waits for the database's answer.
    ///
    /// # Errors
    /// Database errors; the lease then expires by itself.
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
        let Some(lock) = self.lock.take() else {
            return Ok(());
        };
        let term = lock.term();
        let result = match reason {
            Some(reason) => lock.release_because(reason).await,
            None => lock.release().await,
        };
        let back = Returned {
            shard: self.shard,
            term,
            lock: None,
        };
        // A member that is gone has nothing left to learn.
        let _ = self.back.send(back);
        result
    }
}

impl Deref for ShardGuard {
    type Target = Tenure;

    fn deref(&self) -> &Tenure {
        self.lock.as_ref().expect("held until released or dropped")
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
        if let Some(lock) = self.lock.take() {
            let back = Returned {
                shard: self.shard,
                term: lock.term(),
                lock: Some(lock),
            };
            // If the member is gone, the returned lock is dropped here: released in the
            // background.
            let _ = self.back.send(back);
        }
    }
}
