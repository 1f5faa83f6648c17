//! Group commit when a batch's transaction fails: a connection that drops half-way writes
//! nothing of any of its writes; a statement the server refuses is put down to the write it
//! belongs to, which runs alone while the others run again, or — a statement of the batch's
//! own — answers every write.
//!
//! Each test queues four writes behind a held put (`Harness::queued_behind`), so that they
//! are one batch, and fails that batch at each of its calls on the seam in turn.

use crate::etcd_group::{changed_at, delete_req, keeping_req, lock_req, put_req, Harness, A, W};
use crate::etcd_support::{get, put};
use tenure::etcd::Error;
use tenure::Store;

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

/// Whether `answer` is the server's injected refusal (SQLSTATE 22000), or a copy of it (what
/// the other writes of a failed batch answer: the driver's error as its text).
fn is_refusal(answer: &Result<A, Error>) -> bool {
    match answer {
        Err(Error::Store(tenure::Error::Database(e))) => match e {
            sqlx::Error::Database(db) => db.code().as_deref() == Some("22000"),
            sqlx::Error::Protocol(text) => text.contains("injected: the server refused"),
            _ => false,
        },
        _ => false,
    }
}

/// Whether `answer` is the injected refusal itself (not a copy).
fn is_original_refusal(answer: &Result<A, Error>) -> bool {
    matches!(
        answer,
        Err(Error::Store(tenure::Error::Database(
            sqlx::Error::Database(_)
        )))
    ) && is_refusal(answer)
}

