//! One etcd call as one transaction on the store's seam: [`Call`] says what, [`Run`] is the
//! body that runs it, [`Reply`] what it answered.
//!
//! Three kinds of transaction:
//! - a **write of keys** (Put, DeleteRange, a Txn that may write, Revoke, a reap) locks the
//!   revision first, so writers are serialized and their revisions gapless and committed in
//!   order; it moves the revision by one per revision it wrote (none, if it changed nothing)
//!   and signals [`Topic::Layer`](crate::Topic::Layer)`("etcd")` at commit;
//! - a **read of keys** (Range, a Txn of Ranges) reads the revision first and again last: if a
//!   writer committed in between (an engine whose statements each see the newest commits, as
//!   PostgreSQL's READ COMMITTED), the read is run again, and after [`CALM_READS`] such tries
//!   once more with the revision share-locked, so that no writer commits until it ends: every
//!   answer is the keys at exactly its header's revision;
//! - everything else (leases, the log, members, compaction) reads or writes its own rows and
//!   never moves the revision.

use super::error::{Error, Result};
use super::kv::{check_put, delete, put, range, Writing};
use super::leases;
use super::log::{self, Events};
use super::members;
use super::overview::{self, Overview};
use super::proto::etcdserverpb::{
    CompactionResponse, DeleteRangeRequest, DeleteRangeResponse, LeaseGrantResponse,
    LeaseKeepAliveResponse, LeaseLeasesResponse, LeaseRevokeResponse, LeaseTimeToLiveRequest,
    LeaseTimeToLiveResponse, Member, PutRequest, PutResponse, RangeRequest, RangeResponse,
    TxnRequest, TxnResponse,
};
use super::rows::EtcdTx;
use super::rules::span::Span;
use super::statements::{Statements, SCHEMA};
use super::txn::txn;
use super::validate::txn_writes;
use crate::backend::tx::{cell, Body, Outcome, Schema, Tx};
use crate::model::DbTime;

/// How many times a read of keys runs again when writers keep committing beside it, before
/// it runs with the revision share-locked.
pub(super) const CALM_READS: u32 = 4;

