//! [`Store`]: the operations of the lease model (the operations table of
//! `docs/design-notes.md`), validated and bounded by a timeout.

use crate::backend::{
    self, Applied, Backend, BackendKind, HistoryEntry, RedactedUrl, Renewed, Snapshot, StoreOptions,
};
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::model::{DbTime, Effect, Lease, Op, Purpose};
use crate::validate;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// Who leads a name now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The lease's name.
    pub name: String,
    /// The candidate id of the leader.
    pub holder: String,
    /// The fencing token of this tenure.
    pub term: u64,
    /// Database time at which this tenure began.
    pub since: DbTime,
    /// How long the lease has left, by the database's clock at the read.
    pub remaining: Duration,
    /// What the leader published (e.g. its address).
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

/// A handle on tenure's tables in one database: the one door to them. Cheap to clone.
///
/// Every call is bounded by the handle's timeout ([`StoreOptions::timeout`], or the one given
/// to [`with_timeout`](Store::with_timeout)); a call that times out returns
/// [`Error::Timeout`] and its effect is unknown. The public calls validate their input; the
/// elector, locks and schedules validate theirs once, when they are built, and call through
/// the crate-private doors below.
#[derive(Clone, Debug)]
pub struct Store {
    backend: Arc<dyn Backend>,
    timeout: Duration,
    /// The backend's fence, read once.
    fence: Option<Fence>,
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
        Ok(Store::from_backend(backend, timeout))
    }

    /// Wraps a backend connected by hand (e.g. a
    /// [`PostgresBackend`](crate::backend::postgres::PostgresBackend) kept for fencing), whose
    /// calls are then bounded by `timeout`.
    pub fn from_backend(backend: Arc<dyn Backend>, timeout: Duration) -> Store {
        let fence = backend.fence_sql().map(|sql| Fence {
            kind: backend.kind(),
            sql: sql.into(),
            persistent: !backend.transaction_pooler(),
        });
        Store {
            backend,
            timeout,
            fence,
        }
    }

    /// The backend underneath (only with the `testing` feature: everything else goes through
    /// the store).
    #[cfg(feature = "testing")]
    pub fn backend(&self) -> &Arc<dyn Backend> {
        &self.backend
    }

    /// The bound on each call of this handle.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The same store, its calls bounded by `timeout` (an elector's or a lock's
    /// [`Timing::db_timeout`](crate::Timing::db_timeout)).
    pub fn with_timeout(&self, timeout: Duration) -> Store {
        Store {
            backend: self.backend.clone(),
            timeout,
            fence: self.fence.clone(),
        }
    }

    /// Which database engine this store talks to.
    pub fn kind(&self) -> BackendKind {
        self.backend.kind()
    }

    /// The database URL, with any password replaced.
    pub fn url(&self) -> &RedactedUrl {
        self.backend.url()
    }

    /// Creates the tables if they do not exist and records the schema version.
    ///
    /// # Errors
    /// [`Error::Timeout`], database errors.
    pub async fn migrate(&self) -> Result<()> {
        self.bounded(self.backend.migrate()).await
    }

    /// Checks that the tables exist with a schema version this build understands.
    ///
    /// # Errors
    /// [`Error::SchemaMissing`], [`Error::Timeout`], database errors.
    pub async fn check_schema(&self) -> Result<()> {
        self.bounded(self.backend.check_schema()).await
    }

    /// The DDL that [`migrate`](Store::migrate) runs, for a DBA to apply by hand.
    pub fn schema_sql(&self) -> String {
        self.backend.schema_sql()
    }

    /// The fence statement of this store's database, with its table name (what `tenure
    /// fence-sql` prints): parameters name, holder, term in that order; one row means the
    /// tenure is still held and a takeover now waits for the caller's commit, no row means roll
    /// back. `None` for a backend without an SQL lease table.
    pub fn fence_sql(&self) -> Option<&str> {
        self.fence.as_ref().map(|f| &*f.sql)
    }

    pub(crate) fn fence(&self) -> Option<&Fence> {
        self.fence.as_ref()
    }

    /// Changed leases as the database pushes them (PostgreSQL LISTEN/NOTIFY; on a SQLite file,
    /// its doorbell), from now on.
    pub fn changes(&self) -> Changes {
        Changes {
            rx: self.backend.subscribe(),
        }
    }

    /// Applies a raw model operation, validated, with this store's timeout (only with the
    /// `testing` feature: applications use the named operations).
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad names or ids, [`Error::Timeout`], database errors.
    #[cfg(feature = "testing")]
    pub async fn apply(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        validate_op(name, op)?;
        self.apply_valid(name, op, actor).await
    }

    /// Applies `op`, whose name and ids were validated when its caller was built.
    pub(crate) async fn apply_valid(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        debug_assert!(
            validate_op(name, op).is_ok(),
            "unvalidated {op:?} on {name:?}"
        );
        self.bounded(self.backend.apply(name, op, actor)).await
    }

    /// Renews the tenures `leases` of `holder` in one transaction (the locks' keep-alive).
    pub(crate) async fn renew_many(
        &self,
        holder: &str,
        leases: &[(String, u64)],
    ) -> Result<Renewed> {
        self.bounded(self.backend.renew_many(holder, leases)).await
    }

    /// The last completed tick of schedule `name`, with the database's clock.
    pub(crate) async fn last_tick(&self, name: &str) -> Result<(Option<i64>, DbTime)> {
        self.bounded(self.backend.last_tick(name)).await
    }

    /// Records tick `tick_ms` of `name` as completed, fenced by `holder`'s `term`.
    pub(crate) async fn complete_tick(
        &self,
        name: &str,
        holder: &str,
        term: u64,
        tick_ms: i64,
    ) -> Result<bool> {
        self.bounded(self.backend.complete_tick(name, holder, term, tick_ms))
            .await
    }

    /// Releases tenure `term` of `candidate`; nobody may acquire before
    /// `acquired_at + at_least`. A stale release changes nothing and returns
    /// [`Effect::NotHolder`].
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad names or ids, [`Error::Timeout`], database errors.
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
    /// As [`release`](Store::release).
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
            purpose: Purpose::Election,
        };
        validate_op(name, &op)?;
        self.apply_valid(name, &op, candidate).await
    }

    /// Forces a re-election. The holder is removed but `expires_at` is kept, so nobody starts
    /// before the old holder has learned (lock-delay). `immediate` ends the lease now, which is
    /// unsafe unless writes are fenced.
    ///
    /// # Errors
    /// [`Error::UnknownName`], and as [`release`](Store::release).
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
    /// [`release`](Store::release).
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
    /// As [`release`](Store::release).
    pub async fn pause(&self, name: &str, actor: &str) -> Result<Applied> {
        self.admin(name, &Op::Pause, actor).await
    }

    /// Ends a pause.
    ///
    /// # Errors
    /// [`Error::UnknownName`], and as [`release`](Store::release).
    pub async fn resume(&self, name: &str, actor: &str) -> Result<Applied> {
        self.admin(name, &Op::Resume, actor).await
    }

    async fn admin(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        validate_op(name, op)?;
        let applied = self.apply_valid(name, op, actor).await?;
        if applied.effect == Effect::UnknownName {
            return Err(Error::UnknownName(name.to_string()));
        }
        Ok(applied)
    }

    /// Who leads `name` now, if anyone (one read; to wait until this process leads, see
    /// [`Elector::wait_until_leader`](crate::Elector::wait_until_leader)).
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
        self.bounded(self.backend.get(name)).await
    }

    /// Every name with its state.
    ///
    /// # Errors
    /// [`Error::Timeout`], database errors.
    pub async fn list(&self) -> Result<Snapshot> {
        self.bounded(self.backend.list()).await
    }

    /// Runs one request of the Consul layer (sessions and keys with locks; see
    /// [`consul`](crate::consul)) in one transaction, bounded by the store's timeout. `actor`
    /// goes into the history of the leases it changes. Keys, session specs and value sizes are
    /// checked first.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a bad key, spec or value (nothing is written);
    /// [`Error::Consul`] for a request the rules refuse (an invalid session); database errors
    /// and [`Error::Timeout`], after which the effect is unknown.
    pub async fn consul(
        &self,
        request: &crate::consul::Request,
        actor: &str,
    ) -> Result<crate::consul::Answer> {
        use crate::consul::{validate_key, validate_prefix, validate_spec, Request};
        match request {
            Request::CreateSession { spec, .. } => validate_spec(spec)?,
            Request::Get { key, recurse } | Request::Delete { key, recurse, .. } => {
                if *recurse {
                    validate_prefix(key)?
                } else {
                    validate_key(key)?
                }
            }
            Request::Put { key, value, .. } => {
                validate_key(key)?;
                if value.len() > crate::consul::MAX_VALUE_BYTES {
                    return Err(Error::Invalid {
                        what: "value",
                        value: format!("{} bytes", value.len()),
                        rule: "at most 512 KiB (524288 bytes)",
                    });
                }
            }
            _ => {}
        }
        self.bounded(self.backend.consul(request, actor)).await
    }

    /// The newest `limit` recorded transitions of `name`, newest first: every transition of an
    /// election; of a lock only its notable ones unless it records every cycle (see
    /// [`Purpose`]).
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Timeout`], database errors.
    pub async fn history(&self, name: &str, limit: u32) -> Result<Vec<HistoryEntry>> {
        validate::name(name)?;
        self.bounded(self.backend.history(name, limit)).await
    }
}

/// The name a wake-up carries when it cannot say which lease changed (SQLite's doorbell, after
/// it may have missed a ring): every listener looks again. A control character, so never a
/// lease's name.
pub(crate) const ANY: &str = "\0";

/// Changed leases as the database pushes them; see [`Store::changes`].
#[derive(Debug)]
pub struct Changes {
    rx: Option<broadcast::Receiver<String>>,
}

impl Changes {
    /// Forgets the notifications that arrived so far (a read that follows sees their changes).
    pub fn skip_pending(&mut self) {
        use broadcast::error::TryRecvError;
        while let Some(rx) = &mut self.rx {
            match rx.try_recv() {
                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Closed) => self.rx = None,
            }
        }
    }

    /// Completes when a lease whose name `matches` changed, or when some notifications may
    /// have been lost (so that the caller looks again); never, where the database cannot push.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn changed(&mut self, matches: impl Fn(&str) -> bool) {
        let Some(rx) = &mut self.rx else {
            return std::future::pending().await;
        };
        loop {
            match rx.recv().await {
                Ok(name) if name == ANY || matches(&name) => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => {
                    self.rx = None;
                    return std::future::pending().await;
                }
            }
        }
    }
}

/// Checks the name and every id of `op`.
pub(crate) fn validate_op(name: &str, op: &Op) -> Result<()> {
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
    Ok(())
}

impl Store {
    /// Runs a call of the backend with this store's timeout. After a timeout or a read-only
    /// answer the connections open now may lead to the wrong server (a failover): the backend
    /// stops using them, and it is told so before the timed-out call is dropped, so that the
    /// connection that call held is closed rather than taken back into the pool.
    async fn bounded<T>(&self, fut: impl Future<Output = Result<T>>) -> Result<T> {
        let discard = || self.backend.discard_connections();
        let result = bounded_then(self.timeout, fut, discard).await;
        if matches!(result, Err(Error::ReadOnly { .. })) {
            discard();
        }
        result
    }
}

/// Runs `fut` with a timeout that turns into [`Error::Timeout`].
async fn bounded<T>(timeout: Duration, fut: impl Future<Output = Result<T>>) -> Result<T> {
    bounded_then(timeout, fut, || ()).await
}

/// [`bounded`], calling `on_timeout` while the timed-out `fut` still exists.
async fn bounded_then<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T>>,
    on_timeout: impl FnOnce(),
) -> Result<T> {
    let mut fut = std::pin::pin!(fut);
    tokio::select! {
        biased;
        result = &mut fut => result,
        () = tokio::time::sleep(timeout) => {
            on_timeout();
            Err(Error::Timeout(timeout))
        }
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
