//! [`Store`]: the operations of the lease model (the operations table of
//! `docs/design-notes.md`), validated and bounded by a timeout.

use crate::backend::tx::{Body, Schema};
use crate::backend::{
    self, Applied, Backend, BackendKind, HistoryEntry, RedactedUrl, Renewed, Snapshot, StoreOptions,
};
use crate::changes::Changes;
use crate::error::{is_connection_lost, is_missing_column, is_missing_table, Error, Result};
use crate::fence::Fence;
use crate::model::{DbTime, Effect, Op, Purpose};
use crate::records::LeaderInfo;
use crate::telemetry;
use crate::validate;
use tables::{missing, tables};
#[cfg(feature = "testing")]
mod among;
mod tables;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime};
use tracing::Instrument;

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
    /// Connects to `url` with `options` and creates (or, with
    /// [`auto_create`](StoreOptions::auto_create) off, checks) the tables of the lease and of
    /// `layers`. `Store::connect_with` (in `layers.rs`) passes every layer compiled in.
    pub(crate) async fn open(
        url: &str,
        options: StoreOptions,
        layers: &[&'static Schema],
    ) -> Result<Store> {
        options.validate()?;
        let timeout = options.timeout;
        let connect_bound = (timeout * 2).max(Duration::from_secs(10));
        bounded(connect_bound, async {
            let backend = backend::connect(url, &options).await?;
            tables(&*backend, layers, options.auto_create).await?;
            Ok(Store::from_backend(backend, timeout))
        })
        .await
    }

    /// Wraps a backend connected by hand (e.g. a
    /// [`PostgresBackend`](crate::backend::postgres::PostgresBackend) kept for fencing), whose
    /// calls are then bounded by `timeout`.
    ///
    /// This creates no table: [`backend::connect`] prepares only the lease's, and the tables
    /// of the layers built on it (the candidate registry every elector campaigns in, and the
    /// others compiled in; [`schema_script`](crate::schema_script) prints them all) are the
    /// store's. Call [`migrate`](Store::migrate) (or [`check_schema`](Store::check_schema))
    /// once before use; until then a feature's call is refused with [`Error::SchemaMissing`].
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

    /// Closes the store's connections (those of every clone: they share them; PostgreSQL's
    /// LISTEN connection and waiting mark included) and waits until each is closed. Call it last, after every guard is released, before the process exits:
    /// then nothing of tenure runs on behind it (SQLite's worker threads answer their last
    /// command first, so their spans end before an exporter is shut down). Later calls fail.
    pub async fn close(&self) {
        self.backend.close().await;
    }

    /// Creates the tables of the lease and of `layers` where they do not exist, and records
    /// the schema version (`Store::migrate` passes every layer compiled in).
    pub(crate) async fn migrate_with(&self, layers: &[&'static Schema]) -> Result<()> {
        self.bounded("migrate", self.backend.migrate()).await?;
        self.bounded("tables", tables(&*self.backend, layers, true))
            .await
    }

    /// Checks the tables of the lease and of `layers` (`Store::check_schema` passes every
    /// layer compiled in).
    pub(crate) async fn check_schema_with(&self, layers: &[&'static Schema]) -> Result<()> {
        self.bounded("check_schema", self.backend.check_schema())
            .await?;
        self.bounded("tables", tables(&*self.backend, layers, false))
            .await
    }

    /// Runs `body` in one transaction (see `backend/tx.rs`), bounded by this handle's timeout:
    /// the door of the features built on the lease rules.
    ///
    /// A feature whose table does not exist (a store wrapped by hand with
    /// [`from_backend`](Store::from_backend) and never migrated), or lacks a column an older
    /// build did not create, is refused with [`Error::SchemaMissing`] naming the table (or
    /// the column), not a database error repeated at every call.
    pub(crate) async fn transaction(&self, body: &mut dyn Body) -> Result<()> {
        let (op, sent) = (body.op(), SystemTime::now());
        let span = telemetry::call_span(op, body.name(), None);
        let ran = self
            .bounded_in(op, &span, self.backend.transaction(body))
            .await;
        if let Some(term) = body.term() {
            span.record("term", term);
        }
        if let Some(db_now) = body.db_now().filter(|_| ran.is_ok()) {
            telemetry::clock_offset(db_now, sent, SystemTime::now());
        }
        match (ran, body.schema()) {
            (Err(Error::Database(e)), Some(schema))
                if is_missing_table(&e) || is_missing_column(&e) =>
            {
                match self
                    .bounded("check_schema", missing(&*self.backend, schema))
                    .await
                {
                    Ok(Some(table)) => Err(Error::SchemaMissing {
                        table,
                        url: self.url().to_string(),
                    }),
                    _ => Err(Error::Database(e)),
                }
            }
            (other, _) => other,
        }
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
        Changes::new(self.backend.subscribe())
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

    /// Applies a raw campaign with a [`Standing`](crate::model::Standing) among given rivals,
    /// in one transaction, as the candidate registry's campaigns run it (only with the
    /// `testing` feature: the model-based test compares the backends with the model's
    /// `decide_among` through it).
    ///
    /// # Errors
    /// As [`apply`](Store::apply).
    #[cfg(feature = "testing")]
    pub async fn apply_among(
        &self,
        name: &str,
        op: &Op,
        actor: &str,
        standing: &crate::model::Standing<'_>,
    ) -> Result<Applied> {
        validate_op(name, op)?;
        let mut body = among::Among {
            name,
            op,
            actor,
            standing,
            applied: None,
        };
        self.transaction(&mut body).await?;
        Ok(body.applied.expect("a committed transaction ran its body"))
    }

    /// Applies `op`, whose name and ids were validated when its caller was built.
    pub(crate) async fn apply_valid(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        debug_assert!(
            validate_op(name, op).is_ok(),
            "unvalidated {op:?} on {name:?}"
        );
        let sent = SystemTime::now();
        let label = telemetry::op_label(op);
        let span = telemetry::call_span(label, Some(name), telemetry::op_term(op));
        let applied = self
            .bounded_in(label, &span, self.backend.apply(name, op, actor))
            .await?;
        if let Some(lease) = &applied.lease {
            span.record("term", lease.term);
        }
        telemetry::clock_offset(applied.now, sent, SystemTime::now());
        Ok(applied)
    }

    /// Renews the tenures `leases` of `holder` in one transaction (the locks' keep-alive).
    pub(crate) async fn renew_many(
        &self,
        holder: &str,
        leases: &[(String, u64)],
    ) -> Result<Renewed> {
        let sent = SystemTime::now();
        let span = telemetry::call_span("renew_many", None, None);
        span.record("locks", leases.len());
        let renewed = self
            .bounded_in("renew_many", &span, self.backend.renew_many(holder, leases))
            .await?;
        telemetry::clock_offset(renewed.now, sent, SystemTime::now());
        Ok(renewed)
    }

    /// The last completed tick of schedule `name`, with the database's clock.
    pub(crate) async fn last_tick(&self, name: &str) -> Result<(Option<i64>, DbTime)> {
        self.bounded("last_tick", self.backend.last_tick(name))
            .await
    }

    /// Records tick `tick_ms` of `name` as completed, fenced by `holder`'s `term`.
    pub(crate) async fn complete_tick(
        &self,
        name: &str,
        holder: &str,
        term: u64,
        tick_ms: i64,
    ) -> Result<bool> {
        self.bounded(
            "complete_tick",
            self.backend.complete_tick(name, holder, term, tick_ms),
        )
        .await
    }

    /// Releases tenure `term` of `candidate`; nobody may acquire before
    /// `acquired_at + at_least`. A stale release changes nothing and returns
    /// [`Effect::NotHolder`].
    ///
    /// # Errors
    /// [`Error::Invalid`] for bad names or ids and for an `at_least` beyond
    /// [`MAX_DURATION`](crate::validate::MAX_DURATION) (nothing is released),
    /// [`Error::Timeout`], database errors.
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
            at_least_ms: validate::duration_ms("at least", at_least)?,
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
        self.bounded("get", self.backend.get(name)).await
    }

    /// Every name with its state.
    ///
    /// # Errors
    /// [`Error::Timeout`], database errors.
    pub async fn list(&self) -> Result<Snapshot> {
        self.bounded("list", self.backend.list()).await
    }

    /// The newest `limit` recorded transitions of `name`, newest first: every transition of an
    /// election; of a lock only its notable ones unless it records every cycle (see
    /// [`Purpose`]).
    ///
    /// # Errors
    /// [`Error::Invalid`], [`Error::Timeout`], database errors.
    pub async fn history(&self, name: &str, limit: u32) -> Result<Vec<HistoryEntry>> {
        validate::name(name)?;
        self.bounded("history", self.backend.history(name, limit))
            .await
    }
}

/// Checks the name and every id of `op`.
pub(crate) fn validate_op(name: &str, op: &Op) -> Result<()> {
    validate::name(name)?;
    match op {
        Op::Campaign {
            candidate,
            metadata,
            ttl_ms,
            ..
        } => {
            validate::candidate(candidate)?;
            validate::stored_ms("ttl", *ttl_ms)?;
            if let Some(m) = metadata {
                validate::metadata(m)?;
            }
        }
        Op::Succeed {
            candidate, ttl_ms, ..
        } => {
            validate::candidate(candidate)?;
            validate::stored_ms("ttl", *ttl_ms)?;
        }
        Op::Release {
            candidate,
            at_least_ms,
            ..
        } => {
            validate::candidate(candidate)?;
            validate::stored_ms("at least", *at_least_ms)?;
        }
        Op::Renew { candidate, .. } => validate::candidate(candidate)?,
        Op::Handover { to, .. } => validate::candidate(to)?,
        Op::Demote { .. } | Op::Pause | Op::Resume => {}
    }
    Ok(())
}

impl Store {
    /// Runs a call of the backend with this store's timeout. After a timeout, a read-only
    /// answer or a lost connection (`is_connection_lost`: a restart, a killed session) the
    /// connections open now may lead to the wrong server (a failover) or be as dead: the backend
    /// stops using them, and it is told so before the timed-out call is dropped, so that the
    /// connection that call held is closed rather than taken back into the pool.
    ///
    /// Every call passes here, so here it is recorded (`telemetry.rs`): its round trip and
    /// outcome under the label `op`.
    async fn bounded<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let span = telemetry::call_span(op, None, None);
        self.bounded_in(op, &span, fut).await
    }

    /// [`bounded`](Store::bounded) in the call's `span` (`telemetry::call_span`).
    async fn bounded_in<T>(
        &self,
        op: &'static str,
        span: &tracing::Span,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let discard = || self.backend.discard_connections();
        let started = tokio::time::Instant::now();
        let result = bounded_then(self.timeout, fut, discard)
            .instrument(span.clone())
            .await;
        telemetry::round_trip(op, started.elapsed(), &result, span);
        let lost = result.as_ref().err().is_some_and(is_connection_lost);
        if lost || matches!(result, Err(Error::ReadOnly { .. })) {
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
