//! Cluster locks and semaphores on lease rows, with fencing terms, kept alive in batches.
//!
//! [`Locks`] is a per-process handle: every lock it holds has the same holder id (its
//! candidate id), and one background task renews *all* of them with one
//! [`Backend::renew_many`](crate::Backend::renew_many) call per renew interval — a fixed number
//! of statements however many locks are held.
//!
//! # The three modes of seed 004
//! - **Lock and release**: take the lock, do the work, release.
//!   ```
//!   # async fn f(locks: &tenure::Locks) -> tenure::Result<()> {
//!   use tenure::LockOptions;
//!   if let Some(guard) = locks.try_lock("nightly-report", LockOptions::default()).await? {
//!       // work, fenced with guard.term()
//!       guard.release().await?;
//!   }
//!   # Ok(()) }
//!   ```
//! - **Auto-expire**: for short, infrequent tasks: no release, no keep-alive; the lock simply
//!   expires after `at_most`, and `at_least` keeps it unavailable for a minimum time, so that
//!   nodes whose clocks start the task a little apart do not run it twice.
//!   ```
//!   # async fn f(locks: &tenure::Locks) -> tenure::Result<()> {
//!   use std::time::Duration;
//!   use tenure::LockOptions;
//!   let once = LockOptions::default()
//!       .at_most(Duration::from_secs(60))
//!       .at_least(Duration::from_secs(30))
//!       .keep_alive(false);
//!   if let Some(guard) = locks.try_lock("purge-cache", once).await? {
//!       // short work
//!       guard.forget(); // leave it to expire
//!   }
//!   # Ok(()) }
//!   ```
//! - **Election mode**: an `at_most` longer than the task's interval (say twice), no release:
//!   the same node takes the lock again at its next run (its own live lock is renewed, same
//!   term), and others only get it once that node stops running the task.
//!   ```
//!   # async fn f(locks: &tenure::Locks) -> tenure::Result<()> {
//!   use std::time::Duration;
//!   use tenure::LockOptions;
//!   let every_minute = LockOptions::default()
//!       .at_most(Duration::from_secs(120))
//!       .keep_alive(false);
//!   if let Some(guard) = locks.try_lock("minutely-sync", every_minute).await? {
//!       // work
//!       guard.forget(); // keep ownership for the next run
//!   }
//!   # Ok(()) }
//!   ```
//!
//! # Semaphores
//! [`Semaphore`] allows up to N holders of one name. Permit *i* is the lease `NAME#i`
//! (`0 <= i < N`), each with its own fencing term. Lowering N leaves holders of permits above
//! the new N in place until they release or expire (so up to the old N hold meanwhile);
//! raising N makes the new permits available at once.

use crate::config::Timing;
use crate::error::{Error, Result};
use crate::model::{Effect, Op};
use crate::store::{duration_ms, Store};
use crate::validate;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOptions {
    at_most: Duration,
    at_least: Duration,
    keep_alive: bool,
}

impl Default for LockOptions {
    /// At most 60 s without renewal, no minimum, kept alive while the guard lives.
    fn default() -> Self {
        LockOptions {
            at_most: Duration::from_secs(60),
            at_least: Duration::ZERO,
            keep_alive: true,
        }
    }
}

impl LockOptions {
    /// The lease ttl: how long a crashed holder keeps the lock (ShedLock's `lockAtMostFor`).
    pub fn at_most(mut self, d: Duration) -> Self {
        self.at_most = d;
        self
    }
    /// The name stays unavailable until `acquired_at + at_least`, even after a release
    /// (ShedLock's `lockAtLeastFor`).
    pub fn at_least(mut self, d: Duration) -> Self {
        self.at_least = d;
        self
    }
    /// Renew while the guard lives (default), or let the lock expire after `at_most`.
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.keep_alive = on;
        self
    }
    fn timing(&self) -> Result<Timing> {
        Timing::from_ttl(self.at_most)
    }
}