/// What a transaction does.
#[derive(Clone, Copy, Debug)]
pub(super) enum Call<'a> {
    Range(&'a RangeRequest),
    Put(&'a PutRequest),
    Delete(&'a DeleteRangeRequest),
    Txn(&'a TxnRequest),
    Compact(i64),
    Retain(i64),
    Grant {
        id: i64,
        ttl: i64,
    },
    Revoke(i64),
    KeepAlive(&'a [i64]),
    TimeToLive(&'a LeaseTimeToLiveRequest),
    Leases,
    /// Whether some lease has ended (and so a reap has work).
    Ended,
    Reap(u32),
    Events {
        span: &'a Span,
        from: i64,
        limit: usize,
    },
    Revision,
    /// The bytes the tables take.
    Size,
    Join {
        member: &'a Member,
        ttl_ms: u64,
    },
    Heartbeat {
        id: u64,
        ttl_ms: u64,
    },
    Leave(u64),
    Members,
    /// The fence statement with the store's prefix and dialect.
    Fence,
    /// What an operator sees, at most this many leases and recipe keys.
    Overview(u32),
}

/// What a transaction answered.
#[derive(Debug)]
pub(super) enum Reply {
    Range(RangeResponse),
    Put(PutResponse),
    Delete(DeleteRangeResponse),
    Txn(TxnResponse),
    Compact(CompactionResponse),
    Retained(Option<i64>),
    Grant(LeaseGrantResponse),
    Revoke(LeaseRevokeResponse),
    KeepAlive(Vec<LeaseKeepAliveResponse>),
    TimeToLive(LeaseTimeToLiveResponse),
    Leases(LeaseLeasesResponse),
    Ended(bool),
    Reaped { leases: usize, revision: i64 },
    Events(Events),
    Revision { revision: i64, floor: i64 },
    Size(i64),
    Member(Member),
    Alive(bool),
    Left,
    Members(Vec<Member>),
    Fence(String),
    Overview(Overview),
}

/// What kind of transaction a call is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    WriteKeys,
    ReadKeys,
    Write,
    Read,
}

impl Call<'_> {
    fn kind(&self) -> Kind {
        match self {
            Call::Put(_) | Call::Delete(_) | Call::Revoke(_) | Call::Reap(_) => Kind::WriteKeys,
            Call::Txn(t) if txn_writes(t) => Kind::WriteKeys,
            Call::Range(_) | Call::Txn(_) | Call::Overview(_) => Kind::ReadKeys,
            Call::Compact(_)
            | Call::Retain(_)
            | Call::Grant { .. }
            | Call::KeepAlive(_)
            | Call::Join { .. }
            | Call::Heartbeat { .. }
            | Call::Leave(_) => Kind::Write,
            Call::TimeToLive(_)
            | Call::Leases
            | Call::Ended
            | Call::Events { .. }
            | Call::Revision
            | Call::Size
            | Call::Members
            | Call::Fence => Kind::Read,
        }
    }

    /// The `op` label of the store's round trip.
    fn op(&self) -> &'static str {
        match self {
            Call::Range(_) => "etcd_range",
            Call::Put(_) => "etcd_put",
            Call::Delete(_) => "etcd_delete",
            Call::Txn(_) => "etcd_txn",
            Call::Compact(_) | Call::Retain(_) => "etcd_compact",
            Call::Grant { .. } => "etcd_grant",
            Call::Revoke(_) => "etcd_revoke",
            Call::KeepAlive(_) => "etcd_keep_alive",
            Call::TimeToLive(_) | Call::Leases => "etcd_lease_read",
            Call::Ended | Call::Reap(_) => "etcd_reap",
            Call::Events { .. } | Call::Revision => "etcd_events",
            Call::Join { .. } | Call::Heartbeat { .. } | Call::Leave(_) | Call::Members => {
                "etcd_members"
            }
            Call::Fence => "etcd_fence",
            Call::Size => "etcd_size",
            Call::Overview(_) => "etcd_overview",
        }
    }
}

/// One call as a transaction's body.
pub(super) struct Run<'a> {
    pub statements: &'a cell::Statements<Statements>,
    pub call: Call<'a>,
    /// Read the keys with the revision share-locked (after reads that kept moving).
    pub locked: bool,
    /// What the last run answered, or why it refused (then rolled back); `None` after a read
    /// of keys whose revision moved while it read.
    pub out: Option<Result<Reply>>,
}

#[async_trait::async_trait]
impl Body for Run<'_> {
    fn writes(&self) -> bool {
        matches!(self.call.kind(), Kind::WriteKeys | Kind::Write)
    }

    fn op(&self) -> &'static str {
        self.call.op()
    }

    fn schema(&self) -> Option<&'static Schema> {
        Some(&SCHEMA)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> crate::error::Result<Outcome> {
        let mut rows = etcd_rows(self.statements, tx);
        self.out = None;
        let ran = match self.call.kind() {
            Kind::WriteKeys => write_keys(&mut rows, self.call).await.map(Some),
            Kind::ReadKeys => read_keys(&mut rows, self.call, self.locked).await,
            Kind::Write | Kind::Read => other(&mut rows, self.call).await.map(Some),
        };
        match ran {
            Ok(reply) => {
                self.out = reply.map(Ok);
                Ok(Outcome::Commit)
            }
            // The seam rolls back, and runs the body again after a transient conflict.
            Err(Error::Store(e)) => Err(e),
            Err(refused) => {
                self.out = Some(Err(refused));
                Ok(Outcome::Rollback)
            }
        }
    }
}

/// The layer's rows in `tx`, with the store's statements (built at its first transaction).
pub(super) fn etcd_rows<'t>(
    statements: &'t cell::Statements<Statements>,
    tx: &'t mut dyn Tx,
) -> EtcdTx<'t> {
    let s = statements.get(tx, |tx| {
        Statements::new(tx.prefix(), tx.dialect(), tx.kind())
    });
    EtcdTx::new(tx, s)
}

/// A write of keys: the revision locked first, moved by what was written. It is moved by one
/// as it is locked (the common case, in one statement where the engine allows), and set again
/// at the end only when the write changed nothing (back) or wrote several revisions (a reap).
async fn write_keys(tx: &mut EtcdTx<'_>, call: Call<'_>) -> Result<Reply> {
    let (found, at) = tx.bump_revision().await?;
    // The clock, after the lock (and checking that the server takes writes).
    let now = tx.now().await?;
    let mut w = Writing::at(found, at);
    let reply = write_at(tx, &mut w, call, now).await?;
    close(tx, &w, found, at).await?;
    Ok(reply)
}

/// One write of keys at `w`'s revision, in a transaction that holds the revision's lock and
/// read the clock (`now`) after it.
pub(super) async fn write_at(
    tx: &mut EtcdTx<'_>,
    w: &mut Writing,
    call: Call<'_>,
    now: DbTime,
) -> Result<Reply> {
    Ok(match call {
        Call::Put(p) => {
            check_put(tx, p).await?;
            Reply::Put(put(tx, w, p).await?)
        }
        Call::Delete(d) => Reply::Delete(delete(tx, w, d).await?),
        Call::Txn(t) => {
            let floor = floor_for(tx, call).await?;
            Reply::Txn(txn(tx, w, t, floor).await?)
        }
        Call::Revoke(id) => Reply::Revoke(leases::revoke(tx, w, id).await?),
        Call::Reap(limit) => {
            let ended = leases::reap(tx, w, now, limit).await?;
            Reply::Reaped {
                leases: ended,
                revision: w.seen(),
            }
        }
        _ => unreachable!("a write of keys"),
    })
}

