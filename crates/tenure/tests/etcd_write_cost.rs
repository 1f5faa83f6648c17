//! What a write through the etcd layer costs, counted: the lock recipe's uncontested cycle as
//! `concurrency.Mutex` and the benchmark send it — a Txn that puts the key with a lease if it
//! does not exist, then a DeleteRange of it. Each write takes the revision and moves it in one
//! statement where the engine has `UPDATE … RETURNING` (PostgreSQL, SQLite), and reads the
//! clock after that lock (in the same statement on PostgreSQL); it reads a key once however
//! many of the Txn's parts ask about it, writes the key and its log row (in one statement on
//! PostgreSQL, with the NOTIFY of its topic); a batch of keep-alives is one `UPDATE …
//! RETURNING` that reads the database's clock itself, where the engine has it.
//! Counted as sqlx logs them (its
//! `sqlx::query` events; `COMMIT` on PostgreSQL and `BEGIN`/`COMMIT` on MariaDB count too), in
//! one test so that no other test's statements run in this process meanwhile.

mod common;

use tenure::etcd::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use tenure::etcd::proto::etcdserverpb::request_op::Request;
use tenure::etcd::proto::etcdserverpb::{
    Compare, DeleteRangeRequest, LeaseGrantRequest, PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use tenure::etcd::Etcd;
use tenure::BackendKind;

const CYCLES: u64 = 20;

/// The most statements one cycle (Txn + DeleteRange) may send on `kind`.
fn bound(kind: BackendKind) -> u64 {
    match kind {
        // Txn: revision and clock, the key, the lease, key with log row and NOTIFY, COMMIT;
        // DeleteRange: revision and clock, the key, delete with log row and NOTIFY, COMMIT.
        BackendKind::Postgres => 9,
        // As PostgreSQL without NOTIFY (the doorbell is not a statement) and COMMIT (not
        // logged).
        BackendKind::Sqlite => 11,
        // No `UPDATE … RETURNING`: the revision is locked, then moved (a second statement);
        // BEGIN and COMMIT; no NOTIFY.
        _ => 17,
    }
}

fn lock_txn(key: &[u8], lease: i64) -> TxnRequest {
    TxnRequest {
        compare: vec![Compare {
            key: key.to_vec(),
            target: CompareTarget::Create as i32,
            result: CompareResult::Equal as i32,
            target_union: Some(TargetUnion::CreateRevision(0)),
            ..Compare::default()
        }],
        success: vec![RequestOp {
            request: Some(Request::RequestPut(PutRequest {
                key: key.to_vec(),
                value: b"holder".to_vec(),
                lease,
                ..PutRequest::default()
            })),
        }],
        ..TxnRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_lock_cycle_reads_each_key_once_and_moves_the_revision_in_one_statement() {
    let count = common::statements::Counted::install();
    for kind in [
        BackendKind::Sqlite,
        BackendKind::Postgres,
        BackendKind::MySql,
    ] {
        let Some(store) = common::store_of_its_own(kind, "ew").await else {
            continue;
        };
        let etcd = Etcd::new(store);
        let lease = etcd
            .lease_grant(&LeaseGrantRequest { ttl: 60, id: 0 })
            .await
            .unwrap()
            .id;
        let key = b"locks/cost/1".to_vec();
        let cycle = |check: bool| {
            let (etcd, key) = (&etcd, &key);
            async move {
                let taken = etcd.txn(&lock_txn(key, lease)).await.unwrap();
                assert!(taken.succeeded, "the key was free");
                let revision = taken.header.unwrap().revision;
                if check {
                    let got = etcd
                        .range(&RangeRequest {
                            key: key.clone(),
                            ..RangeRequest::default()
                        })
                        .await
                        .unwrap();
                    assert_eq!(got.kvs[0].create_revision, revision, "created by the Txn");
                    assert_eq!(got.kvs[0].lease, lease);
                }
                let deleted = etcd
                    .delete_range(&DeleteRangeRequest {
                        key: key.clone(),
                        ..DeleteRangeRequest::default()
                    })
                    .await
                    .unwrap();
                assert_eq!(deleted.deleted, 1);
                assert_eq!(deleted.header.unwrap().revision, revision + 1, "one each");
            }
        };
        // The first cycles create the counter's row and prepare the statements.
        for _ in 0..3 {
            cycle(true).await;
        }
        let before = count.now();
        count.clear();
        for _ in 0..CYCLES {
            cycle(false).await;
        }
        let per_cycle = (count.now() - before) as f64 / CYCLES as f64;
        eprintln!("{kind}: {per_cycle:.2} statements per etcd lock cycle (Txn + DeleteRange)");
        assert!(
            per_cycle <= bound(kind) as f64,
            "{kind}: {per_cycle} statements per etcd lock cycle, more than {}: {:#?}",
            bound(kind),
            count.last()
        );

        // Keep-alives of 100 leases (and one that does not exist) in one call.
        let mut ids = Vec::new();
        for _ in 0..100 {
            let granted = etcd.lease_grant(&LeaseGrantRequest { ttl: 60, id: 0 });
            ids.push(granted.await.unwrap().id);
        }
        ids.push(lease + 1_000_000);
        let before = count.now();
        count.clear();
        let answers = etcd.lease_keep_alive_many(&ids).await.unwrap();
        let spent = count.now() - before;
        eprintln!("{kind}: {spent} statements for keep-alives of 101 leases");
        assert_eq!(answers.len(), 101);
        assert!(answers[..100].iter().all(|a| a.ttl == 60), "{answers:?}");
        assert_eq!(answers[100].ttl, 0, "an unknown lease answers TTL 0");
        assert!(
            answers
                .iter()
                .all(|a| a.header.as_ref().unwrap().revision > 1),
            "the header carries the revision: {answers:?}"
        );
        assert!(
            spent <= keep_alive_bound(kind),
            "{kind}: {spent} statements for one batch of keep-alives, more than {}: {:#?}",
            keep_alive_bound(kind),
            count.last()
        );
    }
}

/// The most statements one batch of keep-alives may send on `kind`.
fn keep_alive_bound(kind: BackendKind) -> u64 {
    match kind {
        // One UPDATE … RETURNING that reads the clock and the revision, and COMMIT (sqlx logs
        // no BEGIN on PostgreSQL).
        BackendKind::Postgres => 2,
        // The UPDATE … RETURNING alone (BEGIN and COMMIT are not logged).
        BackendKind::Sqlite => 1,
        // BEGIN, the clock, the revision, the UPDATE, the rows read back, COMMIT.
        _ => 6,
    }
}
