//! A backend wrapper whose calls hang while it is stalled, as a member's database calls do
//! behind a network partition: each call waits at the gate until the stall ends (or the
//! store's timeout gives up on it), then passes through.

use async_trait::async_trait;
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::{Backend, Renewed, TransactionBody};
use tenure::{Applied, BackendKind, DbTime, HistoryEntry, Op, RedactedUrl, Snapshot, Store};
use tokio::sync::{broadcast, watch};

#[derive(Debug)]
pub(crate) struct StallingBackend {
    inner: Arc<dyn Backend>,
    stalled: watch::Receiver<bool>,
}

/// A store on `store`'s backend whose calls hang while the returned switch is `true`.
pub(crate) fn stalling(store: &Store) -> (watch::Sender<bool>, Store) {
    let (switch, stalled) = watch::channel(false);
    let backend = StallingBackend {
        inner: store.backend().clone(),
        stalled,
    };
    (
        switch,
        Store::from_backend(Arc::new(backend), Duration::from_secs(10)),
    )
}

impl StallingBackend {
    async fn gate(&self) {
        let mut stalled = self.stalled.clone();
        while *stalled.borrow_and_update() {
            if stalled.changed().await.is_err() {
                return;
            }
        }
    }
}

#[async_trait]
impl Backend for StallingBackend {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn url(&self) -> &RedactedUrl {
        self.inner.url()
    }
    async fn apply(&self, name: &str, op: &Op, actor: &str) -> tenure::Result<Applied> {
        self.gate().await;
        self.inner.apply(name, op, actor).await
    }
    async fn transaction(&self, body: &mut dyn TransactionBody) -> tenure::Result<()> {
        self.gate().await;
        self.inner.transaction(body).await
    }
    async fn renew_many(&self, holder: &str, leases: &[(String, u64)]) -> tenure::Result<Renewed> {
        self.gate().await;
        self.inner.renew_many(holder, leases).await
    }
    async fn last_tick(&self, name: &str) -> tenure::Result<(Option<i64>, DbTime)> {
        self.gate().await;
        self.inner.last_tick(name).await
    }
    async fn complete_tick(
        &self,
        name: &str,
        holder: &str,
        term: u64,
        tick_ms: i64,
    ) -> tenure::Result<bool> {
        self.gate().await;
        self.inner.complete_tick(name, holder, term, tick_ms).await
    }
    async fn get(&self, name: &str) -> tenure::Result<Snapshot> {
        self.gate().await;
        self.inner.get(name).await
    }
    async fn list(&self) -> tenure::Result<Snapshot> {
        self.gate().await;
        self.inner.list().await
    }
    async fn history(&self, name: &str, limit: u32) -> tenure::Result<Vec<HistoryEntry>> {
        self.gate().await;
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
    fn fence_sql(&self) -> Option<String> {
        self.inner.fence_sql()
    }
    fn transaction_pooler(&self) -> bool {
        self.inner.transaction_pooler()
    }
    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        self.inner.subscribe()
    }
}
