//! The model-based test of the etcd layer: a random sequence of Puts, DeleteRanges, Ranges
//! (every option, past revisions included), Txns (nested ones included), Compacts, grants and
//! revokes runs on the layer and on the in-memory reference (`tenure::etcd::reference`, which
//! keeps a copy of the keys at every revision instead of a log); every answer and every error,
//! and at the end the whole log, must be the same. `TENURE_ETCD_SEED=<n>` replays one sequence.

use crate::etcd_support::Scoped;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tenure::etcd::proto::etcdserverpb::compare::{CompareResult, CompareTarget, TargetUnion};
use tenure::etcd::proto::etcdserverpb::request_op::Request as Op;
use tenure::etcd::proto::etcdserverpb::{
    CompactionRequest, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseRevokeRequest,
    PutRequest, RangeRequest, RequestOp, TxnRequest,
};
use tenure::etcd::reference::Reference;
use tenure::etcd::{Error, Etcd};
use tenure::Store;

const KEYS: &[&str] = &["a", "b", "c", "d/1", "d/2", "e"];
const SPANS: &[(&str, &str)] = &[
    ("a", ""),
    ("d/1", ""),
    ("d/", "d0"),
    ("b", "d/2"),
    ("c", "\0"),
    ("\0", "\0"),
    ("e", "a"),
];
const LEASES: &[i64] = &[1, 2, 9];

fn pick<T: Copy>(rng: &mut StdRng, from: &[T]) -> T {
    from[rng.gen_range(0..from.len())]
}

fn put(rng: &mut StdRng) -> PutRequest {
    PutRequest {
        key: pick(rng, KEYS).into(),
        value: format!("v{}", rng.gen_range(0..4)).into(),
        lease: if rng.gen_bool(0.3) {
            pick(rng, LEASES)
        } else {
            0
        },
        prev_kv: rng.gen_bool(0.5),
        ignore_value: rng.gen_bool(0.1),
        ignore_lease: rng.gen_bool(0.1),
    }
}

fn delete(rng: &mut StdRng) -> DeleteRangeRequest {
    let (key, end) = pick(rng, SPANS);
    DeleteRangeRequest {
        key: key.into(),
        range_end: end.into(),
        prev_kv: rng.gen_bool(0.5),
    }
}

fn range(rng: &mut StdRng, revision: i64) -> RangeRequest {
    let (key, end) = pick(rng, SPANS);
    RangeRequest {
        key: key.into(),
        range_end: end.into(),
        limit: rng.gen_range(0..4),
        revision: if rng.gen_bool(0.3) {
            rng.gen_range(0..=revision + 1)
        } else {
            0
        },
        sort_order: rng.gen_range(0..3),
        sort_target: rng.gen_range(0..5),
        serializable: false,
        keys_only: rng.gen_bool(0.2),
        count_only: rng.gen_bool(0.1),
        min_mod_revision: if rng.gen_bool(0.2) {
            rng.gen_range(0..=revision)
        } else {
            0
        },
        max_mod_revision: if rng.gen_bool(0.2) {
            rng.gen_range(0..=revision)
        } else {
            0
        },
        min_create_revision: if rng.gen_bool(0.2) {
            rng.gen_range(0..=revision)
        } else {
            0
        },
        max_create_revision: if rng.gen_bool(0.2) {
            rng.gen_range(0..=revision)
        } else {
            0
        },
    }
}

fn compare(rng: &mut StdRng, revision: i64) -> Compare {
    let (key, end) = if rng.gen_bool(0.2) {
        pick(rng, SPANS)
    } else {
        (pick(rng, KEYS), "")
    };
    let target = pick(
        rng,
        &[
            CompareTarget::Version,
            CompareTarget::Create,
            CompareTarget::Mod,
            CompareTarget::Value,
            CompareTarget::Lease,
        ],
    );
    let union = match target {
        CompareTarget::Version => TargetUnion::Version(rng.gen_range(0..3)),
        CompareTarget::Create => TargetUnion::CreateRevision(rng.gen_range(0..=revision)),
        CompareTarget::Mod => TargetUnion::ModRevision(rng.gen_range(0..=revision)),
        CompareTarget::Value => TargetUnion::Value(format!("v{}", rng.gen_range(0..4)).into()),
        CompareTarget::Lease => TargetUnion::Lease(pick(rng, &[0, 1, 2])),
    };
    let target = target as i32;
    Compare {
        result: pick(
            rng,
            &[
                CompareResult::Equal,
                CompareResult::NotEqual,
                CompareResult::Greater,
                CompareResult::Less,
            ],
        ) as i32,
        target,
        key: key.into(),
        range_end: end.into(),
        target_union: Some(union),
    }
}

