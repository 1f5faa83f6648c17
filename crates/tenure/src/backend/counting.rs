//! A [`Backend`] wrapper that counts the calls made through it, to see how many database
//! transactions a workload costs (on SQLite, the only counter there is).

use super::{Applied, Backend, BackendKind, HistoryEntry, RedactedUrl, Renewed, Snapshot};
use crate::error::Result;
use crate::model::{DbTime, Op};
use async_trait::async_trait;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::broadcast;

/// Wraps a backend and counts its calls; everything else passes through unchanged.
///
/// ```no_run
/// # async fn f() -> tenure::Result<()> {
/// use std::{sync::Arc, time::Duration};
/// use tenure::backend::{connect, CountingBackend};
/// use tenure::StoreOptions;
///
/// let inner = connect("sqlite::memory:", &StoreOptions::default()).await?;
/// let counting = Arc::new(CountingBackend::new(inner));
/// let store = tenure::Store::from_backend(counting.clone(), Duration::from_secs(5));
/// let before = counting.counts();
/// // … run the workload on `store` …
/// let spent = counting.counts().since(before);
/// println!("{} transactions, {} batched renewals", spent.applies, spent.batches);
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct CountingBackend {
    inner: Arc<dyn Backend>,
    applies: AtomicU64,
    batches: AtomicU64,
    renewed: AtomicU64,
    reads: AtomicU64,
    transactions: AtomicU64,
    slowest_batch_us: AtomicU64,
}

/// The counters of a [`CountingBackend`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// `apply` calls: one transaction each (campaign, renew, release, admin operations).
    pub applies: u64,
    /// `renew_many` calls: one transaction each, however many leases it carries.
    pub batches: u64,
    /// Leases carried by the `renew_many` calls.
    pub renewed: u64,
    /// Reads: `get`, `list` and `history` calls.
    pub reads: u64,
    /// `transaction` calls: the layers' transactions, one each however many statements it
    /// runs.
    pub transactions: u64,
}

impl Counts {
    /// What was counted between `before` and `self`.
    pub fn since(self, before: Counts) -> Counts {
        Counts {
            applies: self.applies - before.applies,
            batches: self.batches - before.batches,
            renewed: self.renewed - before.renewed,
            reads: self.reads - before.reads,
            transactions: self.transactions - before.transactions,
        }
    }
}

impl CountingBackend {
    /// Counts the calls made to `inner` through the returned backend.
    pub fn new(inner: Arc<dyn Backend>) -> CountingBackend {
        CountingBackend {
            inner,
            applies: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            renewed: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            transactions: AtomicU64::new(0),
            slowest_batch_us: AtomicU64::new(0),
        }
    }

    /// The counters now.
    pub fn counts(&self) -> Counts {
        Counts {
            applies: self.applies.load(Ordering::SeqCst),
            batches: self.batches.load(Ordering::SeqCst),
            renewed: self.renewed.load(Ordering::SeqCst),
            reads: self.reads.load(Ordering::SeqCst),
            transactions: self.transactions.load(Ordering::SeqCst),
        }
    }

    /// The longest `renew_many` call so far, and starts measuring afresh.
    pub fn take_slowest_batch(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.slowest_batch_us.swap(0, Ordering::SeqCst))
    }
}

#[async_trait]
impl Backend for CountingBackend {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn url(&self) -> &RedactedUrl {
        self.inner.url()
    }
    async fn apply(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        self.applies.fetch_add(1, Ordering::SeqCst);
        self.inner.apply(name, op, actor).await
    }
    async fn transaction(&self, body: &mut dyn super::tx::Body) -> Result<()> {
        self.transactions.fetch_add(1, Ordering::SeqCst);
        self.inner.transaction(body).await
    }
    async fn renew_many(&self, holder: &str, leases: &[(String, u64)]) -> Result<Renewed> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.renewed
            .fetch_add(leases.len() as u64, Ordering::SeqCst);
        let started = Instant::now();
        let renewed = self.inner.renew_many(holder, leases).await;
        let us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        self.slowest_batch_us.fetch_max(us, Ordering::SeqCst);
        renewed
    }
    async fn last_tick(&self, name: &str) -> Result<(Option<i64>, DbTime)> {
        self.inner.last_tick(name).await
    }
    async fn complete_tick(
        &self,
        name: &str,
        holder: &str,
        term: u64,
        tick_ms: i64,
    ) -> Result<bool> {
        self.inner.complete_tick(name, holder, term, tick_ms).await
    }
    async fn get(&self, name: &str) -> Result<Snapshot> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.get(name).await
    }
    async fn list(&self) -> Result<Snapshot> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.list().await
    }
    async fn history(&self, name: &str, limit: u32) -> Result<Vec<HistoryEntry>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.history(name, limit).await
    }
    async fn migrate(&self) -> Result<()> {
        self.inner.migrate().await
    }
    async fn check_schema(&self) -> Result<()> {
        self.inner.check_schema().await
    }
    fn schema_sql(&self) -> String {
        self.inner.schema_sql()
    }
    fn fence_sql(&self) -> Option<String> {
        self.inner.fence_sql()
    }
    fn transaction_pooler(&self) -> bool {
        self.inner.transaction_pooler()
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        self.inner.subscribe()
    }

    fn discard_connections(&self) {
        self.inner.discard_connections()
    }

    async fn close(&self) {
        self.inner.close().await;
    }
}
