//! Group commit: the writes of keys (Put, DeleteRange, a Txn that may write) that one
//! process's handles send while another is committing share the next transaction.
//!
//! Every write of keys locks the revision first and holds it to its commit, so writers are
//! serialized; a process with many at once (a `tenure serve` under eight clients) paid a
//! transaction — its `BEGIN`, the revision's lock, the clock, its `COMMIT` and the wait for
//! the one before — for each. A handle's writes now go to one task of the handle (and its
//! clones), which takes what has queued up and runs it in one transaction, each write at
//! revisions of its own in the order they queued, exactly as if each had run alone one after
//! the other: the revision moves by one per write that changed something, each write sees the
//! ones before it, and each answer (its header's revision, its `prev_kv`s) is what it would
//! have been. Nothing is answered before the transaction commits.
//!
//! - A write alone in the queue runs as it always did ([`Run`](super::call::Run)): the same
//!   statements, one transaction.
//! - A write that refuses (a Put with a lease that has ended, say) rolls the transaction
//!   back, and the others run again without it. No write sees a refused one. The first write
//!   of a transaction is answered with its refusal (it saw only what had committed); a later
//!   one saw writes that rolled back with it, and that may not commit when they run again
//!   (their transaction fails, or finds another process's writes first): it runs again first
//!   in the next transaction, after theirs, and is answered with what it finds then — never
//!   with a state the database did not have.
//! - A transaction that fails (the database gone, a timeout) answers every write of it with
//!   that failure (the first in the queue with the error itself, the others with copies: a
//!   driver's error as its text): whether it committed is unknown, as for a write alone.
//! - A transaction the server refused a statement of (an error answer on a connection that
//!   lives on: nothing of it committed) was refused for one write's sake where the statement
//!   was that write's: the write runs alone (answered as the server answers it alone, as
//!   before group commit), and the others run again without it. Where the batch without it is
//!   refused as well, each of its writes runs alone, in queue order: one bad write costs two
//!   more transactions, several at most one per write. A refused statement of the batch's own
//!   (the revision's lock — a lock wait timed out, say — the clock, the revision written
//!   back) is no write's: every write is answered with it, as when a transaction fails, for
//!   each alone would run the same statement (and wait the same timeout) again.
//! - A write whose caller stopped waiting before its turn is not run; one already in a
//!   transaction runs to its end, as etcd applies a request whose client went away (a write
//!   alone used to roll back when its future was dropped before its `COMMIT`). A write waits
//!   for the transaction before its own, which the store's timeout bounds, as it bounds each.

use super::call::{close, etcd_rows, write_at, Call, Reply, Run};
use super::error::{Error, Result};
use super::kv::Writing;
use super::proto::etcdserverpb::{DeleteRangeRequest, PutRequest, TxnRequest};
use super::rows::EtcdTx;
use super::statements::{Statements, SCHEMA};
use crate::backend::tx::{cell, Body, Outcome, Schema, Tx};
use crate::store::Store;
use std::sync::{Arc, OnceLock};
use tokio::sync::{mpsc, oneshot};

/// The most writes one transaction carries.
const MAX_WRITES: usize = 64;

/// A write of keys, owned so that it can wait in the queue.
pub(super) enum Write {
    Put(PutRequest),
    Delete(DeleteRangeRequest),
    Txn(TxnRequest),
}

impl Write {
    fn call(&self) -> Call<'_> {
        match self {
            Write::Put(p) => Call::Put(p),
            Write::Delete(d) => Call::Delete(d),
            Write::Txn(t) => Call::Txn(t),
        }
    }
}

/// A write waiting for its turn, and where its answer goes.
struct Queued {
    write: Write,
    answer: oneshot::Sender<Result<Reply>>,
}

/// The queue of a handle's writes (shared by its clones); its task starts with the first
/// write and ends with the last clone.
#[derive(Clone, Default)]
pub(super) struct Group(Arc<OnceLock<mpsc::UnboundedSender<Queued>>>);

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Group")
    }
}

