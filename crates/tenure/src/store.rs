//! [`Store`]: the operations of DESIGN.md's table, validated and bounded by a timeout.

use crate::backend::{self, Applied, Backend, HistoryEntry, Snapshot, StoreOptions};
use crate::error::{Error, Result};
use crate::model::{DbTime, Effect, Lease, Op};
use crate::validate;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Who leads a name now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    pub name: String,
    pub holder: String,
    /// The fencing token of this tenure.
    pub term: u64,
    /// Database time at which this tenure began.
    pub since: DbTime,
    /// How long the lease has left, by the database's clock at the read.
    pub remaining: Duration,
    pub metadata: Option<String>,
}

impl LeaderInfo {
    /// The live holder of `lease` at `now`, if any.
    pub fn from_lease(lease: &Lease, now: DbTime) -> Option<LeaderInfo> {
        let holder = lease.live_holder(now)?;
        Some(LeaderInfo {
            name: lease.name.clone(),
            holder: holder.to_string(),
            term: lease.term,
            since: lease.acquired_at,
            remaining: Duration::from_millis(lease.remaining_ms(now)),
            metadata: lease.metadata.clone(),
        })
    }
}

/// What a watcher of a lease reports as a change: who leads (by the database's clock) or that
/// nobody does, the term, pause and handover, the leader's metadata (e.g. a new address), and
/// while nobody leads, until when nobody may start (`demote --now` cuts that short). Not the
/// countdown of the time left, nor the expiry a renewal pushes on.
///
/// Two reads of a lease changed in a way that matters when their keys differ; see
/// [`Lease::change_key`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeKey {
    holder: Option<String>,
    term: u64,
    paused: bool,
    handover_to: Option<String>,
    metadata: Option<String>,
    vacant_until: Option<DbTime>,
}

impl Lease {
    /// What of this lease, read at `now`, a watcher compares to see a change that matters.
    pub fn change_key(&self, now: DbTime) -> ChangeKey {
        let holder = self.live_holder(now).map(str::to_string);
        ChangeKey {
            vacant_until: holder.is_none().then_some(self.expires_at),
            holder,
            term: self.term,
            paused: self.paused,
            handover_to: self.handover_target().map(str::to_string),
            metadata: self.metadata.clone(),
        }
    }
}

/// A handle on tenure's tables in one database. Cheap to clone.
///
/// Every call validates its input, then runs with [`StoreOptions::timeout`]; a call that times
/// out returns [`Error::Timeout`] and its effect is unknown.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Arc<dyn Backend>,
    timeout: Duration,
}

impl Store {
    /// Connects to `url` with default options (see [`backend::connect`]).
    ///
    /// # Errors
    /// As [`backend::connect`].
    pub async fn connect(url: &str) -> Result<Store> {
        Store::connect_with(url, StoreOptions::default()).await
    }

    /// Connects to `url` with `options`.
    ///
    /// # Errors
    /// As [`backend::connect`], plus [`Error::Timeout`] if connecting (and creating the
    /// tables) takes longer than twice `options.timeout`, and at least 10 s.
    pub async fn connect_with(url: &str, options: StoreOptions) -> Result<Store> {
        options.validate()?;
        let timeout = options.timeout;
        let connect_bound = (timeout * 2).max(Duration::from_secs(10));
        let backend = bounded(connect_bound, backend::connect(url, &options)).await?;
        Ok(Store { backend, timeout })
    }

    /// Wraps an existing backend.
    pub fn from_backend(backend: Arc<dyn Backend>, timeout: Duration) -> Store {
        Store { backend, timeout }
    }

    /// The backend underneath.
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The per-call timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Applies a raw model operation (validated) with this store's timeout.
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad names or ids, [`Error::Timeout`], database errors.
    pub async fn apply(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        self.apply_within(self.timeout, name, op, actor).await
    }

    /// As [`apply`](Store::apply) with an explicit timeout.
    ///
    /// # Errors
    /// As [`apply`](Store::apply).
    pub async fn apply_within(
        &self,
        timeout: Duration,
        name: &str,
        op: &Op,
        actor: &str,
    ) -> Result<Applied> {
        validate::name(name)?;
        match op {
            Op::Campaign {
                candidate,
                metadata,
                ..
            } => {
                validate::candidate(candidate)?;
                if let Some(m) = metadata {
                    validate::metadata(m)?;
                }
            }
            Op::Release { candidate, .. }
            | Op::Renew { candidate, .. }
            | Op::Succeed { candidate, .. } => validate::candidate(candidate)?,
            Op::Handover { to, .. } => validate::candidate(to)?,
            Op::Demote { .. } | Op::Pause | Op::Resume => {}
        }
        bounded(timeout, self.backend.apply(name, op, actor)).await
    }

    /// Releases tenure `term` of `candidate`; nobody may acquire before
    /// `acquired_at + at_least`. A stale release changes nothing and returns
    /// [`Effect::NotHolder`].
    ///
    /// # Errors
    /// As [`apply`](Store::apply).
    pub async fn release(
        &self,
        name: &str,
        candidate: &str,
        term: u64,
        at_least: Duration,
    ) -> Result<Applied> {
        self.release_because(name, candidate, term, at_least, None)
            .await
    }

