//! Checks of what a request carries before it runs, as etcd's gRPC server makes them
//! (`api/v3rpc/key.go`), plus tenure's bound on a key's length.

use super::error::{Error, Result};
use super::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use super::proto::etcdserverpb::request_op::Request as Op;
use super::proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use super::rules::span::Span;
use std::collections::BTreeSet;

/// The longest key tenure stores, in bytes: what every engine can index as a primary key
/// (PostgreSQL's btree takes index rows up to about 2.7 kB, InnoDB's index keys up to 3072
/// bytes). A Put of a longer key is refused with "etcdserver: request is too large".
pub const MAX_KEY_BYTES: usize = 2048;
/// The largest request, encoded (etcd's default `--max-request-bytes`, 1.5 MiB).
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024 * 3 / 2;
/// The most compares, and operations in each branch, of a Txn (etcd's default
/// `--max-txn-ops`).
pub const MAX_TXN_OPS: usize = 128;

/// Refuses a request larger than [`MAX_REQUEST_BYTES`] encoded.
pub(super) fn size(request: &impl prost::Message) -> Result<()> {
    if request.encoded_len() > MAX_REQUEST_BYTES {
        return Err(Error::RequestTooLarge);
    }
    Ok(())
}

pub(super) fn range(r: &RangeRequest) -> Result<()> {
    if r.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if SortOrder::try_from(r.sort_order).is_err() || SortTarget::try_from(r.sort_target).is_err() {
        return Err(Error::InvalidSortOption);
    }
    Ok(())
}

pub(super) fn put(r: &PutRequest) -> Result<()> {
    if r.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    if r.ignore_value && !r.value.is_empty() {
        return Err(Error::ValueProvided);
    }
    if r.ignore_lease && r.lease != 0 {
        return Err(Error::LeaseProvided);
    }
    if r.key.len() > MAX_KEY_BYTES {
        return Err(Error::RequestTooLarge);
    }
    Ok(())
}

pub(super) fn delete(r: &DeleteRangeRequest) -> Result<()> {
    if r.key.is_empty() {
        return Err(Error::EmptyKey);
    }
    Ok(())
}

/// A Txn's checks: the number of compares and operations, keys, each operation's own checks
/// (a nested Txn's bound is what its parent leaves), then the duplicate-key rule.
pub(super) fn txn(r: &TxnRequest) -> Result<()> {
    ops(r, MAX_TXN_OPS)?;
    intervals(&r.success)?;
    intervals(&r.failure)?;
    Ok(())
}

fn ops(r: &TxnRequest, max: usize) -> Result<()> {
    let count = r.compare.len().max(r.success.len()).max(r.failure.len());
    if count > max {
        return Err(Error::TooManyOps);
    }
    if r.compare.iter().any(|c| c.key.is_empty()) {
        return Err(Error::EmptyKey);
    }
    for op in r.success.iter().chain(&r.failure) {
        match &op.request {
            Some(Op::RequestRange(r)) => range(r)?,
            Some(Op::RequestPut(r)) => put(r)?,
            Some(Op::RequestDeleteRange(r)) => delete(r)?,
            Some(Op::RequestTxn(r)) => ops(r, max - count)?,
            None => return Err(Error::KeyNotFound),
        }
    }
    Ok(())
}

/// The keys a list of operations puts and the spans it deletes (nested Txns included).
#[derive(Default)]
struct Writes {
    puts: BTreeSet<Vec<u8>>,
    deletes: Vec<Span>,
}

impl Writes {
    fn deletes(&self, key: &[u8]) -> bool {
        let one = Span::One(key.to_vec());
        self.deletes.iter().any(|d| d.meets(&one))
    }
}

/// etcd's `checkIntervals`: no key is put twice, nor put and deleted, by one list of
/// operations and the Txns nested in it; one put in a nested Txn's `success` and the same in
/// its `failure` are fine (only one branch runs).
fn intervals(ops: &[RequestOp]) -> Result<Writes> {
    let mut w = Writes::default();
    for op in ops {
        if let Some(Op::RequestDeleteRange(d)) = &op.request {
            let span = match d.range_end.as_slice() {
                [] => Span::One(d.key.clone()),
                // etcd's interval tree reads a "\0" end as a byte string below every key, so
                // such a delete meets no put here, exactly as in etcd.
                [0] => Span::Empty,
                end => Span::new(&d.key, end),
            };
            w.deletes.push(span);
        }
    }
    for op in ops {
        let Some(Op::RequestTxn(t)) = &op.request else {
            continue;
        };
        let then = intervals(&t.success)?;
        let otherwise = intervals(&t.failure)?;
        for key in &then.puts {
            if w.puts.contains(key) || w.deletes(key) {
                return Err(Error::DuplicateKey);
            }
        }
        for key in &otherwise.puts {
            if (w.puts.contains(key) && !then.puts.contains(key)) || w.deletes(key) {
                return Err(Error::DuplicateKey);
            }
        }
        w.puts.extend(then.puts);
        w.puts.extend(otherwise.puts);
        w.deletes.extend(then.deletes);
        w.deletes.extend(otherwise.deletes);
    }
    for op in ops {
        if let Some(Op::RequestPut(p)) = &op.request {
            if w.puts.contains(&p.key) || w.deletes(&p.key) {
                return Err(Error::DuplicateKey);
            }
            w.puts.insert(p.key.clone());
        }
    }
    Ok(w)
}

