//! Cluster locks and semaphores on lease rows, with fencing terms, kept alive in batches.

mod attempt;
mod guard;
mod keeper;
mod many;
mod options;
mod semaphore;
mod table;

pub use guard::LockGuard;
pub use options::LockOptions;
pub use semaphore::Semaphore;

use crate::changes::Topic;
use crate::error::{Error, Result};
use crate::model::Op;
use crate::store::Store;
use crate::telemetry;
use crate::validate;
use attempt::Retry;
use options::GiveBack;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use table::Table;
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

struct Inner {
    store: Store,
    holder: String,
    table: Mutex<Table>,
    /// Wakes the keep-alive task when a lock is taken.
    wake: Arc<Notify>,
}

impl Inner {
    fn table(&self) -> MutexGuard<'_, Table> {
        self.table.lock().expect("lock table")
    }

    /// Releases `term` of `name`; once that is known to have landed the term is not stale.
    async fn release(
        &self,
        name: &str,
        term: u64,
        give_back: GiveBack,
        reason: Option<&str>,
    ) -> Result<()> {
        let op = Op::Release {
            candidate: self.holder.clone(),
            term,
            at_least_ms: give_back.at_least_ms,
            reason: reason.map(str::to_string),
            purpose: give_back.purpose,
        };
        self.store.apply_valid(name, &op, &self.holder).await?;
        self.table().gone(name, term);
        Ok(())
    }
}