impl Group {
    /// Runs `write` in the next transaction of the queue's task (started on the current
    /// runtime by the first write). Where the task is gone (its runtime ended), the write runs
    /// alone here.
    pub(super) async fn write(
        &self,
        store: &Store,
        statements: &cell::Statements<Statements>,
        write: Write,
    ) -> Result<Reply> {
        let queue = self.0.get_or_init(|| {
            let (queue, taken) = mpsc::unbounded_channel();
            tokio::spawn(commit(store.clone(), statements.clone(), taken));
            queue
        });
        let (answer, answered) = oneshot::channel();
        match queue.send(Queued { write, answer }) {
            Ok(()) => answered.await.unwrap_or_else(|_| {
                Err(Error::Store(crate::Error::Database(sqlx::Error::Protocol(
                    "the etcd layer's write queue stopped before this write was answered: its \
                     effect is unknown"
                        .into(),
                ))))
            }),
            Err(unsent) => alone(store, statements, unsent.0.write.call()).await,
        }
    }
}

/// The queue's task: takes what has queued up (at most [`MAX_WRITES`]) and runs it.
async fn commit(
    store: Store,
    statements: cell::Statements<Statements>,
    mut queue: mpsc::UnboundedReceiver<Queued>,
) {
    let mut taken = Vec::with_capacity(MAX_WRITES);
    // Writes to run first in the next transaction (see `run`).
    let mut again: Vec<Queued> = Vec::new();
    loop {
        if again.is_empty() {
            if queue.recv_many(&mut taken, MAX_WRITES).await == 0 {
                return;
            }
        } else {
            taken.append(&mut again);
            while taken.len() < MAX_WRITES {
                match queue.try_recv() {
                    Ok(q) => taken.push(q),
                    Err(_) => break,
                }
            }
        }
        taken.retain(|q| !q.answer.is_closed());
        again = run(&store, &statements, std::mem::take(&mut taken)).await;
    }
}

/// Runs `queued` in one transaction, and answers each; returns the writes to run again first
/// in the next transaction.
///
/// A write that refuses is taken out and the rest run again. The first write of a transaction
/// is answered with its refusal: what it saw was what the database had committed. A later one
/// saw the writes before it, which rolled back with it and may not commit when they run again
/// (their transaction fails, or finds another process's writes first): it waits for the next
/// transaction, after theirs, and is answered with what it finds there.
async fn run(
    store: &Store,
    statements: &cell::Statements<Statements>,
    mut queued: Vec<Queued>,
) -> Vec<Queued> {
    let mut again = Vec::new();
    let mut narrowed = false;
    while queued.len() > 1 {
        let mut body = Batch {
            statements,
            writes: queued.iter().map(|q| q.write.call()).collect(),
            replies: Vec::new(),
            refused: None,
            failed_at: None,
        };
        let ran = store.transaction(&mut body).await;
        let (replies, refused, failed_at) = (body.replies, body.refused, body.failed_at);
        match (ran, refused) {
            (Err(e), _) if nothing_committed(&e) && failed_at.is_some() => {
                if narrowed {
                    each_alone(store, statements, queued).await;
                    return again;
                }
                narrowed = true;
                let q = queued.remove(failed_at.expect("matched above"));
                if !q.answer.is_closed() {
                    let _ = q
                        .answer
                        .send(alone(store, statements, q.write.call()).await);
                }
            }
            (Err(e), _) => {
                // The first write gets the failure itself, the others copies of it.
                let mut all = queued.drain(..);
                let first = all.next();
                for q in all {
                    let _ = q.answer.send(Err(Error::Store(copy_of(&e))));
                }
                if let Some(q) = first {
                    let _ = q.answer.send(Err(Error::Store(e)));
                }
                return again;
            }
            (Ok(()), Some((0, why))) => {
                let _ = queued.remove(0).answer.send(Err(why));
            }
            (Ok(()), Some((i, _))) => again.push(queued.remove(i)),
            (Ok(()), None) => {
                for (q, reply) in queued.drain(..).zip(replies) {
                    let _ = q.answer.send(Ok(reply));
                }
                return again;
            }
        }
    }
    each_alone(store, statements, queued).await;
    again
}

