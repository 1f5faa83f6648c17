//! Txn with etcd's semantics (`server/etcdserver/txn/txn.go`): every compare, of the Txn and
//! of the Txns nested in the branch it takes, is evaluated first, on the keys as they are
//! before any write; the operations of the branches taken are then checked (a Range's
//! revision, a Put's lease and kept key) and run in order, each seeing the ones before.

use super::error::{Error, Result};
use super::kv::{check_put, delete, header, put, range, Writing};
use super::proto::etcdserverpb::request_op::Request as Op;
use super::proto::etcdserverpb::response_op::Response;
use super::proto::etcdserverpb::{ResponseHeader, ResponseOp, TxnRequest, TxnResponse};
use super::rows::EtcdTx;
use super::rules::compare::holds;
use super::rules::span::Span;
use std::future::Future;
use std::pin::Pin;

type Boxed<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

/// Which branch a Txn takes, and which the Txns nested in that branch take, in order.
#[derive(Debug)]
struct Path {
    succeeded: bool,
    nested: Vec<Path>,
}

/// A Txn in a transaction that locked revision `w`'s base if the Txn may write (else read it),
/// with compaction floor `floor`.
pub(super) async fn txn(
    tx: &mut EtcdTx<'_>,
    w: &mut Writing,
    r: &TxnRequest,
    floor: i64,
) -> Result<TxnResponse> {
    let path = path(tx, r).await?;
    check(tx, r, &path, w.seen(), floor).await?;
    let mut response = run(tx, w, r, &path, floor).await?;
    response.header = header(w.seen());
    Ok(response)
}

fn branch(r: &TxnRequest, succeeded: bool) -> &[super::proto::etcdserverpb::RequestOp] {
    if succeeded {
        &r.success
    } else {
        &r.failure
    }
}

fn nested(r: &TxnRequest, succeeded: bool) -> impl Iterator<Item = &TxnRequest> {
    branch(r, succeeded)
        .iter()
        .filter_map(|op| match &op.request {
            Some(Op::RequestTxn(t)) => Some(t),
            _ => None,
        })
}

/// Evaluates the compares of `r` and of the Txns nested in the branch it takes (etcd's
/// `compareToPath`).
fn path<'a>(tx: &'a mut EtcdTx<'_>, r: &'a TxnRequest) -> Boxed<'a, Path> {
    Box::pin(async move {
        let mut succeeded = true;
        for c in &r.compare {
            let kvs = tx.kvs(&Span::new(&c.key, &c.range_end), None).await?;
            if !holds(c, &kvs) {
                succeeded = false;
                break;
            }
        }
        let mut inner = Vec::new();
        for t in nested(r, succeeded) {
            inner.push(path(tx, t).await?);
        }
        Ok(Path {
            succeeded,
            nested: inner,
        })
    })
}

/// etcd's `checkTxn`: before anything runs, each Range of the branches taken reads a revision
/// that exists, and each Put names a live lease and keeps only a key that exists.
fn check<'a>(
    tx: &'a mut EtcdTx<'_>,
    r: &'a TxnRequest,
    path: &'a Path,
    seen: i64,
    floor: i64,
) -> Boxed<'a, ()> {
    Box::pin(async move {
        let mut inner = path.nested.iter();
        for op in branch(r, path.succeeded) {
            match &op.request {
                Some(Op::RequestRange(rr)) if rr.revision > seen => {
                    return Err(Error::FutureRevision)
                }
                Some(Op::RequestRange(rr)) if rr.revision > 0 && rr.revision < floor => {
                    return Err(Error::Compacted { floor })
                }
                Some(Op::RequestPut(p)) => check_put(tx, p).await?,
                Some(Op::RequestTxn(t)) => {
                    let Some(p) = inner.next() else {
                        return Err(Error::KeyNotFound);
                    };
                    check(tx, t, p, seen, floor).await?;
                }
                _ => {}
            }
        }
        Ok(())
    })
}

/// Runs the branches `path` takes; the response (its header is the caller's).
fn run<'a>(
    tx: &'a mut EtcdTx<'_>,
    w: &'a mut Writing,
    r: &'a TxnRequest,
    path: &'a Path,
    floor: i64,
) -> Boxed<'a, TxnResponse> {
    Box::pin(async move {
        let mut inner = path.nested.iter();
        let mut responses = Vec::new();
        for op in branch(r, path.succeeded) {
            let response = match &op.request {
                Some(Op::RequestRange(rr)) => {
                    Response::ResponseRange(range(tx, rr, w.seen(), floor).await?)
                }
                Some(Op::RequestPut(p)) => Response::ResponsePut(put(tx, w, p).await?),
                Some(Op::RequestDeleteRange(d)) => {
                    Response::ResponseDeleteRange(delete(tx, w, d).await?)
                }
                Some(Op::RequestTxn(t)) => {
                    let Some(p) = inner.next() else {
                        return Err(Error::KeyNotFound);
                    };
                    let mut nested = run(tx, w, t, p, floor).await?;
                    // A nested Txn's header is empty, as etcd's (only the outer one is filled).
                    nested.header = Some(ResponseHeader::default());
                    Response::ResponseTxn(nested)
                }
                None => return Err(Error::KeyNotFound),
            };
            responses.push(ResponseOp {
                response: Some(response),
            });
        }
        Ok(TxnResponse {
            header: None,
            succeeded: path.succeeded,
            responses,
        })
    })
}