fn ops(rng: &mut StdRng, revision: i64, depth: u32) -> Vec<RequestOp> {
    (0..rng.gen_range(0..4))
        .map(|_| {
            let request = match rng.gen_range(0..7) {
                0 | 1 => Op::RequestPut(put(rng)),
                2 => Op::RequestDeleteRange(delete(rng)),
                3 if depth < 2 => Op::RequestTxn(txn(rng, revision, depth + 1)),
                _ => Op::RequestRange(range(rng, revision)),
            };
            RequestOp {
                request: Some(request),
            }
        })
        .collect()
}

fn txn(rng: &mut StdRng, revision: i64, depth: u32) -> TxnRequest {
    TxnRequest {
        compare: (0..rng.gen_range(0..3))
            .map(|_| compare(rng, revision))
            .collect(),
        success: ops(rng, revision, depth),
        failure: ops(rng, revision, depth),
    }
}

/// The same answer to `request`: equal responses, or errors of the same text.
fn same<T: PartialEq + std::fmt::Debug>(
    (step, seed): (usize, u64),
    request: &dyn std::fmt::Debug,
    layer: Result<T, Error>,
    reference: Result<T, Error>,
) {
    let at = || format!("step {step} (TENURE_ETCD_SEED={seed}): {request:?}");
    match (&layer, &reference) {
        (Ok(l), Ok(r)) => assert_eq!(l, r, "{}", at()),
        (Err(l), Err(r)) => assert_eq!(l.to_string(), r.to_string(), "{}", at()),
        _ => panic!("{}: layer {layer:?}, reference {reference:?}", at()),
    }
}

async fn run(etcd: &Etcd, seed: u64, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut model = Reference::new();
    for step in 0..steps {
        let revision = model.revision();
        match rng.gen_range(0..20) {
            0..=5 => {
                let p = put(&mut rng);
                same((step, seed), &p, etcd.put(&p).await, model.put(&p));
            }
            6 | 7 => {
                let d = delete(&mut rng);
                same(
                    (step, seed),
                    &d,
                    etcd.delete_range(&d).await,
                    model.delete_range(&d),
                );
            }
            8..=11 => {
                let r = range(&mut rng, revision);
                same((step, seed), &r, etcd.range(&r).await, model.range(&r));
            }
            12..=16 => {
                let t = txn(&mut rng, revision, 0);
                same((step, seed), &t, etcd.txn(&t).await, model.txn(&t));
            }
            17 => {
                let rev = rng.gen_range(0..=revision + 1);
                let compacted = etcd
                    .compact(&CompactionRequest {
                        revision: rev,
                        physical: false,
                    })
                    .await;
                same(
                    (step, seed),
                    &rev,
                    compacted.map(|c| c.header.unwrap().revision),
                    model.compact(rev),
                );
            }
            18 => {
                let id = pick(&mut rng, &[1, 2]);
                let granted = etcd.lease_grant(&LeaseGrantRequest { ttl: 600, id }).await;
                same((step, seed), &id, granted.map(|_| ()), model.grant(id));
            }
            _ => {
                let id = pick(&mut rng, &[1, 2]);
                let revoked = etcd.lease_revoke(&LeaseRevokeRequest { id }).await;
                same(
                    (step, seed),
                    &id,
                    revoked.map(|r| r.header.unwrap().revision),
                    model.revoke(id),
                );
            }
        }
    }
    let floor = etcd.revisions().await.unwrap().floor;
    let log = etcd
        .events(floor, b"\0", b"\0", 1_000_000)
        .await
        .map(|e| e.events);
    same((steps, seed), &floor, log, model.events(floor));
}

/// 300 random steps on one etcd of this backend, against the reference.
pub(crate) async fn etcd_matches_the_reference(store: Store) {
    let seed = std::env::var("TENURE_ETCD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("etcd model: TENURE_ETCD_SEED={seed}");
    let s = Scoped::new(store).await;
    run(&s.etcd, seed, 300).await;
    s.drop_tables().await;
}
