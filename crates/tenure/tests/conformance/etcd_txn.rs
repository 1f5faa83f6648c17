//! The etcd layer's Txn on one backend: every compare target and result, both branches,
//! nested Txns, one revision for all of a Txn's writes, and etcd's refusals.

use crate::etcd_support::{current, get, grant, put, put_leased, revision, Scoped};
use tenure::etcd::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use tenure::etcd::proto::etcdserverpb::request_op::Request as Op;
use tenure::etcd::proto::etcdserverpb::response_op::Response;
use tenure::etcd::proto::etcdserverpb::{
    Compare, DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use tenure::etcd::Error;
use tenure::Store;

pub(crate) fn cmp(
    key: &str,
    target: CompareTarget,
    result: CompareResult,
    union: TargetUnion,
) -> Compare {
    Compare {
        result: result as i32,
        target: target as i32,
        key: key.into(),
        range_end: Vec::new(),
        target_union: Some(union),
    }
}

pub(crate) fn put_op(key: &str, value: &str, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest {
            key: key.into(),
            value: value.into(),
            lease,
            ..PutRequest::default()
        })),
    }
}

fn get_op(key: &str, end: &str) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestRange(RangeRequest {
            key: key.into(),
            range_end: end.into(),
            ..RangeRequest::default()
        })),
    }
}

fn del_op(key: &str) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
            key: key.into(),
            range_end: Vec::new(),
            prev_kv: false,
        })),
    }
}

fn txn(compare: Vec<Compare>, success: Vec<RequestOp>, failure: Vec<RequestOp>) -> TxnRequest {
    TxnRequest {
        compare,
        success,
        failure,
    }
}

/// Each compare target and result decides the branch; all of a branch's writes are at one
/// revision, and a Range after a Put in the same Txn sees it.
pub(crate) async fn etcd_txn_compares_and_branches(store: Store) {
    use CompareResult::*;
    use CompareTarget::*;
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    let lease = grant(etcd, 60).await;
    put(etcd, "x", "b").await; // 2
    put_leased(etcd, "x", "b", lease).await; // 3: version 2, create 2, mod 3, lease
    for (compare, expected) in [
        (cmp("x", Version, Equal, TargetUnion::Version(2)), true),
        (cmp("x", Version, Greater, TargetUnion::Version(2)), false),
        (
            cmp("x", Create, Equal, TargetUnion::CreateRevision(2)),
            true,
        ),
        (cmp("x", Mod, Less, TargetUnion::ModRevision(4)), true),
        (cmp("x", Mod, NotEqual, TargetUnion::ModRevision(3)), false),
        (
            cmp("x", Value, Greater, TargetUnion::Value("a".into())),
            true,
        ),
        (
            cmp("x", Value, Equal, TargetUnion::Value("c".into())),
            false,
        ),
        (cmp("x", Lease, Equal, TargetUnion::Lease(lease)), true),
        (
            cmp("missing", Create, Equal, TargetUnion::CreateRevision(0)),
            true,
        ),
        (
            cmp("missing", Value, NotEqual, TargetUnion::Value("z".into())),
            false,
        ),
    ] {
        let answer = etcd
            .txn(&txn(vec![compare.clone()], vec![], vec![]))
            .await
            .unwrap();
        assert_eq!(answer.succeeded, expected, "{compare:?}");
        assert_eq!(
            revision(&answer.header),
            3,
            "a Txn that writes nothing leaves the revision"
        );
    }
    // A range compare holds when it holds for every key of the range.
    put(etcd, "r/1", "v").await; // 4
    put(etcd, "r/2", "v").await; // 5
    let mut ranged = cmp("r/", Create, Greater, TargetUnion::CreateRevision(3));
    ranged.range_end = "r0".into();
    assert!(
        etcd.txn(&txn(vec![ranged.clone()], vec![], vec![]))
            .await
            .unwrap()
            .succeeded
    );
    ranged.target_union = Some(TargetUnion::CreateRevision(4));
    assert!(
        !etcd
            .txn(&txn(vec![ranged], vec![], vec![]))
            .await
            .unwrap()
            .succeeded
    );

    // The failure branch: three writes at one revision; the range after them sees them.
    let t = txn(
        vec![cmp("x", Value, Equal, TargetUnion::Value("nope".into()))],
        vec![put_op("never", "", 0)],
        vec![
            put_op("y", "1", 0),
            del_op("r/1"),
            put_op("z", "1", 0),
            get_op("\0", "\0"),
        ],
    );
    let answer = etcd.txn(&t).await.unwrap();
    assert!(!answer.succeeded);
    assert_eq!(revision(&answer.header), 6);
    let Some(Response::ResponseRange(seen)) = &answer.responses[3].response else {
        panic!("{answer:?}");
    };
    let keys: Vec<&[u8]> = seen.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, [&b"r/2"[..], b"x", b"y", b"z"]);
    assert_eq!(revision(&seen.header), 6);
    assert_eq!(get(etcd, "y").await.unwrap().mod_revision, 6);
    assert_eq!(get(etcd, "z").await.unwrap().mod_revision, 6);
    assert!(get(etcd, "never").await.is_none());
    let events = etcd.events(6, b"\0", b"\0", 100).await.unwrap();
    assert_eq!(events.events.len(), 3);
    assert_eq!(current(etcd).await, 6);
    s.drop_tables().await;
}

