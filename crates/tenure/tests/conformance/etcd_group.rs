//! Group commit: the writes of keys that queue on one handle while it commits another share
//! the next transaction, each at revisions of its own and answered as if it had run alone
//! after the ones before it; a write that refuses leaves the batch and the rest commit (a
//! transaction that fails: `etcd_group_failures.rs`).
//!
//! Each test holds one put's transaction open (`FailingBackend::hold`), queues its writes
//! behind it, and only then lets it commit: what queued is one batch, whatever the machine's
//! load.

use crate::etcd_support::{get, put, revision, Scoped};
use crate::etcd_txn::{cmp, put_op};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::{CountingBackend, FailingBackend};
use tenure::etcd::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use tenure::etcd::proto::etcdserverpb::request_op::Request as Op;
use tenure::etcd::proto::etcdserverpb::response_op::Response;
use tenure::etcd::proto::etcdserverpb::{
    DeleteRangeRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use tenure::etcd::{Error, Etcd};
use tenure::Store;
use tokio::task::JoinHandle;
use tokio::time::{timeout, Instant};

/// How long the queued writes may take to reach the queue (a loaded machine included).
const QUEUED_WITHIN: Duration = Duration::from_secs(30);

/// A write of keys, as a test sends it.
#[derive(Clone)]
pub(crate) enum W {
    Put(PutRequest),
    Delete(DeleteRangeRequest),
    Txn(TxnRequest),
}

/// What it answered: the header's revision, and the answer itself.
#[derive(Debug)]
pub(crate) enum A {
    Put(i64, Option<tenure::etcd::proto::mvccpb::KeyValue>),
    Delete(i64, i64),
    Txn(i64, bool, Vec<Response>),
}

pub(crate) fn put_req(key: &str, value: &str, lease: i64) -> W {
    W::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        prev_kv: true,
        ..PutRequest::default()
    })
}

pub(crate) fn delete_req(key: &str) -> W {
    W::Delete(DeleteRangeRequest {
        key: key.into(),
        prev_kv: true,
        ..DeleteRangeRequest::default()
    })
}

/// The lock recipe's Txn: `key` created if it does not exist, else read.
pub(crate) fn lock_req(key: &str, value: &str) -> W {
    W::Txn(TxnRequest {
        compare: vec![cmp(
            key,
            CompareTarget::Create,
            CompareResult::Equal,
            TargetUnion::CreateRevision(0),
        )],
        success: vec![put_op(key, value, 0)],
        failure: vec![RequestOp {
            request: Some(Op::RequestRange(RangeRequest {
                key: key.into(),
                ..RangeRequest::default()
            })),
        }],
    })
}

/// A Txn whose put keeps the value of `key` (`ignore_value`): refused (`KeyNotFound`) where
/// the key does not exist.
pub(crate) fn keeping_req(key: &str) -> W {
    W::Txn(TxnRequest {
        success: vec![RequestOp {
            request: Some(Op::RequestPut(PutRequest {
                key: key.into(),
                ignore_value: true,
                ..PutRequest::default()
            })),
        }],
        ..TxnRequest::default()
    })
}

async fn send(etcd: &Etcd, w: W) -> Result<A, Error> {
    Ok(match w {
        W::Put(p) => {
            let r = etcd.put(&p).await?;
            A::Put(revision(&r.header), r.prev_kv)
        }
        W::Delete(d) => {
            let r = etcd.delete_range(&d).await?;
            A::Delete(revision(&r.header), r.deleted)
        }
        W::Txn(t) => {
            let r = etcd.txn(&t).await?;
            let responses = r.responses.into_iter().filter_map(|o| o.response);
            A::Txn(revision(&r.header), r.succeeded, responses.collect())
        }
    })
}

/// `f`, counting itself in `polled` once it has been polled: the first poll of an etcd write
/// puts it in its handle's queue.
async fn counted<F: Future>(f: F, polled: &AtomicUsize) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut first = true;
    std::future::poll_fn(|cx| {
        let out = f.as_mut().poll(cx);
        if std::mem::take(&mut first) {
            polled.fetch_add(1, Ordering::SeqCst);
        }
        out
    })
    .await
}

