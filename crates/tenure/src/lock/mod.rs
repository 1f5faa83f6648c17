//! Cluster locks and semaphores on lease rows, with fencing terms, kept alive in batches.

mod guard;
mod keeper;
mod semaphore;

pub use guard::LockGuard;
pub use semaphore::Semaphore;

use crate::belief::{deadline_for, Belief, Ledger, View};
use crate::config::Timing;
use crate::error::{Error, Result};
use crate::model::{Effect, Op, Purpose};
use crate::store::{duration_ms, Store};
use crate::validate;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

/// How a lock is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockOptions {
    ttl: Duration,
    at_least: Duration,
    keep_alive: bool,
    record_every_cycle: bool,
}

impl Default for LockOptions {
    /// At most 60 s without renewal, no minimum, kept alive while the guard lives, only
    /// notable transitions in the history.
    fn default() -> Self {
        LockOptions {
            ttl: Duration::from_secs(60),
            at_least: Duration::ZERO,
            keep_alive: true,
            record_every_cycle: false,
        }
    }
}

impl LockOptions {
    /// The lease ttl: how long a crashed holder keeps the lock (ShedLock's `lockAtMostFor`).
    pub fn ttl(mut self, d: Duration) -> Self {
        self.ttl = d;
        self
    }
    /// The old name of [`ttl`](LockOptions::ttl).
    #[doc(hidden)]
    #[deprecated(since = "0.1.0", note = "renamed to `ttl`")]
    pub fn at_most(self, d: Duration) -> Self {
        self.ttl(d)
    }
    /// The name stays unavailable until `acquired_at + at_least`, even after a release
    /// (ShedLock's `lockAtLeastFor`).
    pub fn at_least(mut self, d: Duration) -> Self {
        self.at_least = d;
        self
    }
    /// Renew while the guard lives (default), or let the lock expire after `ttl`.
    pub fn keep_alive(mut self, on: bool) -> Self {
        self.keep_alive = on;
        self
    }
    /// Record every acquisition and release of the lock in the history (`tenure history`),
    /// as an election does. Off by default: a lock taken and released in a loop would write a
    /// history row at every turn, which costs each cycle two statements. Recorded either way:
    /// a takeover of a holder whose lease expired unreleased (`taken_over_expired`), an
    /// acquisition by handover, a release that gives a reason
    /// ([`LockGuard::release_because`]), and every admin event (demote, handover, pause,
    /// resume). The fencing term rises by one per tenure whether or not it is recorded.
    pub fn record_every_cycle(mut self, on: bool) -> Self {
        self.record_every_cycle = on;
        self
    }
    fn timing(&self) -> Result<Timing> {
        Timing::from_ttl(self.ttl)
    }
    fn purpose(&self) -> Purpose {
        Purpose::Lock {
            record_every_cycle: self.record_every_cycle,
        }
    }
    fn give_back(&self) -> GiveBack {
        GiveBack {
            at_least: self.at_least,
            purpose: self.purpose(),
        }
    }
}

/// How a term of a lock is given back: nobody may start before `acquired_at + at_least`, and
/// the purpose says whether the release is recorded.
#[derive(Clone, Copy, Debug)]
struct GiveBack {
    at_least: Duration,
    purpose: Purpose,
}

/// One held lock, as the table sees it.
struct Held {
    belief: Belief,
    timing: Timing,
    keep_alive: bool,
    give_back: GiveBack,
}

/// A term of ours to release before the name is campaigned for again.
struct Terms {
    ledger: Ledger,
    /// How the stale term is given back.
    give_back: GiveBack,
}

/// Everything a process knows about its locks.
#[derive(Default)]
struct Table {
    held: HashMap<String, Held>,
    /// Per name: the terms handed out and the stale one, while there is one.
    terms: HashMap<String, Terms>,
    /// Terms kept with `forget`: the next attempt for the name succeeds them (election mode),
    /// until the local instant at which they expire.
    kept: HashMap<String, (u64, Instant)>,
}

