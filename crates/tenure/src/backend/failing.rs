//! A [`Backend`] wrapper whose layer transactions fail half-way, as a connection that drops
//! in the middle of one does: while armed, every transaction of one kind (its body's `op`,
//! the label of the store's round trip) fails at its `n`-th call on the seam (the
//! clock, a statement, a lease operation), before that call reaches the database, and is
//! rolled back — to show that a layer leaves no half-written state and believes nothing it
//! did not commit. The failure is a dropped connection ([`fail_at`](FailingBackend::fail_at):
//! whether the transaction committed is unknown) or the server's refusal of a statement
//! ([`refuse_at`](FailingBackend::refuse_at): the connection lives, nothing committed). It
//! can also hold a transaction open after its body ran (uncommitted, its locks and rows in
//! place) until told to let go, to race another transaction against it.

use super::tx::{Arg, BackendKind, Body, Dialect, Outcome, Row, Tx};
use super::{Applied, Backend, HistoryEntry, RedactedUrl, Renewed, Snapshot};
use crate::backend::tx::Topic;
use crate::error::{Error, Result};
use crate::model::{DbTime, Lease, Op, Standing};
use async_trait::async_trait;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, watch};

/// Wraps a backend; [`fail_at`](FailingBackend::fail_at) arms it. Everything but the layers'
/// transactions passes through unchanged.
#[derive(Debug)]
pub struct FailingBackend {
    inner: Arc<dyn Backend>,
    /// Which transactions fail (their body's `op`), at which call (1-based), how, and
    /// whether only the first that reaches that call.
    armed: Mutex<Vec<(&'static str, u32, Failure, bool)>>,
    failed: AtomicU64,
    /// Which transactions are held open after their body ran; the gate they wait at (open:
    /// `true`), and how many have been held so far.
    hold: Mutex<Option<&'static str>>,
    gate: watch::Sender<bool>,
    held: watch::Sender<u64>,
    /// How many `Tx::leases` calls transactions through this wrapper have begun.
    batches: AtomicU64,
}

impl FailingBackend {
    /// `inner`, unarmed.
    pub fn new(inner: Arc<dyn Backend>) -> FailingBackend {
        FailingBackend {
            inner,
            armed: Mutex::new(Vec::new()),
            failed: AtomicU64::new(0),
            hold: Mutex::new(None),
            gate: watch::Sender::new(true),
            held: watch::Sender::new(0),
            batches: AtomicU64::new(0),
        }
    }

    /// From now on every transaction whose body's `op` is `op` waits, after its body ran and
    /// before it commits, until [`let_go`](FailingBackend::let_go).
    pub fn hold(&self, op: &'static str) {
        self.gate.send_replace(false);
        *self.hold.lock().expect("hold") = Some(op);
    }

    /// Lets every held transaction commit, and holds no more.
    pub fn let_go(&self) {
        *self.hold.lock().expect("hold") = None;
        self.gate.send_replace(true);
    }

    /// Waits until a transaction is held.
    pub async fn holding(&self) {
        self.holding_more_than(0).await;
    }

    /// How many transactions have been held so far.
    pub fn held(&self) -> u64 {
        *self.held.borrow()
    }

    /// Waits until more than `earlier` transactions have been held (`earlier`: what
    /// [`held`](FailingBackend::held) said before the one to wait for).
    pub async fn holding_more_than(&self, earlier: u64) {
        let mut held = self.held.subscribe();
        // The sender lives as long as `self`.
        let _ = held.wait_for(|&n| n > earlier).await;
    }

    /// How many `Tx::leases` calls (a batch of lease operations) transactions through this
    /// wrapper have begun so far.
    pub fn batches_begun(&self) -> u64 {
        self.batches.load(Ordering::SeqCst)
    }

    /// From now on every transaction whose body's `op` is `op` fails at its `n`-th call on
    /// the seam (`None`: none fails); a transaction with fewer calls commits. The connection
    /// drops there (an `Io` error): whether it committed is unknown to the layer. Each `op` is
    /// armed on its own, this or [`refuse_at`](FailingBackend::refuse_at).
    pub fn fail_at(&self, op: &'static str, n: Option<u32>) {
        self.arm(op, n, Failure::Dropped, false);
    }

