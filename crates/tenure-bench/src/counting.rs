//! A `tenure::Backend` that counts the calls made through it (and times the batched renewals),
//! for the scale benchmarks — the only counter SQLite has.

use async_trait::async_trait;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tenure::backend::{
    Applied, Backend, BackendKind, HistoryEntry, RedactedUrl, Renewed, Snapshot,
};
use tenure::model::Op;

#[derive(Debug)]
pub struct Counting {
    inner: Arc<dyn Backend>,
    /// `apply` calls: one transaction each (campaign, release, …).
    pub applies: AtomicU64,
    /// `renew_many` calls: one transaction each.
    pub batches: AtomicU64,
    /// Leases carried by the `renew_many` calls.
    pub renewed: AtomicU64,
    /// The longest `renew_many` call, in microseconds.
    pub slowest_batch_us: AtomicU64,
}

/// A snapshot of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub applies: u64,
    pub batches: u64,
    pub renewed: u64,
}

impl Counts {
    pub fn since(self, before: Counts) -> Counts {
        Counts {
            applies: self.applies - before.applies,
            batches: self.batches - before.batches,
            renewed: self.renewed - before.renewed,
        }
    }
}

impl Counting {
    pub fn new(inner: Arc<dyn Backend>) -> Counting {
        Counting {
            inner,
            applies: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            renewed: AtomicU64::new(0),
            slowest_batch_us: AtomicU64::new(0),
        }
    }

    pub fn counts(&self) -> Counts {
        Counts {
            applies: self.applies.load(Ordering::SeqCst),
            batches: self.batches.load(Ordering::SeqCst),
            renewed: self.renewed.load(Ordering::SeqCst),
        }
    }
}

#[async_trait]
impl Backend for Counting {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn url(&self) -> &RedactedUrl {
        self.inner.url()
    }
    async fn apply(&self, name: &str, op: &Op, actor: &str) -> tenure::Result<Applied> {
        self.applies.fetch_add(1, Ordering::SeqCst);
        self.inner.apply(name, op, actor).await
    }
    async fn renew_many(&self, holder: &str, leases: &[(String, u64)]) -> tenure::Result<Renewed> {
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.renewed
            .fetch_add(leases.len() as u64, Ordering::SeqCst);
        let t0 = Instant::now();
        let out = self.inner.renew_many(holder, leases).await;
        let us = t0.elapsed().as_micros() as u64;
        self.slowest_batch_us.fetch_max(us, Ordering::SeqCst);
        out
    }
    async fn last_tick(&self, name: &str) -> tenure::Result<(Option<i64>, tenure::DbTime)> {
        self.inner.last_tick(name).await
    }
    async fn complete_tick(
        &self,
        name: &str,
        holder: &str,
        term: u64,
        tick_ms: i64,
    ) -> tenure::Result<bool> {
        self.inner.complete_tick(name, holder, term, tick_ms).await
    }
    async fn get(&self, name: &str) -> tenure::Result<Snapshot> {
        self.inner.get(name).await
    }
    async fn list(&self) -> tenure::Result<Snapshot> {
        self.inner.list().await
    }
    async fn history(&self, name: &str, limit: u32) -> tenure::Result<Vec<HistoryEntry>> {
        self.inner.history(name, limit).await
    }
    async fn migrate(&self) -> tenure::Result<()> {
        self.inner.migrate().await
    }
    async fn check_schema(&self) -> tenure::Result<()> {
        self.inner.check_schema().await
    }
    fn schema_sql(&self) -> String {
        self.inner.schema_sql()
    }
    fn subscribe(&self) -> Option<tokio::sync::broadcast::Receiver<String>> {
        self.inner.subscribe()
    }
}