/// An etcd of its own whose transactions are counted and can be held or failed.
pub(crate) struct Harness {
    s: Scoped,
    pub(crate) failing: Arc<FailingBackend>,
    counting: Arc<CountingBackend>,
    pub(crate) etcd: Etcd,
}

impl Harness {
    pub(crate) async fn new(store: Store) -> Harness {
        let s = Scoped::new(store).await;
        let failing = Arc::new(FailingBackend::new(s.store().backend().clone()));
        let counting = Arc::new(CountingBackend::new(failing.clone()));
        let etcd = Etcd::new(Store::from_backend(
            counting.clone(),
            Duration::from_secs(30),
        ));
        Harness {
            s,
            failing,
            counting,
            etcd,
        }
    }

    /// Puts `first` and holds its transaction open, queues `writes` behind it (each sent by
    /// a task of its own), then lets the first commit: the transactions the queued writes took
    /// (counted from the moment the first committed), and what each answered, in `writes`'s
    /// order.
    pub(crate) async fn queued_behind(
        &self,
        first: &str,
        writes: Vec<W>,
    ) -> (u64, Vec<Result<A, Error>>) {
        let earlier = self.failing.held();
        self.failing.hold("etcd_put");
        let etcd = self.etcd.clone();
        let first = first.to_string();
        let held = tokio::spawn(async move { put(&etcd, &first, "held").await });
        self.failing.holding_more_than(earlier).await;
        let polled = Arc::new(AtomicUsize::new(0));
        let n = writes.len();
        let tasks: Vec<JoinHandle<Result<A, Error>>> = writes
            .into_iter()
            .map(|w| {
                let (etcd, polled) = (self.etcd.clone(), polled.clone());
                tokio::spawn(async move { counted(send(&etcd, w), &polled).await })
            })
            .collect();
        let started = Instant::now();
        while polled.load(Ordering::SeqCst) < n {
            assert!(
                started.elapsed() < QUEUED_WITHIN,
                "the writes did not queue"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let before = self.counting.counts();
        self.failing.let_go();
        held.await.expect("the held put");
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(
                timeout(QUEUED_WITHIN, t)
                    .await
                    .expect("a queued write answers")
                    .unwrap(),
            );
        }
        // The held transaction was counted when it began, before `before`.
        (self.counting.counts().since(before).transactions, answers)
    }

    pub(crate) async fn done(self) {
        self.etcd.store().close().await;
        self.s.drop_tables().await;
    }
}

pub(crate) fn changed_at(a: &A) -> Option<i64> {
    match a {
        A::Put(rev, _) => Some(*rev),
        A::Delete(rev, deleted) => (*deleted > 0).then_some(*rev),
        A::Txn(rev, succeeded, _) => succeeded.then_some(*rev),
    }
}

/// Twelve writes queued together commit in one transaction, each at a revision of its own
/// (gapless, after the held put's), each seeing the ones before it: six puts of one key chain
/// their `prev_kv`s and versions, one of three lock Txns takes the key and the other two read
/// it, a delete of nothing answers the revision of its place.
pub(crate) async fn etcd_writes_queued_together_commit_as_one(store: Store) {
    let h = Harness::new(store).await;
    let seed = put(&h.etcd, "q/seed", "s").await;
    let mut writes: Vec<W> = (0..6)
        .map(|i| put_req("q/same", &i.to_string(), 0))
        .collect();
    writes.extend((0..3).map(|i| lock_req("q/lock", &i.to_string())));
    writes.push(delete_req("q/seed"));
    writes.push(delete_req("q/none"));
    writes.push(put_req("q/other", "o", 0));
    let (transactions, answers) = h.queued_behind("q/first", writes).await;
    let answers: Vec<A> = answers
        .into_iter()
        .map(|a| a.expect("every write commits"))
        .collect();
    assert_eq!(transactions, 1, "twelve queued writes, one transaction");
    let first = seed + 1;
    // Nine writes changed something: revisions first+1 ..= first+9, one each.
    let mut revisions: Vec<i64> = answers.iter().filter_map(changed_at).collect();
    revisions.sort_unstable();
    assert_eq!(revisions, ((first + 1)..=(first + 9)).collect::<Vec<_>>());
    // The puts of one key, in revision order: each saw the one before.
    let mut same: Vec<(i64, Option<_>)> = answers[..6]
        .iter()
        .map(|a| match a {
            A::Put(rev, prev) => (*rev, prev.clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    same.sort_by_key(|(rev, _)| *rev);
    assert!(same[0].1.is_none(), "the first put of q/same made it");
    for pair in same.windows(2) {
        let prev = pair[1]
            .1
            .as_ref()
            .expect("a put after another has a prev_kv");
        assert_eq!(prev.mod_revision, pair[0].0);
        assert_eq!(prev.create_revision, same[0].0);
    }
    let now = get(&h.etcd, "q/same").await.expect("q/same");
    assert_eq!((now.version, now.mod_revision), (6, same[5].0));
    // One lock Txn took q/lock; the others, after it, read it.
    let taken: Vec<i64> = answers[6..9].iter().filter_map(changed_at).collect();
    assert_eq!(taken.len(), 1, "{:?}", &answers[6..9]);
    for a in &answers[6..9] {
        match a {
            A::Txn(rev, false, responses) => {
                assert!(*rev >= taken[0], "a Txn that read the lock ran after it");
                let Some(Response::ResponseRange(r)) = responses.first() else {
                    panic!("{responses:?}");
                };
                assert_eq!(r.kvs[0].create_revision, taken[0]);
            }
            A::Txn(_, true, _) => {}
            other => panic!("{other:?}"),
        }
    }
    // The delete of nothing changed nothing, and answered a revision of the batch.
    match answers[10] {
        A::Delete(rev, 0) => assert!((first..=first + 9).contains(&rev), "{rev}"),
        ref other => panic!("{other:?}"),
    }
    assert!(get(&h.etcd, "q/seed").await.is_none());
    let last = h
        .etcd
        .range(&RangeRequest {
            key: "q/".into(),
            range_end: "q0".into(),
            ..RangeRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(revision(&last.header), first + 9);
    h.done().await;
}

/// A write that refuses in a batch (a put with a lease that never existed; a Txn whose put
/// keeps the value of a key that does not exist) is answered with its refusal, and the rest
/// commit without it at gapless revisions: each refusal costs the batch one rollback, and a
/// refused write that was not the first of its transaction one more, run again after the
/// others committed (`etcd_group_failures.rs` shows why).
pub(crate) async fn etcd_a_refused_write_leaves_its_batch(store: Store) {
    let h = Harness::new(store).await;
    let seed = put(&h.etcd, "r/seed", "s").await;
    let keeping = keeping_req("r/missing");
    let mut writes: Vec<W> = (0..3).map(|i| put_req(&format!("r/{i}"), "v", 0)).collect();
    writes.push(put_req("r/leased", "v", 7_777_777));
    writes.push(put_req("r/3", "v", 0));
    writes.push(keeping);
    writes.push(put_req("r/4", "v", 0));
    let (transactions, answers) = h.queued_behind("r/first", writes).await;
    assert!(
        matches!(answers[3], Err(Error::LeaseNotFound)),
        "{:?}",
        answers[3]
    );
    assert!(
        matches!(answers[5], Err(Error::KeyNotFound)),
        "{:?}",
        answers[5]
    );
    let mut revisions: Vec<i64> = answers
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 5)
        .map(|(_, a)| changed_at(a.as_ref().expect("the others commit")).expect("a put"))
        .collect();
    revisions.sort_unstable();
    let first = seed + 1;
    assert_eq!(revisions, ((first + 1)..=(first + 5)).collect::<Vec<_>>());
    assert!(get(&h.etcd, "r/leased").await.is_none());
    assert!(get(&h.etcd, "r/missing").await.is_none());
    assert_eq!(
        transactions, 5,
        "two rollbacks, one for each refusal, then the commit; then the two refused writes \
         again, after it: the lease's put first in a transaction (refused again, answered) and \
         the keeping Txn alone"
    );
    h.done().await;
}