/// The revisions the writes that changed something committed at, sorted.
fn revisions(answers: &[Result<A, Error>]) -> Vec<i64> {
    let mut at: Vec<i64> = answers
        .iter()
        .filter_map(|a| a.as_ref().ok().and_then(changed_at))
        .collect();
    at.sort_unstable();
    at
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

/// A batch the server refuses once, at each of its calls in turn (an error answer on a
/// connection that lives on: nothing of it committed):
/// - at a statement of a write: that write runs alone and the other three run again as a
///   batch, three transactions; only a write the server refuses alone fails, with the
///   server's error (here the delete, refused at its first call alone), and every other
///   commits, at gapless revisions;
/// - at a statement of the batch's own (the revision's lock, the clock, the revision written
///   back): every write answers the refusal, after one transaction, and nothing is written.
///
/// Before, every refusal ran each write alone: five transactions.
pub(crate) async fn etcd_a_refused_statement_runs_its_write_alone(store: Store) {
    let h = Harness::new(store).await;
    let (mut committed, mut narrowed, mut shared) = (false, 0, 0);
    for at in 1..=60u32 {
        let before = put(&h.etcd, &format!("s/{at}/before"), "b").await;
        h.failing.refuse_once_at("etcd_writes", Some(at));
        h.failing.refuse_at("etcd_delete", Some(1));
        let writes = four_writes(&format!("s/{at}"));
        let failed_before = h.failing.failed();
        let (transactions, answers) = h.queued_behind(&format!("s/{at}/first"), writes).await;
        h.failing.refuse_once_at("etcd_writes", None);
        h.failing.refuse_at("etcd_delete", None);
        let refusals = h.failing.failed() - failed_before;
        let first = before + 1;
        if refusals == 0 {
            // The batch has fewer calls than `at`: it committed, the delete in it.
            assert!(answers.iter().all(Result::is_ok), "{at}: {answers:?}");
            assert_eq!(transactions, 1, "{at}");
            committed = true;
            break;
        }
        let refused: Vec<usize> = (0..4).filter(|&i| answers[i].is_err()).collect();
        for &i in &refused {
            assert!(is_refusal(&answers[i]), "{at}: {:?}", answers[i]);
        }
        let written = if refused.len() == 4 {
            shared += 1;
            assert_eq!((transactions, refusals), (1, 1), "{at}: the batch alone");
            let originals = answers.iter().filter(|a| is_original_refusal(a)).count();
            assert_eq!(
                originals, 1,
                "{at}: the first write the refusal, the others copies"
            );
            assert!(get(&h.etcd, &format!("s/{at}/a")).await.is_none(), "{at}");
            assert!(
                get(&h.etcd, &format!("s/{at}/lock")).await.is_none(),
                "{at}"
            );
            0
        } else {
            narrowed += 1;
            assert_eq!(
                transactions, 3,
                "{at}: the batch, its refused write alone, the other three"
            );
            assert!(refused.is_empty() || refused == [2], "{at}: {answers:?}");
            // The delete alone answers the server's own refusal.
            assert!(refused.iter().all(|&i| is_original_refusal(&answers[i])));
            assert_eq!(refusals, 1 + refused.len() as u64, "{at}");
            let a = get(&h.etcd, &format!("s/{at}/a")).await;
            assert_eq!(a.map(|kv| kv.version), Some(2), "{at}");
            assert!(
                get(&h.etcd, &format!("s/{at}/lock")).await.is_some(),
                "{at}"
            );
            4 - refused.len()
        };
        let n = i64::try_from(written).unwrap();
        assert_eq!(
            revisions(&answers),
            ((first + 1)..=(first + n)).collect::<Vec<_>>(),
            "{at}"
        );
        assert_eq!(
            get(&h.etcd, &format!("s/{at}/before")).await.is_some(),
            written != 4,
            "{at}: the before key is deleted if and only if the delete committed"
        );
        let after = put(&h.etcd, &format!("s/{at}/after"), "x").await;
        assert_eq!(after, first + n + 1, "{at}: no revision was lost or taken");
    }
    assert!(committed, "a batch of four writes has fewer than 60 calls");
    // The revision's lock and the clock at least are the batch's own; every write makes
    // at least one call.
    assert!(
        shared >= 2,
        "{shared} refusals of the batch's own statements"
    );
    assert!(narrowed >= 4, "{narrowed} refusals of a write's statements");
    h.done().await;
}

/// A batch the server refuses at the same call every time: the refused write runs alone,
/// and where the batch of the other three is refused as well, each of them runs alone, so
/// that a refusal costs at most one transaction per write beyond the two batches (six for
/// four writes, never a batch per write). Whatever the call, every write is answered with
/// its commit or the refusal, and the commits are gapless.
pub(crate) async fn etcd_a_batch_refused_twice_runs_each_write_alone(store: Store) {
    let h = Harness::new(store).await;
    let mut each_alone = 0;
    for at in 1..=60u32 {
        let before = put(&h.etcd, &format!("t/{at}/before"), "b").await;
        h.failing.refuse_at("etcd_writes", Some(at));
        let writes = four_writes(&format!("t/{at}"));
        let failed_before = h.failing.failed();
        let (transactions, answers) = h.queued_behind(&format!("t/{at}/first"), writes).await;
        h.failing.refuse_at("etcd_writes", None);
        if h.failing.failed() == failed_before {
            break;
        }
        assert!(transactions <= 6, "{at}: {transactions} transactions");
        if transactions == 6 {
            each_alone += 1;
            assert!(answers.iter().all(Result::is_ok), "{at}: {answers:?}");
        }
        assert!(
            answers.iter().all(|a| a.is_ok() || is_refusal(a)),
            "{at}: {answers:?}"
        );
        let first = before + 1;
        let n = i64::try_from(revisions(&answers).len()).unwrap();
        assert_eq!(
            revisions(&answers),
            ((first + 1)..=(first + n)).collect::<Vec<_>>(),
            "{at}"
        );
        let after = put(&h.etcd, &format!("t/{at}/after"), "x").await;
        assert_eq!(after, first + n + 1, "{at}: no revision was lost or taken");
    }
    assert!(each_alone > 0, "no call refused the batch of three again");
    h.done().await;
}

/// A write refused in a batch for what a write before it did (a Txn that keeps the value of a
/// key the delete before it removed: `KeyNotFound`) is not answered from that batch, which
/// rolled back: where the run of the others that follows fails (its connection drops: their
/// outcome unknown, the delete not committed), that refusal would be of a state the database
/// never had — the key is still there. Tried with the batches failing at each call in turn:
/// a `KeyNotFound` is only ever answered where the key is gone.
pub(crate) async fn etcd_a_refusal_is_answered_from_committed_writes_only(store: Store) {
    let h = Harness::new(store).await;
    let (mut committed, mut refused_then_failed) = (false, 0);
    for at in 1..=60u32 {
        let key = format!("o/{at}/k");
        put(&h.etcd, &key, "v").await;
        h.failing.fail_at("etcd_writes", Some(at));
        let writes = vec![
            delete_req(&key),
            keeping_req(&key),
            put_req(&format!("o/{at}/x"), "x", 0),
        ];
        let failed_before = h.failing.failed();
        let (_, answers) = h.queued_behind(&format!("o/{at}/first"), writes).await;
        h.failing.fail_at("etcd_writes", None);
        let gone = get(&h.etcd, &key).await.is_none();
        if matches!(answers[1], Err(Error::KeyNotFound)) {
            assert!(gone, "{at}: KeyNotFound, but the key is there: {answers:?}");
        }
        if h.failing.failed() == failed_before {
            assert!(
                answers[0].is_ok() && answers[2].is_ok(),
                "{at}: {answers:?}"
            );
            committed = true;
            break;
        }
        // The delete's batch failed after the keeping Txn had left it (it did not share that
        // failure): the case this test is for.
        if matches!(answers[0], Err(Error::Store(_))) && !matches!(answers[1], Err(Error::Store(_)))
        {
            refused_then_failed += 1;
            assert!(!gone, "{at}: the failed delete left the key");
        }
    }
    assert!(committed, "a batch of three writes has fewer than 60 calls");
    assert!(
        refused_then_failed > 0,
        "no failure hit the run after the refusal"
    );
    h.done().await;
}