    /// As [`release`](Store::release), with `reason` as the history event's detail.
    ///
    /// # Errors
    /// As [`apply`](Store::apply).
    pub async fn release_because(
        &self,
        name: &str,
        candidate: &str,
        term: u64,
        at_least: Duration,
        reason: Option<&str>,
    ) -> Result<Applied> {
        let op = Op::Release {
            candidate: candidate.to_string(),
            term,
            at_least_ms: duration_ms(at_least),
            reason: reason.map(str::to_string),
        };
        self.apply(name, &op, candidate).await
    }

    /// Forces a re-election. The holder is removed but `expires_at` is kept, so nobody starts
    /// before the old holder has learned (lock-delay). `immediate` ends the lease now, which is
    /// unsafe unless writes are fenced.
    ///
    /// # Errors
    /// [`Error::UnknownName`], and as [`apply`](Store::apply).
    pub async fn demote(&self, name: &str, immediate: bool, actor: &str) -> Result<Applied> {
        self.admin(name, &Op::Demote { immediate }, actor).await
    }

    /// Hands the lease to `to`. Graceful by default: the holder steps down at its next renew,
    /// `to` may acquire at once, others only one ttl after the lease became free. `immediate`
    /// installs `to` with a new term now; the old holder may overlap for up to one renew
    /// interval, so this is unsafe unless writes are fenced. Neither variant lifts a pause.
    ///
    /// # Errors
    /// [`Error::UnknownName`] (also for a name that was paused but never held), and as
    /// [`apply`](Store::apply).
    pub async fn handover(
        &self,
        name: &str,
        to: &str,
        immediate: bool,
        actor: &str,
    ) -> Result<Applied> {
        let op = Op::Handover {
            to: to.to_string(),
            immediate,
        };
        self.admin(name, &op, actor).await
    }

    /// Pauses a name: its holder steps down at its next renew and nobody acquires until
    /// [`resume`](Store::resume). A name never used is created paused.
    ///
    /// # Errors
    /// As [`apply`](Store::apply).
    pub async fn pause(&self, name: &str, actor: &str) -> Result<Applied> {
        self.admin(name, &Op::Pause, actor).await
    }

    /// Ends a pause.
    ///
    /// # Errors
    /// [`Error::UnknownName`], and as [`apply`](Store::apply).
    pub async fn resume(&self, name: &str, actor: &str) -> Result<Applied> {
        self.admin(name, &Op::Resume, actor).await
    }

    async fn admin(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        let applied = self.apply(name, op, actor).await?;
        if applied.effect == Effect::UnknownName {
            return Err(Error::UnknownName(name.to_string()));
        }
        Ok(applied)
    }

    /// Who leads `name` now, if anyone.
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Timeout`], database errors.
    pub async fn leader(&self, name: &str) -> Result<Option<LeaderInfo>> {
        let snapshot = self.get(name).await?;
        Ok(snapshot
            .leases
            .first()
            .and_then(|l| LeaderInfo::from_lease(l, snapshot.now)))
    }

    /// The row of `name` (empty if never used) with the database's clock.
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Timeout`], database errors.
    pub async fn get(&self, name: &str) -> Result<Snapshot> {
        validate::name(name)?;
        bounded(self.timeout, self.backend.get(name)).await
    }

    /// Every name with its state.
    ///
    /// # Errors
    /// [`Error::Timeout`], database errors.
    pub async fn list(&self) -> Result<Snapshot> {
        bounded(self.timeout, self.backend.list()).await
    }

    /// The newest `limit` transitions of `name`, newest first.
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Timeout`], database errors.
    pub async fn history(&self, name: &str, limit: u32) -> Result<Vec<HistoryEntry>> {
        validate::name(name)?;
        bounded(self.timeout, self.backend.history(name, limit)).await
    }
}

/// Runs `fut` with a timeout that turns into [`Error::Timeout`].
pub(crate) async fn bounded<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(result) => result,
        Err(_) => Err(Error::Timeout(timeout)),
    }
}

pub(crate) fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, term: u64, expires: i64) -> Lease {
        Lease {
            name: "a".into(),
            holder: holder.map(str::to_string),
            term,
            acquired_at: DbTime(0),
            renewed_at: DbTime(0),
            expires_at: DbTime(expires),
            ttl_ms: 10_000,
            metadata: None,
            handover_to: None,
            paused: false,
        }
    }

    #[test]
    fn change_key_ignores_renewals_and_sees_what_matters() {
        let now = DbTime(50);
        let held = lease(Some("x"), 1, 100);
        // A renewal (a later expiry) and the countdown are not changes.
        assert_eq!(
            held.change_key(now),
            lease(Some("x"), 1, 150).change_key(now)
        );
        assert_eq!(held.change_key(now), held.change_key(DbTime(60)));
        // The holder's lease runs out by the database's clock: nobody leads any more.
        assert_ne!(held.change_key(now), held.change_key(DbTime(100)));
        assert_ne!(
            held.change_key(now),
            lease(Some("y"), 1, 100).change_key(now)
        );
        assert_ne!(
            held.change_key(now),
            lease(Some("x"), 2, 100).change_key(now)
        );
        let mut other = held.clone();
        other.paused = true;
        assert_ne!(held.change_key(now), other.change_key(now));
        let mut other = held.clone();
        other.metadata = Some("10.0.0.1:80".into());
        assert_ne!(held.change_key(now), other.change_key(now));
        let mut other = held.clone();
        other.handover_to = Some("y".into());
        assert_ne!(held.change_key(now), other.change_key(now));
        // While nobody leads, until when nobody may start matters (`demote --now` cuts it).
        let vacant = lease(None, 1, 100);
        assert_ne!(vacant.change_key(now), lease(None, 1, 60).change_key(now));
    }
}
