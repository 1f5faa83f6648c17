//! What a recipe undoes when its caller stops waiting: dropped while it waits, a lock deletes
//! its key and a campaign resigns — in a task of its own, since a drop cannot wait (best
//! effort: without a runtime, or if that call fails, the key goes with its lease).

use super::super::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use super::super::proto::etcdserverpb::request_op::Request as Op;
use super::super::proto::etcdserverpb::{Compare, DeleteRangeRequest, RequestOp, TxnRequest};
use super::super::Etcd;

/// Deletes `key` when dropped armed: if created at `create_revision` (a campaign's resign),
/// or whatever its revision (a lock's unlock).
pub(super) struct Cleanup {
    etcd: Etcd,
    key: Vec<u8>,
    create_revision: Option<i64>,
    armed: bool,
}

impl Cleanup {
    pub(super) fn new(etcd: &Etcd, key: &[u8], create_revision: Option<i64>) -> Cleanup {
        Cleanup {
            etcd: etcd.clone(),
            key: key.to_vec(),
            create_revision,
            armed: true,
        }
    }

    /// The key stays.
    pub(super) fn disarm(mut self) {
        self.armed = false;
    }
}

/// A Txn that deletes `key` if it was created at `create_revision` (etcd's `Resign`).
pub(super) fn delete_if_created_at(key: &[u8], create_revision: i64) -> TxnRequest {
    TxnRequest {
        compare: vec![created_at(key, create_revision)],
        success: vec![RequestOp {
            request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                key: key.to_vec(),
                range_end: Vec::new(),
                prev_kv: false,
            })),
        }],
        failure: Vec::new(),
    }
}

/// `create_revision(key) = revision`.
pub(super) fn created_at(key: &[u8], revision: i64) -> Compare {
    Compare {
        result: CompareResult::Equal as i32,
        target: CompareTarget::Create as i32,
        key: key.to_vec(),
        range_end: Vec::new(),
        target_union: Some(TargetUnion::CreateRevision(revision)),
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (etcd, key, create_revision) = (
            self.etcd.clone(),
            std::mem::take(&mut self.key),
            self.create_revision,
        );
        runtime.spawn(async move {
            let done = match create_revision {
                Some(revision) => etcd
                    .txn(&delete_if_created_at(&key, revision))
                    .await
                    .map(|_| ()),
                None => etcd
                    .delete_range(&DeleteRangeRequest {
                        key: key.clone(),
                        range_end: Vec::new(),
                        prev_kv: false,
                    })
                    .await
                    .map(|_| ()),
            };
            if let Err(e) = done {
                tracing::warn!(key = %String::from_utf8_lossy(&key), error = %e,
                    "an abandoned etcd lock or campaign could not remove its key; it goes with its lease");
            }
        });
    }
}
