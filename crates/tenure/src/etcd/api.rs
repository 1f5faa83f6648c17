//! The handle's calls: etcd's KV, Lease and Cluster services (and the log for watchers), each
//! one checked as etcd's gRPC server checks it and run in one transaction. Requests and
//! responses are etcd's own messages ([`proto`](super::proto)); a header carries only the
//! revision (the server fills in its cluster id, member id and term).

use super::call::{Call, Reply};
use super::error::{Error, Result};
use super::log::Events;
use super::overview::Overview;
use super::proto::etcdserverpb::{
    CompactionRequest, CompactionResponse, DeleteRangeRequest, DeleteRangeResponse,
    LeaseGrantRequest, LeaseGrantResponse, LeaseKeepAliveResponse, LeaseLeasesResponse,
    LeaseRevokeRequest, LeaseRevokeResponse, LeaseTimeToLiveRequest, LeaseTimeToLiveResponse,
    Member, PutRequest, PutResponse, RangeRequest, RangeResponse, TxnRequest, TxnResponse,
};
use super::rules::span::Span;
use super::{validate, Etcd};
use std::time::Duration;

/// A reply of another kind than the call's (never: each call answers its own kind).
fn mismatch() -> Error {
    Error::Store(crate::Error::Unsupported(
        "an etcd call answered another call's reply",
    ))
}

/// The current revision and the compaction floor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Revisions {
    /// The revision of the last write.
    pub revision: i64,
    /// The oldest revision a read or a watch may start from (0: nothing was compacted).
    pub floor: i64,
}

/// What a reap did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reaped {
    /// How many ended leases it removed.
    pub leases: usize,
    /// The revision after it.
    pub revision: i64,
}