/// Runs each of `queued` in a transaction of its own, in queue order (a write whose caller
/// stopped waiting is not run).
async fn each_alone(store: &Store, statements: &cell::Statements<Statements>, queued: Vec<Queued>) {
    for q in queued.into_iter().filter(|q| !q.answer.is_closed()) {
        let _ = q
            .answer
            .send(alone(store, statements, q.write.call()).await);
    }
}

/// One write in a transaction of its own.
async fn alone(
    store: &Store,
    statements: &cell::Statements<Statements>,
    call: Call<'_>,
) -> Result<Reply> {
    let mut body = Run {
        statements,
        call,
        locked: false,
        out: None,
    };
    store.transaction(&mut body).await?;
    body.out.unwrap_or_else(|| {
        Err(Error::Store(crate::Error::Unsupported(
            "an etcd write that ran no transaction",
        )))
    })
}

/// Several writes of keys as one transaction's body: each at the revisions after the ones
/// before it.
struct Batch<'a> {
    statements: &'a cell::Statements<Statements>,
    writes: Vec<Call<'a>>,
    /// Each write's answer, after a run that committed.
    replies: Vec<Reply>,
    /// The first write that refused, and why: the run rolled back.
    refused: Option<(usize, Error)>,
    /// The write whose statement failed, after a run that failed; `None` where a statement
    /// of the batch's own did (or none).
    failed_at: Option<usize>,
}

#[async_trait::async_trait]
impl Body for Batch<'_> {
    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "etcd_writes"
    }

    fn schema(&self) -> Option<&'static Schema> {
        Some(&SCHEMA)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> crate::error::Result<Outcome> {
        let mut rows = etcd_rows(self.statements, tx);
        self.replies.clear();
        self.refused = None;
        self.failed_at = None;
        match self.write_all(&mut rows).await {
            Ok(()) => Ok(Outcome::Commit),
            // The seam rolls back, and runs the body again after a transient conflict.
            Err((at, Error::Store(e))) => {
                self.failed_at = at;
                Err(e)
            }
            Err((at, refused)) => {
                self.refused = Some((at.unwrap_or(0), refused));
                Ok(Outcome::Rollback)
            }
        }
    }
}

impl Batch<'_> {
    /// Every write, in order; where it stopped (the index of the write, `None` in a statement
    /// of the batch's own), and why.
    async fn write_all(
        &mut self,
        tx: &mut EtcdTx<'_>,
    ) -> std::result::Result<(), (Option<usize>, Error)> {
        let shared = |e| (None, Error::Store(e));
        let (found, at) = tx.bump_revision().await.map_err(shared)?;
        // The clock, after the lock (and checking that the server takes writes).
        let now = tx.now().await.map_err(shared)?;
        let mut w = Writing::at(found, at);
        for (i, call) in self.writes.iter().enumerate() {
            let reply = write_at(tx, &mut w, *call, now)
                .await
                .map_err(|e| (Some(i), e))?;
            self.replies.push(reply);
            w.next();
        }
        close(tx, &w, found, at).await.map_err(|e| (None, e))
    }
}

/// Whether a transaction's failure says that nothing of it committed: the server answered a
/// statement (or the `COMMIT`) with an error, and the connection lives on. A lost connection
/// or a timeout leaves it unknown.
fn nothing_committed(e: &crate::Error) -> bool {
    matches!(e, crate::Error::Database(sqlx::Error::Database(_)))
        && !crate::error::is_connection_lost(e)
}

/// The same failure again, for each write but the first of a transaction that failed (a
/// driver's error as its text).
fn copy_of(e: &crate::Error) -> crate::Error {
    use crate::Error as E;
    match e {
        E::Timeout(d) => E::Timeout(*d),
        E::ReadOnly { detail } => E::ReadOnly {
            detail: detail.clone(),
        },
        E::Corrupt { table, reason } => E::Corrupt {
            table: table.clone(),
            reason: reason.clone(),
        },
        E::SchemaMissing { table, url } => E::SchemaMissing {
            table: table.clone(),
            url: url.clone(),
        },
        E::Shutdown => E::Shutdown,
        E::Unsupported(what) => E::Unsupported(what),
        E::Database(e) => E::Database(sqlx::Error::Protocol(e.to_string())),
        other => E::Database(sqlx::Error::Protocol(other.to_string())),
    }
}