    /// From now on every transaction whose body's `op` is `op` has its `n`-th call on the seam
    /// refused by the server, as a statement the database rejects (a database error, SQLSTATE
    /// 22000, on a connection that lives on: nothing of the transaction committed); `None`:
    /// none is.
    pub fn refuse_at(&self, op: &'static str, n: Option<u32>) {
        self.arm(op, n, Failure::Refused, false);
    }

    /// As [`refuse_at`](FailingBackend::refuse_at), for the first transaction of `op` that
    /// reaches its `n`-th call only: the refusal disarms itself there.
    pub fn refuse_once_at(&self, op: &'static str, n: Option<u32>) {
        self.arm(op, n, Failure::Refused, true);
    }

    fn arm(&self, op: &'static str, n: Option<u32>, how: Failure, once: bool) {
        let mut armed = self.armed.lock().expect("armed");
        armed.retain(|(o, _, _, _)| *o != op);
        armed.extend(n.filter(|&n| n > 0).map(|n| (op, n, how, once)));
    }

    /// Disarms `op` after its one-shot failure (see [`refuse_once_at`]).
    ///
    /// [`refuse_once_at`]: FailingBackend::refuse_once_at
    fn fired(&self, op: &'static str) {
        let mut armed = self.armed.lock().expect("armed");
        armed.retain(|&(o, _, _, once)| o != op || !once);
    }

    /// How many transactions failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }
}

/// How an armed transaction fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Failure {
    /// A connection reset, which the store treats as a database failure of unknown outcome
    /// (not a conflict to retry).
    Dropped,
    /// The server's error answer to a statement ([`Refusal`]).
    Refused,
}

impl Failure {
    /// The error a failed call answers.
    fn error(self) -> Error {
        Error::Database(match self {
            Failure::Dropped => sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "injected: the connection dropped half-way through the transaction",
            )),
            Failure::Refused => sqlx::Error::Database(Box::new(Refusal)),
        })
    }
}

/// A database's refusal of one statement, as the driver reports it: SQLSTATE 22000 (a data
/// exception), neither a conflict to retry nor a lost connection.
#[derive(Debug)]
struct Refusal;

/// The refusal's message.
const REFUSAL: &str = "injected: the server refused a statement of the transaction";

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(REFUSAL)
    }
}

impl std::error::Error for Refusal {}

impl sqlx::error::DatabaseError for Refusal {
    fn message(&self) -> &str {
        REFUSAL
    }
    fn code(&self) -> Option<std::borrow::Cow<'_, str>> {
        Some("22000".into())
    }
    fn as_error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn as_error_mut(&mut self) -> &mut (dyn std::error::Error + Send + Sync + 'static) {
        self
    }
    fn into_error(self: Box<Self>) -> Box<dyn std::error::Error + Send + Sync + 'static> {
        self
    }
    fn kind(&self) -> sqlx::error::ErrorKind {
        sqlx::error::ErrorKind::Other
    }
}

/// A body run over a [`Failing`] transaction, held open after it ran if asked.
struct FailingBody<'a> {
    body: &'a mut dyn Body,
    /// The call to fail at, and how, if any.
    at: Option<(u32, Failure)>,
    backend: &'a FailingBackend,
    hold: bool,
}

#[async_trait]
impl Body for FailingBody<'_> {
    fn writes(&self) -> bool {
        self.body.writes()
    }
    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let mut failing = Failing {
            tx,
            left: self.at.map(|(n, _)| n),
            how: self.at.map_or(Failure::Dropped, |(_, how)| how),
            batches: &self.backend.batches,
        };
        let outcome = self.body.run(&mut failing).await;
        if failing.left == Some(0) {
            self.backend.failed.fetch_add(1, Ordering::SeqCst);
            self.backend.fired(self.body.op());
        }
        if self.hold && outcome.is_ok() {
            self.backend.held.send_modify(|n| *n += 1);
            let mut gate = self.backend.gate.subscribe();
            let _ = gate.wait_for(|&open| open).await;
        }
        outcome
    }
    fn op(&self) -> &'static str {
        self.body.op()
    }
    fn db_now(&self) -> Option<DbTime> {
        self.body.db_now()
    }
    fn name(&self) -> Option<&str> {
        self.body.name()
    }
    fn term(&self) -> Option<u64> {
        self.body.term()
    }
}