/// Nested Txns: their compares are read before any write; the branch each takes runs in
/// order; a nested Txn's header is empty.
pub(crate) async fn etcd_txn_nested(store: Store) {
    use CompareResult::*;
    use CompareTarget::*;
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    put(etcd, "n", "1").await; // 2
                               // The outer Txn puts m, the nested one asks whether m is absent: read before the put, so
                               // it is, and the nested success branch runs.
    let inner = txn(
        vec![cmp("m", Create, Equal, TargetUnion::CreateRevision(0))],
        vec![put_op("inner", "yes", 0)],
        vec![put_op("inner", "no", 0)],
    );
    let outer = txn(
        vec![cmp("n", Value, Equal, TargetUnion::Value("1".into()))],
        vec![
            put_op("m", "1", 0),
            RequestOp {
                request: Some(Op::RequestTxn(inner)),
            },
        ],
        vec![],
    );
    let answer = etcd.txn(&outer).await.unwrap();
    assert!(answer.succeeded);
    assert_eq!(revision(&answer.header), 3);
    let Some(Response::ResponseTxn(nested)) = &answer.responses[1].response else {
        panic!("{answer:?}");
    };
    assert!(nested.succeeded);
    assert_eq!(nested.header.as_ref().map(|h| h.revision), Some(0));
    assert_eq!(get(etcd, "inner").await.unwrap().value, b"yes");
    assert_eq!(get(etcd, "inner").await.unwrap().mod_revision, 3);
    s.drop_tables().await;
}

/// etcd's refusals, each writing nothing: a duplicate key, too many operations, a Put with an
/// unknown lease after other writes of the same Txn, a Range of a future revision.
pub(crate) async fn etcd_txn_refusals_write_nothing(store: Store) {
    use CompareResult::*;
    use CompareTarget::*;
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    put(etcd, "k", "1").await; // 2
    let duplicate = txn(
        vec![],
        vec![put_op("a", "1", 0), put_op("a", "2", 0)],
        vec![],
    );
    assert!(matches!(
        etcd.txn(&duplicate).await,
        Err(Error::DuplicateKey)
    ));
    let many = txn(
        vec![],
        (0..129).map(|i| put_op(&format!("k{i}"), "", 0)).collect(),
        vec![],
    );
    assert!(matches!(etcd.txn(&many).await, Err(Error::TooManyOps)));
    let unknown_lease = txn(
        vec![cmp("k", Version, Greater, TargetUnion::Version(0))],
        vec![put_op("a", "1", 0), del_op("k"), put_op("b", "1", 99)],
        vec![],
    );
    assert!(matches!(
        etcd.txn(&unknown_lease).await,
        Err(Error::LeaseNotFound)
    ));
    let future = txn(
        vec![],
        vec![
            put_op("a", "1", 0),
            RequestOp {
                request: Some(Op::RequestRange(RangeRequest {
                    key: "k".into(),
                    revision: 7,
                    ..RangeRequest::default()
                })),
            },
        ],
        vec![],
    );
    assert!(matches!(
        etcd.txn(&future).await,
        Err(Error::FutureRevision)
    ));
    assert_eq!(current(etcd).await, 2);
    assert!(get(etcd, "a").await.is_none());
    assert_eq!(get(etcd, "k").await.unwrap().value, b"1");
    s.drop_tables().await;
}