/// The end of a writing transaction that found revision `found` and locked it at `at`: the
/// revision set back to `found` when nothing changed, or past `at` after several revisions
/// (a reap, a batch); the change signal sent when something changed.
pub(super) async fn close(tx: &mut EtcdTx<'_>, w: &Writing, found: i64, at: i64) -> Result<()> {
    let revision = w.seen();
    if revision != at {
        tx.set_revision(revision).await?;
    }
    if revision > found {
        tx.notify().await?;
    }
    Ok(())
}

/// A read of keys at one revision: `None` if the revision moved while it read (run it again).
async fn read_keys(tx: &mut EtcdTx<'_>, call: Call<'_>, locked: bool) -> Result<Option<Reply>> {
    let seen = if locked {
        tx.share_revision().await?
    } else {
        tx.read_revision().await?
    };
    let floor = floor_for(tx, call).await?;
    let reply = match call {
        Call::Range(r) => Reply::Range(range(tx, r, seen, floor).await?),
        Call::Txn(t) => Reply::Txn(txn(tx, &mut Writing::reading(seen), t, floor).await?),
        Call::Overview(limit) => Reply::Overview(overview::read(tx, seen, limit).await?),
        _ => unreachable!("a read of keys"),
    };
    if !locked && tx.read_revision().await? != seen {
        return Ok(None);
    }
    Ok(Some(reply))
}

/// The compaction floor, read only for a call that reads a past revision (0 for one that does
/// not: it reads the keys as they are, which no compaction touches).
async fn floor_for(tx: &mut EtcdTx<'_>, call: Call<'_>) -> Result<i64> {
    let past = match call {
        Call::Range(r) => r.revision > 0,
        Call::Txn(t) => reads_the_past(t),
        _ => false,
    };
    Ok(if past { tx.read_floor().await? } else { 0 })
}

/// Whether a Txn has a Range of a past revision, in either branch at any depth.
fn reads_the_past(t: &TxnRequest) -> bool {
    use super::proto::etcdserverpb::request_op::Request as Op;
    t.success
        .iter()
        .chain(&t.failure)
        .any(|op| match &op.request {
            Some(Op::RequestRange(r)) => r.revision > 0,
            Some(Op::RequestTxn(t)) => reads_the_past(t),
            _ => false,
        })
}

/// Everything that leaves the revision alone.
async fn other(tx: &mut EtcdTx<'_>, call: Call<'_>) -> Result<Reply> {
    Ok(match call {
        Call::Compact(revision) => Reply::Compact(log::compact(tx, revision).await?),
        Call::Retain(revisions) => Reply::Retained(log::retain(tx, revisions).await?),
        Call::Events { span, from, limit } => {
            Reply::Events(log::events(tx, span, from, limit).await?)
        }
        Call::Revision => Reply::Revision {
            revision: tx.read_revision().await?,
            floor: tx.read_floor().await?,
        },
        Call::Size => Reply::Size(tx.size().await?),
        Call::Grant { id, ttl } => {
            let now = tx.now().await?;
            Reply::Grant(leases::grant(tx, id, ttl, now).await?)
        }
        Call::KeepAlive(ids) => Reply::KeepAlive(leases::keep_alive(tx, ids).await?),
        Call::TimeToLive(r) => {
            let now = tx.now().await?;
            let revision = tx.read_revision().await?;
            Reply::TimeToLive(leases::time_to_live(tx, r, now, revision).await?)
        }
        Call::Leases => {
            let now = tx.now().await?;
            let revision = tx.read_revision().await?;
            Reply::Leases(leases::leases(tx, now, revision).await?)
        }
        Call::Ended => {
            let now = tx.now().await?;
            Reply::Ended(!tx.ended_leases(now, 1, false).await?.is_empty())
        }
        Call::Join { member, ttl_ms } => {
            let now = tx.now().await?;
            Reply::Member(members::join(tx, member, ttl_ms, now).await?)
        }
        Call::Heartbeat { id, ttl_ms } => {
            let now = tx.now().await?;
            Reply::Alive(members::heartbeat(tx, id, ttl_ms, now).await?)
        }
        Call::Leave(id) => {
            tx.delete_member(id).await?;
            Reply::Left
        }
        Call::Members => {
            let now = tx.now().await?;
            Reply::Members(members::list(tx, now).await?)
        }
        Call::Fence => Reply::Fence(tx.fence_sql()),
        _ => unreachable!("a call that leaves the revision alone"),
    })
}