impl Table {
    /// Ends the belief of `name` in `term`, if it is the one held: it becomes stale until its
    /// release lands.
    fn end(&mut self, name: &str, term: u64) {
        if self.held.get(name).is_some_and(|h| h.belief.term() == term) {
            let held = self.held.remove(name).expect("checked");
            held.belief.end();
            self.mark_stale(name, term, held.give_back);
        }
    }

    /// Starts the belief in a newly granted `term` of `name`.
    fn hand_out(
        &mut self,
        name: &str,
        term: u64,
        deadline: Instant,
        timing: Timing,
        options: &LockOptions,
    ) -> View {
        if let Some(older) = self.held.get(name).map(|h| h.belief.term()) {
            // The database moved past a term this table still holds: that belief is over.
            self.end(name, older);
        }
        let terms = self.terms.entry(name.to_string()).or_insert_with(|| Terms {
            ledger: Ledger::default(),
            give_back: options.give_back(),
        });
        terms.ledger.handed_out(term);
        let (belief, view) = Belief::new(term, deadline);
        self.held.insert(
            name.to_string(),
            Held {
                belief,
                timing,
                keep_alive: options.keep_alive,
                give_back: options.give_back(),
            },
        );
        view
    }

    fn mark_stale(&mut self, name: &str, term: u64, give_back: GiveBack) {
        let entry = self.terms.entry(name.to_string()).or_insert_with(|| Terms {
            ledger: Ledger::default(),
            give_back,
        });
        entry.ledger.ended(term);
        entry.give_back = give_back;
    }

    /// Records that `term` of `name` is no longer ours in the database.
    fn gone(&mut self, name: &str, term: u64) {
        if let Some(t) = self.terms.get_mut(name) {
            t.ledger.gone(term);
            if t.ledger.is_idle() && !self.held.contains_key(name) {
                self.terms.remove(name);
            }
        }
    }