/// One held lock, as the keeper sees it.
struct Held {
    term: u64,
    timing: Timing,
    keep_alive: bool,
    deadline: watch::Sender<Instant>,
    lost: CancellationToken,
}

struct Inner {
    store: Store,
    holder: String,
    held: Mutex<HashMap<String, Held>>,
    /// Terms whose belief ended locally (deadline) while the database may still name us: never
    /// resumed, released instead.
    stale: Mutex<HashMap<String, u64>>,
    /// Wakes the keep-alive task when a lock is taken.
    wake: Arc<Notify>,
}

/// A process's cluster locks, kept alive in batches. Cheap to clone.
#[derive(Clone)]
pub struct Locks {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Locks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Locks")
            .field("holder", &self.inner.holder)
            .finish_non_exhaustive()
    }
}

impl Locks {
    /// Locks on `store` held as the default candidate id (`<hostname>-<pid>-<random>`). Starts
    /// the keep-alive task on the current tokio runtime; it stops when the last clone and the
    /// last guard are dropped.
    pub fn new(store: Store) -> Locks {
        Locks::with_holder(store, validate::default_candidate_id())
            .expect("the default candidate id is valid")
    }

    /// Locks held as `holder`.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad id.
    pub fn with_holder(store: Store, holder: impl Into<String>) -> Result<Locks> {
        let holder = holder.into();
        validate::candidate(&holder)?;
        let wake = Arc::new(Notify::new());
        let inner = Arc::new(Inner {
            store,
            holder,
            held: Mutex::default(),
            stale: Mutex::default(),
            wake: wake.clone(),
        });
        tokio::spawn(keep_alive(Arc::downgrade(&inner), wake));
        Ok(Locks { inner })
    }

    /// The holder id written into the lease rows.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// How many locks this process holds now.
    pub fn held(&self) -> usize {
        self.inner.held.lock().expect("lock table").len()
    }

