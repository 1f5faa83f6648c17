//! A backend wrapper that counts the calls made through it, to check how many database round
//! trips a feature costs.

use async_trait::async_trait;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tenure::backend::{
    Applied, Backend, BackendKind, HistoryEntry, RedactedUrl, Renewed, Snapshot,
};
use tenure::model::Op;

#[derive(Debug)]
pub struct Counting {
    pub inner: Arc<dyn Backend>,
    /// `apply` calls (one transaction each).
    pub applies: AtomicUsize,
    /// `renew_many` calls (one transaction each).
    pub batches: AtomicUsize,
    /// Leases carried by all `renew_many` calls.
    pub renewed_leases: AtomicUsize,
}

impl Counting {
    pub fn new(inner: Arc<dyn Backend>) -> Counting {
        Counting {
            inner,
            applies: AtomicUsize::new(0),
            batches: AtomicUsize::new(0),
            renewed_leases: AtomicUsize::new(0),
        }
    }

    pub fn applies(&self) -> usize {
        self.applies.load(Ordering::SeqCst)
    }

    pub fn batches(&self) -> usize {
        self.batches.load(Ordering::SeqCst)
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
        self.renewed_leases
            .fetch_add(leases.len(), Ordering::SeqCst);
        self.inner.renew_many(holder, leases).await
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