    fn stale(&self, name: &str) -> Option<(u64, GiveBack)> {
        let t = self.terms.get(name)?;
        t.ledger.stale().map(|term| (term, t.give_back))
    }
}

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
            at_least_ms: duration_ms(give_back.at_least),
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
        let timing = options.timing()?;
        let mut changes = self.inner.store.changes();
        let mut failed = None;
        loop {
            let (guard, retry) = transient(self.attempt(name, &options).await, &mut failed)?
                .unwrap_or((None, Retry::Poll));
            if guard.is_some() {
                return Ok(guard);
            }
            let now = Instant::now();
            if give_up.is_some_and(|g| now >= g) {
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
                () = changes.changed(|n| n == name) => {}
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

    /// One campaign for `name`: the guard if granted, else when to try again.
    async fn attempt(
        &self,
        name: &str,
        options: &LockOptions,
    ) -> Result<(Option<LockGuard>, Retry)> {
        validate::name(name)?;
        let timing = options.timing()?;
        let (stale, kept) = {
            let mut table = self.inner.table();
            if table.held.contains_key(name) {
                return Ok((None, Retry::Poll));
            }
            let now = Instant::now();
            let kept = table.kept.remove(name).filter(|(_, until)| *until > now);
            (table.stale(name), kept.map(|(term, _)| term))
        };
        if let Some((term, give_back)) = stale {
            // Ours, and maybe still held: give it back before asking for a new term, so that
            // the answer can never be about it.
            self.inner.release(name, term, give_back, None).await?;
        }
        let holder = self.inner.holder.clone();
        let ttl_ms = duration_ms(options.ttl);
        let op = match kept {
            Some(term) => Op::Succeed {
                candidate: holder.clone(),
                term,
                ttl_ms,
                purpose: options.purpose(),
            },
            None => Op::Campaign {
                candidate: holder.clone(),
                term: None,
                ttl_ms,
                metadata: None,
                purpose: options.purpose(),
            },
        };
        let sent = Instant::now();
        let answer = self
            .inner
            .store
            .with_timeout(timing.db_timeout())
            .apply_valid(name, &op, &holder)
            .await;
        let received = Instant::now();
        let applied = match answer {
            Ok(applied) => applied,
            Err(e) => {
                if let Some(term) = kept {
                    // Not known to have landed: the kept term may still be ours.
                    let until = received + timing.max_belief();
                    self.inner
                        .table()
                        .kept
                        .insert(name.to_string(), (term, until));
                }
                return Err(e);
            }
        };
        let Some(lease) = applied.lease.as_ref() else {
            return Ok((None, Retry::Poll));
        };
        let remaining = Duration::from_millis(lease.remaining_ms(applied.now));
        let later = if remaining.is_zero() {
            // Expired but blocked (paused, reserved for a handover): poll.
            Retry::Poll
        } else {
            Retry::WhenExpires(remaining)
        };
        let term = lease.term;
        match &applied.effect {
            Effect::Acquired { .. } => {}
            Effect::SteppedDown(_) => {
                // A kept term that must not continue (paused, handed over): give it back.
                if let Some(kept) = kept {
                    self.inner
                        .table()
                        .mark_stale(name, kept, options.give_back());
                    self.inner
                        .release(name, kept, options.give_back(), None)
                        .await?;
                }
                return Ok((None, Retry::Poll));
            }
            _ => {
                let ours = lease.holder.as_deref() == Some(holder.as_str())
                    && self
                        .inner
                        .table()
                        .stale(name)
                        .is_some_and(|(s, _)| s == term);
                if ours {
                    // Released meanwhile by another task of ours, not yet landed: the next
                    // attempt releases it first.
                    return Ok((None, Retry::Now));
                }
                return Ok((None, later));
            }
        }
        let deadline = deadline_for(&timing, &applied, sent, received);
        let granted = {
            let mut table = self.inner.table();
            let handed_out = table
                .terms
                .get(name)
                .is_some_and(|t| !t.ledger.may_hand_out(term));
            match deadline.filter(|_| !handed_out) {
                Some(deadline) => Some(table.hand_out(name, term, deadline, timing, options)),
                None => {
                    table.mark_stale(name, term, now_free(options));
                    None
                }
            }
        };
        let Some(view) = granted else {
            // Too late to believe (or, defensively, a term this process handed out before):
            // give it back; until that lands it is stale.
            if let Err(e) = self
                .inner
                .release(name, term, now_free(options), None)
                .await
            {
                tracing::warn!(name, term, error = %e, "giving back a lock term granted too late failed; it stays stale");
            }
            return Ok((None, Retry::Now));
        };
        self.inner.wake.notify_one();
        Ok((
            Some(LockGuard::new(
                self.inner.clone(),
                name,
                term,
                options.give_back(),
                view,
            )),
            Retry::Poll,
        ))
    }
}

/// When a waiting caller tries again after an attempt that did not get the lock.
#[derive(Clone, Copy, Debug)]
enum Retry {
    /// At once: a term of ours was in the way and is being given back.
    Now,
    /// When the holder's lease would expire (plus jitter), at most a renew interval from now.
    WhenExpires(Duration),
    /// After a renew interval (held by this process, paused, reserved, unknown).
    Poll,
}

/// A term granted too late to believe in, given back with no `at_least`: nobody used it.
fn now_free(options: &LockOptions) -> GiveBack {
    GiveBack {
        at_least: Duration::ZERO,
        purpose: options.purpose(),
    }
}

/// `next`, or `give_up` if that comes first.
fn until(next: Instant, give_up: Option<Instant>) -> Instant {
    give_up.map_or(next, |g| next.min(g))
}

/// A waiting caller retries after a timeout, a database error or a read-only server (a
/// failover may be under way; until it gives up, when the last such error is returned); other
/// errors end the wait at once.
fn transient<T>(result: Result<T>, failed: &mut Option<Error>) -> Result<Option<T>> {
    match result {
        Ok(answer) => {
            *failed = None;
            Ok(Some(answer))
        }
        Err(e @ (Error::Timeout(_) | Error::Database(_) | Error::ReadOnly { .. })) => {
            tracing::warn!(error = %e, "lock attempt failed; trying again");
            *failed = Some(e);
            Ok(None)
        }
        Err(e) => Err(e),
    }
}