/// A process's cluster locks and semaphores on lease rows, with fencing terms, kept alive in
/// batches. Cheap to clone.
///
/// [`Locks`] is a per-process handle: every lock it holds has the same holder id (its
/// candidate id), and one background task renews *all* of them with one
/// [`Backend::renew_many`](crate::backend::Backend::renew_many) call per renew interval — a fixed number
/// of statements however many locks are held.
///
/// # One believer per lock
/// The holder id is shared by every task of the process (and by any other process given the
/// same id), so it never decides who holds a lock by itself: a campaign that names no term
/// finds a live lease held, even one held under this very id. Within the process the lock
/// table hands a (name, term) to at most one [`LockGuard`], ever:
/// - a term released (explicitly or on drop) or lost stays *stale* until its release is known
///   to have landed, and the next attempt for that name releases it first, then campaigns —
///   so a relock right after a release gets a new term, or nothing;
/// - a guard's deadline follows what the database said the lease has left (never more than its
///   own `ttl − margin`), and a guard that reported lost never reports held again.
///
/// # Three ways to use a lock
/// - **Lock and release**: take the lock, do the work, release.
///   ```
///   # async fn f(locks: &tenure::Locks) -> tenure::Result<()> {
///   use tenure::LockOptions;
///   if let Some(guard) = locks.try_lock("nightly-report", LockOptions::default()).await? {
///       // work, fenced with guard.term()
///       guard.release().await?;
///   }
///   # Ok(()) }
///   ```
/// - **Auto-expire**: for short, infrequent tasks: no release, no keep-alive; the lock simply
///   expires after `ttl`, and `at_least` keeps it unavailable for a minimum time, so that
///   nodes whose clocks start the task a little apart do not run it twice.
///   ```
///   # async fn f(locks: &tenure::Locks) -> tenure::Result<()> {
///   use std::time::Duration;
///   use tenure::LockOptions;
///   let once = LockOptions::default()
///       .ttl(Duration::from_secs(60))
///       .at_least(Duration::from_secs(30))
///       .keep_alive(false);
///   if let Some(guard) = locks.try_lock("purge-cache", once).await? {
///       // short work
///       guard.forget(); // leave it to expire
///   }
///   # Ok(()) }
///   ```
/// - **Election mode**: an `ttl` longer than the task's interval (say twice), no release:
///   the same node takes the lock again at its next run, and others only get it once that node
///   stops running the task. A lock kept with [`LockGuard::forget`] is taken again by the same
///   [`Locks`] in one step that ends the kept tenure and begins the next (term + 1, with nobody
///   in between), so every guard still has a term of its own.
///   ```
///   # async fn f(locks: &tenure::Locks) -> tenure::Result<()> {
///   use std::time::Duration;
///   use tenure::LockOptions;
///   let every_minute = LockOptions::default()
///       .ttl(Duration::from_secs(120))
///       .keep_alive(false);
///   if let Some(guard) = locks.try_lock("minutely-sync", every_minute).await? {
///       // work
///       guard.forget(); // keep ownership for the next run
///   }
///   # Ok(()) }
///   ```
///
/// # History
/// A lock's uncontested acquisition and its plain release leave no row in the history (a lock
/// taken in a loop writes only its lease row); takeovers of an expired holder, acquisitions by
/// handover, releases with a reason and admin events do. See
/// [`LockOptions::record_every_cycle`] to record every cycle. On PostgreSQL a release wakes
/// the waiters at once (`NOTIFY`); an acquisition wakes nobody.
///
/// # Semaphores
/// [`Semaphore`] allows up to N holders of one name. Permit *i* is the lease `NAME#i`
/// (`0 <= i < N`), each with its own fencing term. Lowering N leaves holders of permits above
/// the new N in place until they release or expire (so up to the old N hold meanwhile);
/// raising N makes the new permits available at once.
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

    /// Locks held as `holder`. Another process given the same id does not share its locks: a
    /// lock is held by one guard, whoever else uses the id.
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
            table: Mutex::default(),
            wake: wake.clone(),
        });
        tokio::spawn(keeper::keep_alive(Arc::downgrade(&inner), wake));
        Ok(Locks { inner })
    }

    /// The holder id written into the lease rows.
    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// How many locks this process holds now.
    pub fn held(&self) -> usize {
        self.inner.table().held.len()
    }

    /// Takes `name` if it is free, or returns `None` at once. A lock this process already holds
    /// is not taken twice. If this process released `name` and that release has not been
    /// confirmed yet (it runs in the background after a drop), it is released first.
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::UnsafeTiming`] for an `ttl` below 50 ms, database errors.
    ///
    /// # Cancel safety
    /// If cancelled after the database granted the lock, the lock is held by nobody locally and
    /// expires after `ttl`.
    pub async fn try_lock(&self, name: &str, options: LockOptions) -> Result<Option<LockGuard>> {
        Ok(self.attempt(name, &options).await?.0)
    }

    /// Waits up to `timeout` for `name`: [`lock_until`](Locks::lock_until) with
    /// `Some(now + timeout)`.
    ///
    /// # Errors
    /// As [`try_lock`](Locks::try_lock).
    ///
    /// # Cancel safety
    /// As [`try_lock`](Locks::try_lock).
    pub async fn lock(
        &self,
        name: &str,
        options: LockOptions,
        timeout: Duration,
    ) -> Result<Option<LockGuard>> {
        self.lock_until(name, options, Instant::now().checked_add(timeout))
            .await
    }

    /// Waits for `name` until `give_up`, or without a bound (`None`: returns only with the lock
    /// or an error that is not transient). Tries again when the holder's lease would expire
    /// (plus jitter), at least every renew interval, and at once on a PostgreSQL notification.
    /// An attempt that times out or fails in the database is tried again; if the last one
    /// failed when the wait ends, its error is returned.
    ///
    /// # Errors
    /// As [`try_lock`](Locks::try_lock).
    ///
    /// # Cancel safety
    /// As [`try_lock`](Locks::try_lock): cancel the wait (e.g. in a `select!`) to stop waiting.
    pub async fn lock_until(
        &self,
        name: &str,
        options: LockOptions,
        give_up: Option<Instant>,
    ) -> Result<Option<LockGuard>> {
        let (timing, _) = options.check()?;
        let started = Instant::now();
        let waited = |outcome| telemetry::lock_wait(name, started.elapsed(), outcome);
        let mut changes = self.inner.store.changes();
        let mut failed = None;
        loop {
            let attempt = transient(self.attempt(name, &options).await, &mut failed);
            let (guard, retry) = attempt
                .inspect_err(|_| waited("error"))?
                .unwrap_or((None, Retry::Poll));
            if guard.is_some() {
                waited("acquired");
                return Ok(guard);
            }
            let now = Instant::now();
            if give_up.is_some_and(|g| now >= g) {
                waited(if failed.is_some() { "error" } else { "gave_up" });
                return failed.map_or(Ok(None), Err);
            }
            let wait = match retry {
                Retry::Now => Duration::ZERO,
                Retry::WhenExpires(r) => (r + timing.jitter()).min(timing.renew_interval()),
                Retry::Poll => timing.renew_interval(),
            };
            let next = until(now + wait, give_up);
            tokio::select! {
                () = sleep_until(next) => {}
                () = changes.changed(|t| t == Topic::Lease(name)) => {}
            }
        }
    }

    /// A semaphore of `permits` on `name`.
    ///
    /// # Errors
    /// [`Error::Invalid`] if `permits` is 0 or the permits' names would be too long.
    pub fn semaphore(&self, name: &str, permits: u32) -> Result<Semaphore> {
        Semaphore::new(self.clone(), name, permits)
    }
}

/// `next`, or `give_up` if that comes first.
fn until(next: Instant, give_up: Option<Instant>) -> Instant {
    give_up.map_or(next, |g| next.min(g))
}

/// A waiting caller retries after a failure that [`Error::is_transient`] (a failover may be
/// under way; until it gives up, when the last such error is returned); other errors end the
/// wait at once.
fn transient<T>(result: Result<T>, failed: &mut Option<Error>) -> Result<Option<T>> {
    match result {
        Ok(answer) => {
            *failed = None;
            Ok(Some(answer))
        }
        Err(e) if e.is_transient() => {
            tracing::warn!(error = %e, "lock attempt failed; trying again");
            *failed = Some(e);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
