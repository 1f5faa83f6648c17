//! etcd's v3 API — keys with revisions, transactions, leases, the log watchers follow, and the
//! Lock and Election recipes — on tenure's tables, so that etcd's clients (through `tenure
//! serve --etcd-listen`) lock, elect and watch on the database a service already has.
//!
//! A layer on the store's transaction seam (`backend/tx/`): its own folder, cargo feature
//! (`etcd`), error type, statements and tables; [`Etcd`] is its handle. Its requests and
//! answers are etcd's own messages ([`proto`], generated from etcd's protocol definitions).
//! Nothing below the store knows it.
//!
//! # How it maps onto tenure
//! - **The database is the consensus.** There is no Raft: one database is one etcd, and every
//!   process with an [`Etcd`] on it (every `tenure serve`) is one of its members.
//! - **One revision per database**, a counter row (`<prefix>etcd_revision`) that every write
//!   of keys — Put, DeleteRange, a Txn that writes, a Revoke, the reap of an ended lease —
//!   locks first and moves by exactly one, writing its keys and its events at that revision in
//!   the same transaction. Writers are serialized by that lock, so revisions are gapless and
//!   commit in order: a reader that has seen revision N never later sees a commit below N. The
//!   first write of a new epoch of the database (a promoted replica) takes the epoch's floor
//!   instead, above every revision the old primary handed out, lost ones included.
//!   A request that changes nothing (a delete of nothing, a Txn whose branch only reads, a
//!   revoke of a lease without keys) leaves it, as etcd; so do reads, grants, keep-alives and
//!   compactions. The writes of keys that one handle (and its clones) is sent while it
//!   commits another queue up and share its next transaction, each at revisions of its own in
//!   queue order, as etcd syncs many requests' log entries at once and applies them in one
//!   transaction of its backend (see `group.rs`).
//! - **Keys** are rows of `<prefix>etcd_kv` with etcd's create and mod revisions, version and
//!   lease; a read of keys sees one revision exactly (it reads the revision before and after,
//!   and runs again if a writer committed in between).
//! - **The log** (`<prefix>etcd_event`) has one row per changed key per revision, with the
//!   key's state after it and before it: a watcher replays it from any revision at or above the
//!   floor ([`Etcd::events`]), and a Range at a past revision is answered from it. A
//!   compaction to revision r drops the rows below r and makes r the floor (its own counter,
//!   `<prefix>etcd_compaction`): reading or watching below the floor is etcd's "required
//!   revision has been compacted". Nothing compacts by itself: a server runs
//!   [`Etcd::retain`] (or a client calls Compact).
//! - **Leases** are rows of `<prefix>etcd_lease` that end at `expires_at` on the database's
//!   clock (the model's rule of time, [`DbTime::ended_by`](crate::DbTime::ended_by)): a grant
//!   or a keep-alive sets it to the database's now plus the granted TTL. A lease is gone the
//!   moment it ends — a keep-alive answers TTL 0, TimeToLive -1, a Put with it is refused —
//!   and its keys are deleted, at one revision, by the next [`Etcd::reap`], which any process
//!   may run: `tenure serve` runs it every poll interval, and the recipes run it while they
//!   wait.
//! - **Changes are signalled** as [`Topic::Layer`](crate::Topic::Layer)`("etcd")` by every
//!   write of keys (PostgreSQL's NOTIFY, SQLite's doorbell; MySQL has none: a watcher there
//!   reads the log every poll interval).
//! - **Locks and elections** are etcd's recipes, in the library ([`Etcd::lock`],
//!   [`Etcd::campaign`], …): a waiter waits for the key created just before its own to be
//!   deleted, following the log. A lock's token is its key's create revision, and
//!   [`fence_sql`] checks it inside the application's own transaction — what etcd itself
//!   cannot give.
//! - **Members** (`<prefix>etcd_member`): each server joins with its id and URLs and
//!   heartbeats; [`Etcd::members`] lists those alive by the database's clock.
//! - **Operators** see it through [`Etcd::overview`]: the revision, the floor, the live leases
//!   and the recipes' keys with their owners, in one bounded read (`tenure status`, `GET
//!   /v1/etcd` and the status page show it).
//!
//! # What differs from etcd
//! - Keys are at most [`MAX_KEY_BYTES`] (2048) bytes, what every engine can index (etcd's only
//!   bound is the request size); a longer key is refused as "request is too large".
//! - A lease's shortest TTL is [`MIN_LEASE_TTL`] (2 s, etcd's with its default timing) and
//!   its longest [`MAX_LEASE_TTL`]; a lease lives exactly its TTL from its last keep-alive by
//!   the database's clock, and its keys go at the next reap (within a server's poll interval),
//!   where etcd's leader revokes it within about half a second.
//! - Range sorts keep key order among ties (etcd's order of ties is unspecified).
//! - `physical` compaction and `serializable` reads change nothing: a compaction is complete
//!   when it answers, and every read is linearizable.
//! - A header carries the revision only: cluster id, member id and raft term are the server's
//!   to fill in.
//! - Member-changing calls (add, remove, promote) are not the layer's: membership is who runs.

