//! Group commit: the writes of keys that queue on one handle while it commits another share
//! the next transaction, each at revisions of its own and answered as if it had run alone
//! after the ones before it; a write that refuses is answered alone and the rest commit; a
//! transaction that fails half-way writes nothing of any of its writes.
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
enum W {
    Put(PutRequest),
    Delete(DeleteRangeRequest),
    Txn(TxnRequest),
}

/// What it answered: the header's revision, and the answer itself.
#[derive(Debug)]
enum A {
    Put(i64, Option<tenure::etcd::proto::mvccpb::KeyValue>),
    Delete(i64, i64),
    Txn(i64, bool, Vec<Response>),
}

fn put_req(key: &str, value: &str, lease: i64) -> W {
    W::Put(PutRequest {
        key: key.into(),
        value: value.into(),
        lease,
        prev_kv: true,
        ..PutRequest::default()
    })
}

fn delete_req(key: &str) -> W {
    W::Delete(DeleteRangeRequest {
        key: key.into(),
        prev_kv: true,
        ..DeleteRangeRequest::default()
    })
}

/// The lock recipe's Txn: `key` created if it does not exist, else read.
fn lock_req(key: &str, value: &str) -> W {
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
struct Harness {
    s: Scoped,
    failing: Arc<FailingBackend>,
    counting: Arc<CountingBackend>,
    etcd: Etcd,
}

impl Harness {
    async fn new(store: Store) -> Harness {
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
    async fn queued_behind(&self, first: &str, writes: Vec<W>) -> (u64, Vec<Result<A, Error>>) {
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

    async fn done(self) {
        self.etcd.store().close().await;
        self.s.drop_tables().await;
    }
}

fn changed_at(a: &A) -> Option<i64> {
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
/// commit without it at gapless revisions: each refusal costs the batch one rollback.
pub(crate) async fn etcd_a_refused_write_leaves_its_batch(store: Store) {
    let h = Harness::new(store).await;
    let seed = put(&h.etcd, "r/seed", "s").await;
    let keeping = W::Txn(TxnRequest {
        success: vec![RequestOp {
            request: Some(Op::RequestPut(PutRequest {
                key: "r/missing".into(),
                ignore_value: true,
                ..PutRequest::default()
            })),
        }],
        ..TxnRequest::default()
    });
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
        transactions, 3,
        "two rollbacks, one for each refusal, then the commit"
    );
    h.done().await;
}

/// The batch the failure tests queue under `prefix`: a put of `a`, a lock Txn on `lock`, a
/// delete of `before` (which the test has put), another put of `a`.
fn four_writes(prefix: &str) -> Vec<W> {
    vec![
        put_req(&format!("{prefix}/a"), "v", 0),
        lock_req(&format!("{prefix}/lock"), "l"),
        delete_req(&format!("{prefix}/before")),
        put_req(&format!("{prefix}/a"), "w", 0),
    ]
}

/// A batch whose transaction fails at any of its calls on the seam (a connection that drops
/// half-way) answers every write of it with the failure and writes none of them; the
/// revision stays. Tried at every call until the batch has fewer calls than the failure's.
pub(crate) async fn etcd_a_batch_that_fails_half_way_writes_nothing(store: Store) {
    let h = Harness::new(store).await;
    let (mut committed, mut failed) = (false, 0);
    for at in 1..=60u32 {
        let before = put(&h.etcd, &format!("f/{at}/before"), "b").await;
        h.failing.fail_at("etcd_writes", Some(at));
        let writes = four_writes(&format!("f/{at}"));
        let failed_before = h.failing.failed();
        let (_, answers) = h.queued_behind(&format!("f/{at}/first"), writes).await;
        h.failing.fail_at("etcd_writes", None);
        if h.failing.failed() == failed_before {
            // The batch has fewer calls than `at`: it committed.
            assert!(answers.iter().all(Result::is_ok), "{at}: {answers:?}");
            committed = true;
            break;
        }
        failed += 1;
        for a in &answers {
            assert!(matches!(a, Err(Error::Store(_))), "{at}: {a:?}");
        }
        // One write (the first in the queue) gets the driver's own error, the others copies.
        let original = answers
            .iter()
            .filter(|a| {
                matches!(
                    a,
                    Err(Error::Store(tenure::Error::Database(sqlx::Error::Io(_))))
                )
            })
            .count();
        assert_eq!(original, 1, "{at}: {answers:?}");
        assert!(get(&h.etcd, &format!("f/{at}/a")).await.is_none(), "{at}");
        assert!(
            get(&h.etcd, &format!("f/{at}/lock")).await.is_none(),
            "{at}"
        );
        assert!(
            get(&h.etcd, &format!("f/{at}/before")).await.is_some(),
            "{at}"
        );
        let now = get(&h.etcd, &format!("f/{at}/first")).await.expect("held");
        assert_eq!(now.mod_revision, before + 1, "{at}: the revision stayed");
        let after = put(&h.etcd, &format!("f/{at}/after"), "x").await;
        assert_eq!(after, before + 2, "{at}: no revision was lost or taken");
    }
    assert!(committed, "a batch of four writes has fewer than 60 calls");
    // The lock of the revision, the clock, and each write's reads and writes: a batch of
    // these four makes more than eight calls, each of which failed it once.
    assert!(failed > 8, "the batch failed at {failed} calls");
    h.done().await;
}

/// A batch whose transaction the server refuses at any of its calls (an error answer on a
/// connection that lives on: nothing of it committed) runs each of its writes again alone, in
/// queue order: the writes the server takes alone commit at gapless revisions, and only the
/// one it refuses alone (here the delete, refused at its first call) fails, with the server's
/// error, as before group commit. Tried at every call until the batch has fewer calls than
/// the refusal's.
pub(crate) async fn etcd_a_batch_the_server_refuses_runs_each_write_alone(store: Store) {
    let h = Harness::new(store).await;
    let (mut committed, mut refused) = (false, 0);
    for at in 1..=60u32 {
        let before = put(&h.etcd, &format!("s/{at}/before"), "b").await;
        h.failing.refuse_at("etcd_writes", Some(at));
        h.failing.refuse_at("etcd_delete", Some(1));
        let writes = four_writes(&format!("s/{at}"));
        let failed_before = h.failing.failed();
        let (transactions, answers) = h.queued_behind(&format!("s/{at}/first"), writes).await;
        h.failing.refuse_at("etcd_writes", None);
        h.failing.refuse_at("etcd_delete", None);
        if h.failing.failed() == failed_before {
            // The batch has fewer calls than `at`: it committed, the delete in it.
            assert!(answers.iter().all(Result::is_ok), "{at}: {answers:?}");
            assert_eq!(transactions, 1, "{at}");
            committed = true;
            break;
        }
        refused += 1;
        assert_eq!(
            h.failing.failed() - failed_before,
            2,
            "{at}: the batch and the delete alone were refused"
        );
        assert_eq!(transactions, 5, "{at}: the batch, then each write alone");
        match &answers[2] {
            Err(Error::Store(tenure::Error::Database(sqlx::Error::Database(db)))) => {
                assert_eq!(db.code().as_deref(), Some("22000"), "{at}: {db}");
            }
            other => panic!("{at}: the delete alone was refused: {other:?}"),
        }
        let mut revisions: Vec<i64> = [0, 1, 3]
            .iter()
            .map(|&i| match &answers[i] {
                Ok(a) => changed_at(a).expect("each wrote"),
                Err(e) => panic!("{at}: write {i} alone failed: {e:?}"),
            })
            .collect();
        revisions.sort_unstable();
        let first = before + 1;
        assert_eq!(
            revisions,
            ((first + 1)..=(first + 3)).collect::<Vec<_>>(),
            "{at}"
        );
        assert_eq!(
            get(&h.etcd, &format!("s/{at}/a"))
                .await
                .map(|kv| kv.version),
            Some(2),
            "{at}"
        );
        assert!(
            get(&h.etcd, &format!("s/{at}/lock")).await.is_some(),
            "{at}"
        );
        assert!(
            get(&h.etcd, &format!("s/{at}/before")).await.is_some(),
            "{at}: the refused delete wrote nothing"
        );
        let after = put(&h.etcd, &format!("s/{at}/after"), "x").await;
        assert_eq!(after, first + 4, "{at}: no revision was lost or taken");
    }
    assert!(committed, "a batch of four writes has fewer than 60 calls");
    assert!(refused > 8, "the batch was refused at {refused} calls");
    h.done().await;
}