    /// Takes `name` if it is free, or returns `None` at once. A lock this process already holds
    /// is not taken twice.
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::UnsafeTiming`] for an `at_most` below 50 ms, database errors.
    ///
    /// # Cancel safety
    /// If cancelled after the database granted the lock, the lock is held by nobody locally and
    /// expires after `at_most`.
    pub async fn try_lock(&self, name: &str, options: LockOptions) -> Result<Option<LockGuard>> {
        Ok(self.attempt(name, &options).await?.0)
    }

    /// Waits up to `timeout` for `name`. Tries again when the holder's lease would expire (plus
    /// jitter), at least every renew interval, and at once on a PostgreSQL notification. An
    /// attempt that times out or fails in the database is tried again; if the last one failed
    /// when the wait ends, its error is returned.
    ///
    /// # Errors
    /// As [`try_lock`](Locks::try_lock).
    pub async fn lock(
        &self,
        name: &str,
        options: LockOptions,
        timeout: Duration,
    ) -> Result<Option<LockGuard>> {
        let give_up = Instant::now() + timeout;
        let timing = options.timing()?;
        let mut notes = self.inner.store.backend().subscribe();
        let mut failed = None;
        loop {
            let (guard, remaining) =
                transient(self.attempt(name, &options).await, &mut failed)?.unwrap_or_default();
            if guard.is_some() {
                return Ok(guard);
            }
            let now = Instant::now();
            if now >= give_up {
                return failed.map_or(Ok(None), Err);
            }
            let wait = match remaining {
                Some(r) if !r.is_zero() => (r + timing.jitter()).min(timing.renew_interval()),
                _ => timing.renew_interval(),
            };
            let next = (now + wait).min(give_up);
            tokio::select! {
                () = sleep_until(next) => {}
                () = crate::backend::wait_for_change(&mut notes, |n| n == name) => {}
            }
        }
    }

    /// A semaphore of `permits` on `name`.
    ///
    /// # Errors
    /// [`Error::Invalid`] if `permits` is 0 or the permits' names would be too long.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        if permits == 0 {
            return Err(Error::Invalid {
                what: "permits",
                value: "0".into(),
                rule: "must be at least 1",
            });
        }
        validate::name(&permit_name(name, permits - 1))?;
        Ok(Semaphore {
            locks: self.clone(),
            name: name.to_string(),
            permits,
        })
    }

    /// One campaign for `name`; the guard if granted, else how long the current lease has left.
    async fn attempt(
        &self,
        name: &str,
        options: &LockOptions,
    ) -> Result<(Option<LockGuard>, Option<Duration>)> {
        validate::name(name)?;
        let timing = options.timing()?;
        if self
            .inner
            .held
            .lock()
            .expect("lock table")
            .contains_key(name)
        {
            return Ok((None, None));
        }
        let op = Op::Campaign {
            candidate: self.inner.holder.clone(),
            ttl_ms: duration_ms(options.at_most),
            metadata: None,
        };
        let sent = Instant::now();
        let applied = self
            .inner
            .store
            .apply_within(timing.db_timeout(), name, &op, &self.inner.holder)
            .await?;
        let received = Instant::now();
        let lease = applied.lease.as_ref();
        let remaining = lease.map(|l| Duration::from_millis(l.remaining_ms(applied.now)));
        if !matches!(applied.effect, Effect::Acquired { .. } | Effect::Renewed) {
            return Ok((None, remaining));
        }
        let term = lease.map_or(0, |l| l.term);
        let deadline = sent + timing.belief();
        let stale = self.inner.stale.lock().expect("stale table").remove(name);
        if received >= deadline || stale == Some(term) {
            // Too late to believe, or a term whose belief already ended: give it back. Until
            // the release is known to have landed the term stays stale, so that a renewal of
            // it (the release timed out, say) is given back again, never handed out.
            let released = self
                .inner
                .store
                .release(name, &self.inner.holder, term, Duration::ZERO)
                .await;
            if let Err(e) = released {
                tracing::warn!(name, term, error = %e, "giving back a stale lock term failed; it stays stale");
                self.inner
                    .stale
                    .lock()
                    .expect("stale table")
                    .insert(name.to_string(), term);
            }
            return Ok((None, Some(Duration::ZERO)));
        }
        let (deadline_tx, deadline_rx) = watch::channel(deadline);
        let lost = CancellationToken::new();
        let guard = LockGuard {
            inner: self.inner.clone(),
            name: name.to_string(),
            term,
            at_least: options.at_least,
            deadline: deadline_rx,
            lost: lost.clone(),
            released: false,
        };
        let mut held = self.inner.held.lock().expect("lock table");
        if held.contains_key(name) {
            // Another task of this process won the same lock meanwhile; ours is its renewal.
            return Ok((None, None));
        }
        held.insert(
            name.to_string(),
            Held {
                term,
                timing,
                keep_alive: options.keep_alive,
                deadline: deadline_tx,
                lost,
            },
        );
        drop(held);
        self.inner.wake.notify_one();
        Ok((Some(guard), None))
    }
}

/// A held lock: its fencing term, a signal for its end, release.
///
/// Dropping it releases the lock in the background (best effort, honouring `at_least`); use
/// [`release`](LockGuard::release) to know that it happened, or [`forget`](LockGuard::forget)
/// to leave the lock to expire.
pub struct LockGuard {
    inner: Arc<Inner>,
    name: String,
    term: u64,
    at_least: Duration,
    deadline: watch::Receiver<Instant>,
    lost: CancellationToken,
    released: bool,
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
        *self.deadline.borrow()
    }
    /// Completes when the lock is lost: not renewed by its deadline (watched here as well, so
    /// it completes at the deadline even if the keep-alive task runs late), or taken away
    /// (paused, handed over, demoted).
    ///
    /// # Cancel safety
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        crate::belief::ended(&self.lost, &self.deadline).await
    }
    /// A token cancelled when the lock is lost. After a process pause it can fire a moment
    /// after the deadline; check [`is_lost`](Self::is_lost) before each step.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }
    /// Whether the lock is lost: taken away, or its deadline has passed (read from the clock).
    pub fn is_lost(&self) -> bool {
        crate::belief::has_ended(&self.lost, &self.deadline)
    }

    /// Releases the lock now (it stays unavailable until `acquired_at + at_least`).
    ///
    /// # Errors
    /// Database errors; the lock then expires by itself.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        self.forget_locally();
        self.inner
            .store
            .release(&self.name, &self.inner.holder, self.term, self.at_least)
            .await
            .map(|_| ())
    }

    /// Stops renewing and leaves the lock to expire after `at_most` (auto-expire and election
    /// modes).
    pub fn forget(mut self) {
        self.released = true;
        self.forget_locally();
    }

    fn forget_locally(&self) {
        let mut held = self.inner.held.lock().expect("lock table");
        if held.get(&self.name).is_some_and(|h| h.term == self.term) {
            held.remove(&self.name);
        }
        self.lost.cancel();
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        self.forget_locally();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (inner, name, term, at_least) = (
            self.inner.clone(),
            self.name.clone(),
            self.term,
            self.at_least,
        );
        runtime.spawn(async move {
            if let Err(e) = inner.store.release(&name, &inner.holder, term, at_least).await {
                tracing::warn!(name, term, error = %e, "release on drop failed; the lock will expire");
            }
        });
    }
}

/// Up to N holders of one name; see the [module docs](self).
#[derive(Clone, Debug)]
pub struct Semaphore {
    locks: Locks,
    name: String,
    permits: u32,
}

fn permit_name(name: &str, i: u32) -> String {
    format!("{name}#{i}")
}

impl Semaphore {
    /// Takes a free permit, or returns `None` at once. Permits are tried from a random one on.
    ///
    /// # Errors
    /// As [`Locks::try_lock`].
    pub async fn try_acquire(&self, options: LockOptions) -> Result<Option<LockGuard>> {
        let start = crate::rng::next_u32() % self.permits;
        for k in 0..self.permits {
            let permit = permit_name(&self.name, (start + k) % self.permits);
            if let Some(guard) = self.locks.try_lock(&permit, options).await? {
                return Ok(Some(guard));
            }
        }
        Ok(None)
    }

    /// Waits up to `timeout` for a permit (trying every renew interval, and at once on a
    /// PostgreSQL notification about one of its permits).
    ///
    /// # Errors
    /// As [`Locks::try_lock`].
    pub async fn acquire(
        &self,
        options: LockOptions,
        timeout: Duration,
    ) -> Result<Option<LockGuard>> {
        let give_up = Instant::now() + timeout;
        let timing = options.timing()?;
        let mut notes = self.locks.inner.store.backend().subscribe();
        let prefix = format!("{}#", self.name);
        let mut failed = None;
        loop {
            if let Some(Some(guard)) = transient(self.try_acquire(options).await, &mut failed)? {
                return Ok(Some(guard));
            }
            let now = Instant::now();
            if now >= give_up {
                return failed.map_or(Ok(None), Err);
            }
            let next = (now + timing.renew_interval() + timing.jitter()).min(give_up);
            tokio::select! {
                () = sleep_until(next) => {}
                () = crate::backend::wait_for_change(&mut notes, |n| n.starts_with(&prefix)) => {}
            }
        }
    }

    /// The number of permits.
    pub fn permits(&self) -> u32 {
        self.permits
    }
}

/// A waiting caller retries after a timeout or a database error (until it gives up, when the
/// last such error is returned); other errors end the wait at once.
fn transient<T>(result: Result<T>, failed: &mut Option<Error>) -> Result<Option<T>> {
    match result {
        Ok(answer) => {
            *failed = None;
            Ok(Some(answer))
        }
        Err(e @ (Error::Timeout(_) | Error::Database(_))) => {
            tracing::warn!(error = %e, "lock attempt failed; trying again");
            *failed = Some(e);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The keep-alive task: every renew interval (the shortest among the held locks), one batched
/// renewal of every held lock; a lock not renewed, or whose deadline passes, is lost.
async fn keep_alive(inner: Weak<Inner>, wake: Arc<Notify>) {
    // When the next batch is due. A lock just taken is fresh: taking one only brings the next
    // batch forward if its renew interval is shorter, it never triggers a batch by itself.
    let mut next_batch: Option<Instant> = None;
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let now = Instant::now();
        let (batch, tick, earliest) = {
            let mut held = strong.held.lock().expect("lock table");
            expire(&strong, &mut held, now);
            let batch: Vec<(String, u64)> = held
                .iter()
                .filter(|(_, h)| h.keep_alive)
                .map(|(n, h)| (n.clone(), h.term))
                .collect();
            let tick = held
                .values()
                .filter(|h| h.keep_alive)
                .map(|h| h.timing.renew_interval())
                .min();
            let earliest = held.values().map(|h| *h.deadline.borrow()).min();
            (batch, tick, earliest)
        };
        next_batch = match (tick, next_batch) {
            (None, _) => None,
            (Some(tick), Some(due)) if now >= due => {
                renew(&strong, &batch).await;
                Some(now + tick)
            }
            (Some(tick), Some(due)) => Some(due.min(now + tick)),
            (Some(tick), None) => Some(now + tick),
        };
        let wake_at = match (next_batch, earliest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let notified = wake.notified();
        drop(strong);
        match wake_at {
            Some(at) => {
                tokio::select! {
                    () = sleep_until(at) => {}
                    () = notified => {}
                }
            }
            None => {
                // Nothing held: wait for a lock, but let a dropped `Locks` end the task.
                tokio::select! {
                    () = notified => {}
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Ends the tenures whose deadline has passed.
fn expire(inner: &Inner, held: &mut HashMap<String, Held>, now: Instant) {
    let mut stale = inner.stale.lock().expect("stale table");
    held.retain(|name, h| {
        if *h.deadline.borrow() > now {
            return true;
        }
        tracing::warn!(
            name,
            term = h.term,
            "lock lost: its deadline passed without a renewal"
        );
        h.lost.cancel();
        stale.insert(name.clone(), h.term);
        false
    });
}

async fn renew(inner: &Inner, batch: &[(String, u64)]) {
    let sent = Instant::now();
    let timeout = {
        let held = inner.held.lock().expect("lock table");
        held.values()
            .map(|h| h.timing.db_timeout())
            .min()
            .unwrap_or(Duration::from_secs(1))
    };
    let result = crate::store::bounded(
        timeout,
        inner.store.backend().renew_many(&inner.holder, batch),
    )
    .await;
    let received = Instant::now();
    let renewed = match result {
        Ok(renewed) => renewed,
        Err(e) => {
            tracing::warn!(error = %e, locks = batch.len(), "keep-alive failed; the deadlines still run");
            return;
        }
    };
    let mut still: HashMap<&str, u64> = HashMap::with_capacity(renewed.leases.len());
    for lease in &renewed.leases {
        still.insert(lease.name.as_str(), lease.term);
    }
    let mut held = inner.held.lock().expect("lock table");
    for (name, term) in batch {
        let Some(h) = held.get(name) else { continue };
        if h.term != *term {
            continue;
        }
        if still.get(name.as_str()) == Some(term) {
            let deadline = sent + h.timing.belief();
            if received < deadline {
                h.deadline.send_replace(deadline);
            }
        } else {
            tracing::warn!(
                name,
                term,
                "lock lost: not renewed (taken, paused, handed over or expired)"
            );
            h.lost.cancel();
            held.remove(name);
        }
    }
}