mod api;
mod call;
mod error;
mod fence;
mod group;
mod kv;
mod leases;
mod log;
mod members;
mod overview;
mod recipes;
#[cfg(feature = "testing")]
pub mod reference;
mod rows;
mod rules;
pub(crate) mod statements;
mod txn;
mod validate;

pub use api::{Reaped, Revisions};
pub use error::{Code, Error, Result};
pub use fence::fence_sql;
pub use log::Events;
pub use overview::{LeaseSummary, Overview, RecipeKey};
pub use recipes::{Observer, SESSION_TTL};
pub use rules::lease::{MAX_LEASE_TTL, MIN_LEASE_TTL};
pub use rules::span::Span;
pub use tenure_etcd_proto as proto;
pub use validate::{MAX_KEY_BYTES, MAX_REQUEST_BYTES, MAX_TXN_OPS};

use crate::backend::tx::cell;
use crate::store::Store;
use call::{Call, Reply, Run, CALM_READS};
use statements::Statements;
use std::time::Duration;

/// The topic of the layer's change signals: every write of keys signals it at commit, so a
/// watcher of the log waits with
/// `store.changes().changed(|t| t == tenure::Topic::Layer(tenure::etcd::TOPIC))` (and reads the
/// log every poll interval too: MySQL pushes nothing).
pub const TOPIC: &str = "etcd";

/// How often a recipe that waits reads the log when no change signal woke it (the default of
/// [`Etcd::poll_interval`]).
pub const DEFAULT_POLL: Duration = Duration::from_millis(500);

/// etcd's keys, leases, log and recipes on one store: the layer's handle. Cheap to clone.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), tenure::etcd::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = format!("sqlite://{}", dir.path().join("etcd.db").display());
/// use tenure::etcd::proto::etcdserverpb::{PutRequest, RangeRequest};
/// use tenure::etcd::Etcd;
/// let etcd = Etcd::new(tenure::Store::connect(&url).await?);
/// let put = PutRequest { key: b"service/config".to_vec(), value: b"on".to_vec(), ..Default::default() };
/// let revision = etcd.put(&put).await?.header.unwrap().revision;
/// let got = etcd.range(&RangeRequest { key: b"service/config".to_vec(), ..Default::default() }).await?;
/// assert_eq!(got.kvs[0].value, b"on");
/// assert_eq!(got.kvs[0].create_revision, revision);
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Etcd {
    store: Store,
    statements: cell::Statements<Statements>,
    poll: Duration,
    /// Wakes waiting recipes besides the store's change signals ([`Etcd::woken_by`]).
    nudges: Option<tokio::sync::watch::Receiver<u64>>,
    /// The writes of keys that wait for the next transaction ([`group`]).
    writes: group::Group,
}

impl Etcd {
    /// The etcd layer on `store` (whose tables `Store::connect` created with the lease's).
    pub fn new(store: Store) -> Etcd {
        Etcd {
            store,
            statements: cell::Statements::default(),
            poll: DEFAULT_POLL,
            nudges: None,
            writes: group::Group::default(),
        }
    }

    /// How often a recipe that waits (a lock, a campaign, an observer) looks at the log when
    /// no change signal woke it, and reaps ended leases: the bound on its latency on MySQL
    /// and behind a pooler, and on noticing an ended lease everywhere. Default
    /// [`DEFAULT_POLL`].
    #[must_use]
    pub fn poll_interval(mut self, every: Duration) -> Etcd {
        self.poll = every;
        self
    }

    /// Waiting recipes also look at the log whenever `nudges` changes: a follower of the log
    /// that reads it more often than the poll interval (as `tenure serve`'s watch hub, four
    /// times a second) tells them of new revisions where the database sends no change signal
    /// (MySQL; PostgreSQL behind a pooler). A nudge only wakes: the log still decides.
    #[must_use]
    pub fn woken_by(mut self, nudges: tokio::sync::watch::Receiver<u64>) -> Etcd {
        self.nudges = Some(nudges);
        self
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs `call` in one transaction, bounded by the store's timeout; a read of keys that a
    /// writer kept moving runs again, at last with the revision share-locked. A Put, a
    /// DeleteRange and a Txn that may write share the transaction of the handle's other
    /// writes of keys that queued meanwhile ([`group`]).
    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        let write = match call {
            Call::Put(p) => Some(group::Write::Put(p.clone())),
            Call::Delete(d) => Some(group::Write::Delete(d.clone())),
            Call::Txn(t) if validate::txn_writes(t) => Some(group::Write::Txn(t.clone())),
            _ => None,
        };
        if let Some(write) = write {
            return self
                .writes
                .write(&self.store, &self.statements, write)
                .await;
        }
        let mut tries = 0;
        loop {
            let mut body = Run {
                statements: &self.statements,
                call,
                locked: tries >= CALM_READS,
                out: None,
            };
            self.store.transaction(&mut body).await?;
            match body.out {
                Some(out) => return out,
                None if tries <= CALM_READS => tries += 1,
                None => {
                    return Err(Error::Store(crate::Error::Unsupported(
                        "an etcd call that ran no transaction",
                    )))
                }
            }
        }
    }
}