/// A transaction whose calls fail from the `left`-th on (if any).
struct Failing<'t> {
    tx: &'t mut dyn Tx,
    left: Option<u32>,
    how: Failure,
    batches: &'t AtomicU64,
}

impl Failing<'_> {
    /// Counts a call; the error once its turn has come.
    fn call(&mut self) -> Result<()> {
        let Some(left) = self.left.as_mut() else {
            return Ok(());
        };
        if *left == 0 {
            return Err(self.how.error());
        }
        *left -= 1;
        match *left {
            0 => Err(self.how.error()),
            _ => Ok(()),
        }
    }
}

#[async_trait]
impl Tx for Failing<'_> {
    fn kind(&self) -> BackendKind {
        self.tx.kind()
    }
    fn dialect(&self) -> &Dialect {
        self.tx.dialect()
    }
    fn prefix(&self) -> &str {
        self.tx.prefix()
    }
    async fn now(&mut self) -> Result<DbTime> {
        self.call()?;
        self.tx.now().await
    }
    async fn epoch(&mut self) -> Result<crate::model::Epoch> {
        self.call()?;
        self.tx.epoch().await
    }
    async fn lease(
        &mut self,
        name: &str,
        op: &Op,
        actor: &str,
        standing: Option<&Standing<'_>>,
    ) -> Result<Applied> {
        self.call()?;
        self.tx.lease(name, op, actor, standing).await
    }
    async fn leases(&mut self, ops: &[(&str, Op)], actor: &str) -> Result<Vec<Applied>> {
        self.call()?;
        self.batches.fetch_add(1, Ordering::SeqCst);
        self.tx.leases(ops, actor).await
    }
    async fn read_lease(&mut self, name: &str) -> Result<Option<Lease>> {
        self.call()?;
        self.tx.read_lease(name).await
    }
    async fn notify(&mut self, topic: Topic<'_>) -> Result<()> {
        self.call()?;
        self.tx.notify(topic).await
    }
    fn notified(&mut self, topic: Topic<'_>) {
        self.tx.notified(topic);
    }
    async fn execute(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<()> {
        self.call()?;
        self.tx.execute(sql, args).await
    }
    async fn fetch(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Box<dyn Row>>> {
        self.call()?;
        self.tx.fetch(sql, args).await
    }
    async fn fetch_clocked(&mut self, sql: &str, args: &[Arg<'_>]) -> Result<Vec<Box<dyn Row>>> {
        self.call()?;
        self.tx.fetch_clocked(sql, args).await
    }
}

#[async_trait]
impl Backend for FailingBackend {
    fn kind(&self) -> BackendKind {
        self.inner.kind()
    }
    fn url(&self) -> &RedactedUrl {
        self.inner.url()
    }
    async fn apply(&self, name: &str, op: &Op, actor: &str) -> Result<Applied> {
        self.inner.apply(name, op, actor).await
    }
    async fn transaction(&self, body: &mut dyn Body) -> Result<()> {
        let at = (self.armed.lock().expect("armed").iter())
            .find(|(op, _, _, _)| *op == body.op())
            .map(|&(_, n, how, _)| (n, how));
        let hold = *self.hold.lock().expect("hold") == Some(body.op());
        let mut failing = FailingBody {
            body,
            at,
            backend: self,
            hold,
        };
        self.inner.transaction(&mut failing).await
    }
    async fn renew_many(&self, holder: &str, leases: &[(String, u64)]) -> Result<Renewed> {
        self.inner.renew_many(holder, leases).await
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
        self.inner.get(name).await
    }
    async fn list(&self) -> Result<Snapshot> {
        self.inner.list().await
    }
    async fn history(&self, name: &str, limit: u32) -> Result<Vec<HistoryEntry>> {
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