impl Etcd {
    /// Range: the keys of `key`..`range_end` (`range_end` empty: the one key; `"\0"`: every
    /// key from `key` on), at the current revision or at a past `revision` (answered from the
    /// log), filtered, sorted and limited as asked.
    ///
    /// # Errors
    /// [`Error::EmptyKey`], [`Error::InvalidSortOption`], [`Error::Compacted`] (below the
    /// floor), [`Error::FutureRevision`], [`Error::RequestTooLarge`]; [`Error::Store`].
    pub async fn range(&self, r: &RangeRequest) -> Result<RangeResponse> {
        validate::size(r)?;
        validate::range(r)?;
        match self.call(Call::Range(r)).await? {
            Reply::Range(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    /// Put: one key's value (and lease), at the next revision. A key that did not exist is
    /// created there (its version 1); one that did keeps its create revision, and its version
    /// goes up by one.
    ///
    /// # Errors
    /// [`Error::EmptyKey`], [`Error::ValueProvided`], [`Error::LeaseProvided`],
    /// [`Error::KeyNotFound`] (`ignore_value` or `ignore_lease` on a missing key),
    /// [`Error::LeaseNotFound`], [`Error::RequestTooLarge`]; [`Error::Store`].
    pub async fn put(&self, r: &PutRequest) -> Result<PutResponse> {
        validate::size(r)?;
        validate::put(r)?;
        match self.call(Call::Put(r)).await? {
            Reply::Put(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    /// DeleteRange: the keys of `key`..`range_end`, at the next revision (none deleted: the
    /// revision stays).
    ///
    /// # Errors
    /// [`Error::EmptyKey`], [`Error::RequestTooLarge`]; [`Error::Store`].
    pub async fn delete_range(&self, r: &DeleteRangeRequest) -> Result<DeleteRangeResponse> {
        validate::size(r)?;
        validate::delete(r)?;
        match self.call(Call::Delete(r)).await? {
            Reply::Delete(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    /// Txn: if every compare holds, the `success` operations, else the `failure` ones (nested
    /// Txns included), all at one revision; a Txn that changes nothing leaves the revision.
    ///
    /// # Errors
    /// [`Error::TooManyOps`], [`Error::DuplicateKey`], [`Error::EmptyKey`], and each
    /// operation's own errors (then nothing of it is written); [`Error::Store`].
    pub async fn txn(&self, r: &TxnRequest) -> Result<TxnResponse> {
        validate::size(r)?;
        validate::txn(r)?;
        match self.call(Call::Txn(r)).await? {
            Reply::Txn(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    /// Compact: drops the log below `revision`, which becomes the floor (`physical` changes
    /// nothing: the rows are gone when this returns). The revision does not move.
    ///
    /// # Errors
    /// [`Error::Compacted`] (at or below the floor), [`Error::FutureRevision`];
    /// [`Error::Store`].
    pub async fn compact(&self, r: &CompactionRequest) -> Result<CompactionResponse> {
        match self.call(Call::Compact(r.revision)).await? {
            Reply::Compact(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    /// Compacts the log to keep its last `revisions` revisions (a retention a server runs
    /// now and then); the new floor, if it moved.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn retain(&self, revisions: i64) -> Result<Option<i64>> {
        match self.call(Call::Retain(revisions)).await? {
            Reply::Retained(floor) => Ok(floor),
            _ => Err(mismatch()),
        }
    }

    /// The current revision and the compaction floor.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn revisions(&self) -> Result<Revisions> {
        match self.call(Call::Revision).await? {
            Reply::Revision { revision, floor } => Ok(Revisions { revision, floor }),
            _ => Err(mismatch()),
        }
    }

    /// The bytes the layer's tables take on the database, their indexes included (etcd's
    /// `dbSize`): PostgreSQL's relation sizes, MySQL's `information_schema` estimate (InnoDB
    /// updates it with its statistics, so it lags writes), the pages of SQLite's `dbstat`.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn size(&self) -> Result<u64> {
        match self.call(Call::Size).await? {
            Reply::Size(bytes) => Ok(u64::try_from(bytes).unwrap_or(0)),
            _ => Err(mismatch()),
        }
    }

    /// What an operator sees, in one transaction at one revision: the revision and the
    /// compaction floor, the leases that live (earliest end first) with their granted TTL,
    /// what they have left by the database's clock and how many keys each has, and the keys
    /// of the Lock and Election recipes (`<prefix><lease in hex>`, in key order) with each
    /// prefix's owner — at most `limit` leases and `limit` keys, with counts of the rest.
    ///
    /// # Errors
    /// [`Error::Store`] ([`crate::Error::SchemaMissing`] where the etcd tables do not exist).
    pub async fn overview(&self, limit: u32) -> Result<Overview> {
        match self.call(Call::Overview(limit)).await? {
            Reply::Overview(overview) => Ok(overview),
            _ => Err(mismatch()),
        }
    }

    /// The log for a watcher: the events of `key`..`range_end` from revision `from` on, at
    /// most `limit` (more when one revision holds more: a revision is never split), with the
    /// revision they run through.
    ///
    /// # Errors
    /// [`Error::Compacted`] with the floor when `from` is below it; [`Error::Store`].
    pub async fn events(
        &self,
        from: i64,
        key: &[u8],
        range_end: &[u8],
        limit: usize,
    ) -> Result<Events> {
        let span = Span::new(key, range_end);
        let call = Call::Events {
            span: &span,
            from,
            limit,
        };
        match self.call(call).await? {
            Reply::Events(events) => Ok(events),
            _ => Err(mismatch()),
        }
    }

    /// LeaseGrant: a lease of `r.ttl` seconds (at least [`MIN_LEASE_TTL`](super::MIN_LEASE_TTL))
    /// from the database's now, with id `r.id` (0: one chosen here).
    ///
    /// # Errors
    /// [`Error::LeaseTtlTooLarge`], [`Error::LeaseExists`]; [`Error::Store`].
    pub async fn lease_grant(&self, r: &LeaseGrantRequest) -> Result<LeaseGrantResponse> {
        match self
            .call(Call::Grant {
                id: r.id,
                ttl: r.ttl,
            })
            .await?
        {
            Reply::Grant(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    /// LeaseRevoke: the lease and its keys (deleted at one revision).
    ///
    /// # Errors
    /// [`Error::LeaseNotFound`]; [`Error::Store`].
    pub async fn lease_revoke(&self, r: &LeaseRevokeRequest) -> Result<LeaseRevokeResponse> {
        match self.call(Call::Revoke(r.id)).await? {
            Reply::Revoke(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    /// LeaseKeepAlive of one lease: it ends its granted TTL from the database's now; TTL 0
    /// in the answer when it does not exist or has ended.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn lease_keep_alive(&self, id: i64) -> Result<LeaseKeepAliveResponse> {
        let mut answers = self.lease_keep_alive_many(&[id]).await?;
        answers.pop().ok_or_else(mismatch)
    }

    /// LeaseKeepAlive of many leases in one transaction of two statements (a server's
    /// keep-alive streams, batched), one answer per id in order.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn lease_keep_alive_many(&self, ids: &[i64]) -> Result<Vec<LeaseKeepAliveResponse>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        match self.call(Call::KeepAlive(ids)).await? {
            Reply::KeepAlive(answers) => Ok(answers),
            _ => Err(mismatch()),
        }
    }

    /// LeaseTimeToLive: what the lease has left (TTL -1: it does not exist or has ended), its
    /// granted TTL, and with `r.keys` its keys (in key order).
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn lease_time_to_live(
        &self,
        r: &LeaseTimeToLiveRequest,
    ) -> Result<LeaseTimeToLiveResponse> {
        match self.call(Call::TimeToLive(r)).await? {
            Reply::TimeToLive(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    /// LeaseLeases: the leases that live, earliest end first.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn lease_leases(&self) -> Result<LeaseLeasesResponse> {
        match self.call(Call::Leases).await? {
            Reply::Leases(answer) => Ok(answer),
            _ => Err(mismatch()),
        }
    }

    /// Removes up to `limit` leases that have ended by the database's clock, earliest first,
    /// each one's keys deleted at a revision of its own (what etcd's leader does when a lease
    /// expires). Any process may run it; a server runs it every poll interval, the recipes
    /// while they wait. It writes only when some lease has ended.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn reap(&self, limit: u32) -> Result<Reaped> {
        if let Reply::Ended(false) = self.call(Call::Ended).await? {
            let revision = self.revisions().await?.revision;
            return Ok(Reaped {
                leases: 0,
                revision,
            });
        }
        match self.call(Call::Reap(limit)).await? {
            Reply::Reaped { leases, revision } => Ok(Reaped { leases, revision }),
            _ => Err(mismatch()),
        }
    }

    /// Joins `member` (or joins it again) to the members of this database's etcd, listed for
    /// `ttl` past now unless it heartbeats.
    ///
    /// # Errors
    /// [`Error::Store`] (with [`crate::Error::Invalid`] for a name over 191 bytes).
    pub async fn member_join(&self, member: &Member, ttl: Duration) -> Result<Member> {
        crate::validate::name(&member.name)?;
        let ttl_ms = crate::validate::duration_ms("member ttl", ttl)?;
        match self.call(Call::Join { member, ttl_ms }).await? {
            Reply::Member(member) => Ok(member),
            _ => Err(mismatch()),
        }
    }

    /// Keeps member `id` listed for `ttl` past now; `false` if it was no longer listed (then
    /// it joins again).
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn member_heartbeat(&self, id: u64, ttl: Duration) -> Result<bool> {
        let ttl_ms = crate::validate::duration_ms("member ttl", ttl)?;
        match self.call(Call::Heartbeat { id, ttl_ms }).await? {
            Reply::Alive(alive) => Ok(alive),
            _ => Err(mismatch()),
        }
    }

    /// Removes member `id` from the list.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn member_leave(&self, id: u64) -> Result<()> {
        match self.call(Call::Leave(id)).await? {
            Reply::Left => Ok(()),
            _ => Err(mismatch()),
        }
    }

    /// The members listed now, by id.
    ///
    /// # Errors
    /// [`Error::Store`].
    pub async fn members(&self) -> Result<Vec<Member>> {
        match self.call(Call::Members).await? {
            Reply::Members(members) => Ok(members),
            _ => Err(mismatch()),
        }
    }
}
