//! The Lock recipe (etcd's `concurrency.Mutex`, served by `v3lock`): `name/<lease>` is put
//! if absent; the lock is held once no key of `name/` was created before it.

use super::super::error::{Error, Result};
use super::super::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use super::super::proto::etcdserverpb::request_op::Request as Op;
use super::super::proto::etcdserverpb::response_op::Response;
use super::super::proto::etcdserverpb::{
    DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
    TxnResponse,
};
use super::super::proto::mvccpb::KeyValue;
use super::super::proto::v3lockpb::{LockRequest, LockResponse, UnlockRequest, UnlockResponse};
use super::super::rules::span::prefix_end;
use super::super::Etcd;
use super::cleanup::{created_at, Cleanup};
use super::wait::{prefix_of, waiter_key};
use super::SESSION_TTL;

fn op(request: Op) -> RequestOp {
    RequestOp {
        request: Some(request),
    }
}

/// The key of `prefix` with the lowest create revision (etcd's `WithFirstCreate`).
pub(super) fn first_created(prefix: &[u8]) -> Op {
    Op::RequestRange(RangeRequest {
        key: prefix.to_vec(),
        range_end: prefix_end(prefix),
        limit: 1,
        sort_order: SortOrder::Ascend as i32,
        sort_target: SortTarget::Create as i32,
        ..RangeRequest::default()
    })
}

/// The key `key` (a plain get).
pub(super) fn get(key: &[u8]) -> Op {
    Op::RequestRange(RangeRequest {
        key: key.to_vec(),
        ..RangeRequest::default()
    })
}

/// The keys a Txn's `i`-th response read.
pub(super) fn read(answer: &TxnResponse, i: usize) -> &[KeyValue] {
    match answer.responses.get(i).and_then(|r| r.response.as_ref()) {
        Some(Response::ResponseRange(r)) => &r.kvs,
        _ => &[],
    }
}

impl Etcd {
    /// A lease for a recipe: `lease`, or a new one of [`SESSION_TTL`] seconds when it is 0 (as
    /// etcd's servers make for a request without one).
    pub(super) async fn session(&self, lease: i64) -> Result<i64> {
        if lease != 0 {
            return Ok(lease);
        }
        let granted = self
            .lease_grant(&LeaseGrantRequest {
                ttl: SESSION_TTL,
                id: 0,
            })
            .await?;
        Ok(granted.id)
    }

    /// Lock: waits until this waiter's key `name/<lease in hex>` has the lowest create
    /// revision under `name/` (etcd's `concurrency.Mutex.Lock`); the answer's key is the lock's
    /// key, whose create revision is the lock's fencing token. The key lives as long as the
    /// lease: when the lease ends (or is revoked), the lock is free.
    ///
    /// # Errors
    /// [`Error::LeaseNotFound`] for a lease that does not exist or has ended,
    /// [`Error::SessionExpired`] if the key went (its lease ended) while it waited;
    /// [`Error::Store`]. On an error while waiting, the key is deleted.
    ///
    /// # Cancel safety
    /// Dropped while it waits, it deletes its key (in a task of its own: best effort, or the
    /// key goes with its lease), as etcd's does when its context is cancelled. Dropped while
    /// its first Txn is being committed, the key may stay until its lease ends, as etcd's
    /// `Mutex` leaves it when its context ends during that Txn.
    pub async fn lock(&self, r: &LockRequest) -> Result<LockResponse> {
        let lease = self.session(r.lease).await?;
        let prefix = prefix_of(&r.name);
        let key = waiter_key(&prefix, lease);
        // Put the key if absent (or find it: this lease waits already), and read the holder.
        let acquire = TxnRequest {
            compare: vec![created_at(&key, 0)],
            success: vec![
                op(Op::RequestPut(PutRequest {
                    key: key.clone(),
                    lease,
                    ..PutRequest::default()
                })),
                op(first_created(&prefix)),
            ],
            failure: vec![op(get(&key)), op(first_created(&prefix))],
        };
        let answer = self.txn(&acquire).await?;
        let mut rev = answer.header.as_ref().map_or(0, |h| h.revision);
        if !answer.succeeded {
            rev = read(&answer, 0)
                .first()
                .map_or(rev, |kv| kv.create_revision);
        }
        let holder = read(&answer, 1).first();
        if holder.is_none_or(|kv| kv.create_revision == rev) {
            return Ok(LockResponse {
                header: answer.header,
                key,
            });
        }
        // Dropped or failed from here on, the key is deleted (the cleanup's drop).
        let cleanup = Cleanup::new(self, &key, None);
        self.wait_deletes(&prefix, rev - 1).await?;
        let now = self
            .range(&RangeRequest {
                key: key.clone(),
                ..RangeRequest::default()
            })
            .await?;
        cleanup.disarm();
        if now.kvs.is_empty() {
            return Err(Error::SessionExpired);
        }
        Ok(LockResponse {
            header: now.header,
            key,
        })
    }

    /// Unlock: deletes the lock's key (whoever holds it: etcd's `v3lock` does the same).
    ///
    /// # Errors
    /// [`Error::EmptyKey`]; [`Error::Store`].
    pub async fn unlock(&self, r: &UnlockRequest) -> Result<UnlockResponse> {
        let deleted = self
            .delete_range(&DeleteRangeRequest {
                key: r.key.clone(),
                range_end: Vec::new(),
                prev_kv: false,
            })
            .await?;
        Ok(UnlockResponse {
            header: deleted.header,
        })
    }
}
