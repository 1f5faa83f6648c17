//! [`Semaphore`]: up to N holders of one name, one lease per permit.

use super::{transient, until, LockGuard, LockOptions, Locks};
use crate::changes::Topic;
use crate::error::Result;
use crate::validate;
use std::time::Duration;
use tokio::time::{sleep_until, Instant};

/// Up to N holders of one name; see [`Locks`] (semaphores).
#[derive(Clone, Debug)]
pub struct Semaphore {
    locks: Locks,
    name: String,
    permits: u32,
}

impl Semaphore {
    pub(super) fn new(locks: Locks, name: &str, permits: u32) -> Result<Semaphore> {
        validate::semaphore(name, permits)?;
        Ok(Semaphore {
            locks,
            name: name.to_string(),
            permits,
        })
    }

    /// Takes a free permit, or returns `None` at once. Permits are tried from a random one on.
    ///
    /// # Errors
    /// As [`Locks::try_lock`].
    pub async fn try_acquire(&self, options: LockOptions) -> Result<Option<LockGuard>> {
        let start = crate::rng::next_u32() % self.permits;
        for k in 0..self.permits {
            let permit = validate::permit_name(&self.name, (start + k) % self.permits);
            if let Some(guard) = self.locks.try_lock(&permit, options).await? {
                return Ok(Some(guard));
            }
        }
        Ok(None)
    }

    /// Waits up to `timeout` for a permit: [`acquire_until`](Semaphore::acquire_until) with
    /// `Some(now + timeout)`.
    ///
    /// # Errors
    /// As [`Locks::try_lock`].
    pub async fn acquire(
        &self,
        options: LockOptions,
        timeout: Duration,
    ) -> Result<Option<LockGuard>> {
        self.acquire_until(options, Instant::now().checked_add(timeout))
            .await
    }

    /// Waits for a permit until `give_up`, or without a bound (`None`), trying every renew
    /// interval and at once on a PostgreSQL notification about one of its permits.
    ///
    /// # Errors
    /// As [`Locks::try_lock`].
    ///
    /// # Cancel safety
    /// As [`Locks::lock_until`].
    pub async fn acquire_until(
        &self,
        options: LockOptions,
        give_up: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        let (timing, _) = options.check()?;
        let mut changes = self.locks.inner.store.changes();
        let prefix = format!("{}#", self.name);
        let mut failed = None;
        loop {
            if let Some(Some(guard)) = transient(self.try_acquire(options).await, &mut failed)? {
                return Ok(Some(guard));
            }
            let now = Instant::now();
            if give_up.is_some_and(|g| now >= g) {
                return failed.map_or(Ok(None), Err);
            }
            let next = until(now + timing.renew_interval() + timing.jitter(), give_up);
            tokio::select! {
                () = sleep_until(next) => {}
                () = changes.changed(|t| matches!(t, Topic::Lease(n) if n.starts_with(&prefix))) => {}
            }
        }
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }
}