/// Whether a Txn may write (any operation, in either branch at any depth, is not a Range):
/// then it runs as a writer and takes the revision first.
pub(super) fn txn_writes(r: &TxnRequest) -> bool {
    r.success
        .iter()
        .chain(&r.failure)
        .any(|op| match &op.request {
            Some(Op::RequestRange(_)) | None => false,
            Some(Op::RequestTxn(t)) => txn_writes(t),
            Some(_) => true,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::etcd::proto::etcdserverpb::Compare;

    fn put_op(key: &str) -> RequestOp {
        RequestOp {
            request: Some(Op::RequestPut(PutRequest {
                key: key.into(),
                ..PutRequest::default()
            })),
        }
    }

    fn del_op(key: &str, end: &str) -> RequestOp {
        RequestOp {
            request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                key: key.into(),
                range_end: end.into(),
                prev_kv: false,
            })),
        }
    }

    fn get_op(key: &str) -> RequestOp {
        RequestOp {
            request: Some(Op::RequestRange(RangeRequest {
                key: key.into(),
                ..RangeRequest::default()
            })),
        }
    }

    fn txn_op(success: Vec<RequestOp>, failure: Vec<RequestOp>) -> RequestOp {
        RequestOp {
            request: Some(Op::RequestTxn(TxnRequest {
                compare: Vec::new(),
                success,
                failure,
            })),
        }
    }

    fn check(success: Vec<RequestOp>) -> Result<()> {
        txn(&TxnRequest {
            compare: Vec::new(),
            success,
            failure: Vec::new(),
        })
    }

    #[test]
    fn duplicate_keys() {
        assert!(check(vec![put_op("a"), put_op("b")]).is_ok());
        assert!(matches!(
            check(vec![put_op("a"), put_op("a")]),
            Err(Error::DuplicateKey)
        ));
        assert!(matches!(
            check(vec![del_op("a", "c"), put_op("b")]),
            Err(Error::DuplicateKey)
        ));
        assert!(
            check(vec![del_op("a", "\0"), put_op("z")]).is_ok(),
            "as etcd's interval tree"
        );
        assert!(check(vec![del_op("a", "c"), put_op("c")]).is_ok());
        assert!(
            check(vec![del_op("a", "c"), del_op("b", "d")]).is_ok(),
            "deletes may overlap"
        );
        assert!(check(vec![get_op("a"), put_op("a")]).is_ok());
        // Nested: the same put in both branches is fine, beside an outer put it is not.
        assert!(check(vec![txn_op(vec![put_op("a")], vec![put_op("a")])]).is_ok());
        assert!(matches!(
            check(vec![txn_op(vec![put_op("a")], vec![]), put_op("a")]),
            Err(Error::DuplicateKey)
        ));
        assert!(matches!(
            check(vec![del_op("a", ""), txn_op(vec![], vec![put_op("a")])]),
            Err(Error::DuplicateKey)
        ));
    }

    #[test]
    fn counts_keys_and_ops() {
        let many: Vec<RequestOp> = (0..=MAX_TXN_OPS)
            .map(|i| put_op(&format!("k{i}")))
            .collect();
        assert!(matches!(check(many.clone()), Err(Error::TooManyOps)));
        assert!(check(many[..MAX_TXN_OPS].to_vec()).is_ok());
        let compares = TxnRequest {
            compare: vec![Compare::default(); 1],
            success: Vec::new(),
            failure: Vec::new(),
        };
        assert!(matches!(txn(&compares), Err(Error::EmptyKey)));
        assert!(matches!(
            check(vec![RequestOp { request: None }]),
            Err(Error::KeyNotFound)
        ));
        assert!(matches!(check(vec![put_op("")]), Err(Error::EmptyKey)));
        // A nested Txn may use what its parent leaves.
        let inner: Vec<RequestOp> = (0..100).map(|i| get_op(&format!("k{i}"))).collect();
        let outer = vec![txn_op(inner.clone(), vec![]); 28];
        assert!(check(outer).is_ok());
        let outer = vec![txn_op(inner, vec![]); 29];
        assert!(matches!(check(outer), Err(Error::TooManyOps)));
    }

    #[test]
    fn puts_and_ranges() {
        let mut p = PutRequest {
            key: b"k".to_vec(),
            ignore_value: true,
            value: b"v".to_vec(),
            ..PutRequest::default()
        };
        assert!(matches!(put(&p), Err(Error::ValueProvided)));
        p.value.clear();
        p.ignore_lease = true;
        p.lease = 5;
        assert!(matches!(put(&p), Err(Error::LeaseProvided)));
        p.lease = 0;
        assert!(put(&p).is_ok());
        p.key = vec![b'k'; MAX_KEY_BYTES + 1];
        assert!(matches!(put(&p), Err(Error::RequestTooLarge)));
        let mut r = RangeRequest {
            key: b"k".to_vec(),
            ..RangeRequest::default()
        };
        assert!(range(&r).is_ok());
        r.sort_order = 9;
        assert!(matches!(range(&r), Err(Error::InvalidSortOption)));
        let big = PutRequest {
            key: b"k".to_vec(),
            value: vec![0; MAX_REQUEST_BYTES],
            ..PutRequest::default()
        };
        assert!(matches!(size(&big), Err(Error::RequestTooLarge)));
        assert!(!txn_writes(&TxnRequest {
            compare: Vec::new(),
            success: vec![get_op("a")],
            failure: vec![txn_op(vec![get_op("b")], vec![])],
        }));
        assert!(txn_writes(&TxnRequest {
            compare: Vec::new(),
            success: vec![get_op("a")],
            failure: vec![txn_op(vec![], vec![del_op("b", "")])],
        }));
    }
}
