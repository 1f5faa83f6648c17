//! The model-based test of campaigns among candidates (issue 28): every backend must decide a
//! campaign with a standing — its priority, settle time and the registry's rivals — as the
//! IO-free model does ([`tenure::model::decide_among`]), for random sequences of campaigns,
//! renewals, releases and clock steps among random rivals.
//!
//! As in `tests/model.rs`, the database's clock cannot be moved: each operation is compared with
//! the model evaluated at the instant the database used (`Applied::now`) on the test's own copy
//! of the row, and the stored row is read back after every step. The rivals' times are set
//! around the database's last instant, so that every rule is reached: better rivals live and
//! recently seen (a free lease waits), seen long ago (it does not), settled or not (a holder
//! hands over, or not yet), backing off or not, a campaigner that has not settled (it defers)
//! or backs off, a holder an operator chose, reservations whose target stopped campaigning
//! (they lapse), observers and worse rivals (nothing changes).

mod common;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestError, TestRunner};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;
use tenure::model::{decide_among, Clock, DbTime, Lease, Op, Purpose, Rival, Standing};
use tenure::{BackendKind, Store};

const CASES: u32 = 96;
const ACTOR: &str = "model-test";
const CANDIDATES: [&str; 3] = ["cand-a", "cand-b", "cand-c"];
const RIVALS: [&str; 3] = ["rival-x", "rival-y", "rival-z"];

/// A rival relative to the database's last instant (milliseconds; negative: before it).
#[derive(Clone, Debug)]
struct RivalSpec {
    id: &'static str,
    priority: i32,
    observer: bool,
    since_ms: i64,
    seen_ms: i64,
    /// Its last keep-alive (while it holds off), at or after `seen_ms`.
    alive_ms: i64,
    ttl_ms: u64,
    renew_ms: u64,
    settle_ms: u64,
    backoff_ms: Option<i64>,
}

#[derive(Clone, Debug)]
enum Step {
    /// A campaign (`names`: none, or the row's term) with a priority and settle time among
    /// rivals.
    Campaign {
        candidate: &'static str,
        ttl_ms: u64,
        renew: bool,
        priority: i32,
        settle_ms: u64,
        /// When its run began, relative to the database's last instant.
        since_ms: i64,
        backoff_ms: Option<i64>,
        /// An operator chose it for the lease's current term.
        chosen: bool,
        rivals: Vec<RivalSpec>,
    },
    Release {
        candidate: &'static str,
    },
    Sleep(u64),
}

fn rival() -> impl Strategy<Value = RivalSpec> {
    (
        prop::sample::select(RIVALS.to_vec()),
        -1i32..=3,
        prop::bool::weighted(0.2),
        prop::sample::select(vec![-60_000i64, -2_000, -50, 0]),
        prop::sample::select(vec![-60_000i64, -5_000, -100, 0]),
        prop::sample::select(vec![50u64, 2_000, 30_000]),
        prop::sample::select(vec![20u64, 1_000, 10_000]),
        (
            prop::sample::select(vec![None, Some(-1_000i64), Some(5_000)]),
            prop::sample::select(vec![-60_000i64, -50, 0]),
            prop::sample::select(vec![0u64, 500, 5_000]),
        ),
    )
        .prop_map(
            |(
                id,
                priority,
                observer,
                since_ms,
                seen_ms,
                ttl_ms,
                renew_ms,
                (backoff_ms, alive_ms, settle_ms),
            )| {
                RivalSpec {
                    id,
                    priority,
                    observer,
                    since_ms: since_ms.min(seen_ms),
                    seen_ms,
                    alive_ms: alive_ms.max(seen_ms),
                    ttl_ms,
                    renew_ms,
                    settle_ms,
                    backoff_ms,
                }
            },
        )
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (
            prop::sample::select(CANDIDATES.to_vec()),
            prop::sample::select(vec![20u64, 60, 10_000]),
            any::<bool>(),
            -1i32..=3,
            prop::sample::select(vec![0u64, 500, 5_000]),
            (
                prop::sample::select(vec![-60_000i64, -100, 0]),
                prop::sample::select(vec![None, Some(2_000i64)]),
                prop::bool::weighted(0.2),
            ),
            prop::collection::vec(rival(), 0..3),
        )
            .prop_map(
                |(candidate, ttl_ms, renew, priority, settle_ms, (since_ms, backoff_ms, chosen), rivals)| {
                    Step::Campaign {
                        candidate,
                        ttl_ms,
                        renew,
                        priority,
                        settle_ms,
                        since_ms,
                        backoff_ms,
                        chosen,
                        rivals,
                    }
                },
            ),
        1 => prop::sample::select(CANDIDATES.to_vec())
            .prop_map(|candidate| Step::Release { candidate }),
        1 => (0u64..80).prop_map(Step::Sleep),
    ]
}

fn at(base: DbTime, ms: i64) -> DbTime {
    DbTime(base.0 + ms * 1_000)
}

fn lease_fields(l: Option<&Lease>) -> Option<impl PartialEq + std::fmt::Debug> {
    l.map(|l| {
        (
            l.holder.clone(),
            l.term,
            l.acquired_at,
            l.renewed_at,
            l.expires_at,
            l.ttl_ms,
            l.handover_to.clone(),
            l.paused,
        )
    })
}

fn fail(what: &str, e: tenure::Error) -> TestCaseError {
    TestCaseError::fail(format!("{what}: {e}"))
}

async fn run_case(
    store: &Store,
    steps: &[Step],
    seen: &Mutex<BTreeMap<String, usize>>,
) -> Result<(), TestCaseError> {
    let name = common::unique("among");
    let mut copy: Option<Lease> = None;
    let mut last = store.get(&name).await.map_err(|e| fail("get", e))?.now;
    for (i, step) in steps.iter().enumerate() {
        let term = copy.as_ref().map_or(0, |l| l.term);
        let (op, rivals, standing_of, own) = match step {
            Step::Sleep(ms) => {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
                continue;
            }
            Step::Release { candidate } => (
                Op::Release {
                    candidate: candidate.to_string(),
                    term,
                    at_least_ms: 0,
                    reason: None,
                    purpose: Purpose::Election,
                },
                Vec::new(),
                (0, 0),
                (last, None, None),
            ),
            Step::Campaign {
                candidate,
                ttl_ms,
                renew,
                priority,
                settle_ms,
                since_ms,
                backoff_ms,
                chosen,
                rivals,
            } => {
                let rivals: Vec<Rival> = rivals
                    .iter()
                    .map(|r| Rival {
                        candidate: r.id.to_string(),
                        priority: r.priority,
                        observer: r.observer,
                        since: at(last, r.since_ms),
                        seen_at: at(last, r.seen_ms),
                        expires_at: at(last, r.alive_ms).plus_ms(r.ttl_ms),
                        alive_at: at(last, r.alive_ms),
                        renew_ms: r.renew_ms,
                        settle_ms: r.settle_ms,
                        backoff_until: r.backoff_ms.map(|ms| at(last, ms)),
                    })
                    .collect();
                let op = Op::Campaign {
                    candidate: candidate.to_string(),
                    term: renew.then_some(term),
                    ttl_ms: *ttl_ms,
                    metadata: None,
                    purpose: Purpose::Election,
                };
                let own = (
                    at(last, *since_ms),
                    backoff_ms.map(|ms| at(last, ms)),
                    chosen.then(|| term.saturating_sub(1)),
                );
                (op, rivals, (*priority, *settle_ms), own)
            }
        };
        let standing = Standing {
            priority: standing_of.0,
            settle_ms: standing_of.1,
            since: own.0,
            backoff_until: own.1,
            chosen_after: own.2,
            rivals: &rivals,
        };
        let applied = store
            .apply_among(&name, &op, ACTOR, &standing)
            .await
            .map_err(|e| fail(&format!("step {i}: {op:?}"), e))?;
        let clock = Clock {
            now: applied.now,
            epoch: applied.epoch,
        };
        let model = decide_among(clock, &name, copy.as_ref(), &op, Some(&standing));
        *seen
            .lock()
            .unwrap()
            .entry(format!("{:?}", model.effect).chars().take(24).collect())
            .or_default() += 1;
        prop_assert_eq!(
            &applied.effect,
            &model.effect,
            "step {}: {:?} among {:?} at {} on {:?}",
            i,
            op,
            rivals,
            applied.now,
            copy
        );
        prop_assert_eq!(
            lease_fields(applied.lease.as_ref()),
            lease_fields(model.lease.as_ref()),
            "step {}: the backend's row differs from the model's",
            i
        );
        copy = model.lease;
        let stored = store
            .get(&name)
            .await
            .map_err(|e| fail(&format!("step {i}: get"), e))?;
        prop_assert_eq!(
            lease_fields(stored.leases.first()),
            lease_fields(copy.as_ref()),
            "step {}: the stored row differs from the model's",
            i
        );
        last = stored.now;
    }
    Ok(())
}

fn model_matches(kind: BackendKind) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let Some(store) = rt.block_on(common::store(kind)) else {
        return;
    };
    let seen = Mutex::new(BTreeMap::new());
    let config = ProptestConfig {
        cases: CASES,
        failure_persistence: None,
        max_shrink_iters: 128,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let steps = prop::collection::vec(step(), 4..16);
    match runner.run(&steps, |steps| rt.block_on(run_case(&store, &steps, &seen))) {
        Ok(()) => {}
        Err(TestError::Fail(reason, steps)) => {
            panic!(
                "{kind}: the backend disagrees with the model: {reason}\nminimal steps: {steps:#?}"
            )
        }
        Err(TestError::Abort(reason)) => panic!("{kind}: proptest aborted: {reason}"),
    }
    // The random cases reach a step-down for a better candidate only now and then (a holder
    // renewing beside a better rival that is live, settled and not backing off): one case that
    // reaches it surely, checked against the model as every other, so that the coverage below
    // never rests on chance.
    let better = RivalSpec {
        id: "rival-x",
        priority: 3,
        observer: false,
        since_ms: -60_000,
        seen_ms: 0,
        alive_ms: 0,
        ttl_ms: 30_000,
        renew_ms: 10_000,
        settle_ms: 0,
        backoff_ms: None,
    };
    let campaign = |renew: bool, rivals: Vec<RivalSpec>| Step::Campaign {
        candidate: "cand-a",
        ttl_ms: 10_000,
        renew,
        priority: 0,
        settle_ms: 0,
        since_ms: -60_000,
        backoff_ms: None,
        chosen: false,
        rivals,
    };
    let surely = [campaign(false, vec![]), campaign(true, vec![better])];
    if let Err(e) = rt.block_on(run_case(&store, &surely, &seen)) {
        panic!("{kind}: the backend disagrees with the model on the sure step-down: {e}");
    }
    let seen = seen.into_inner().unwrap();
    eprintln!("{kind}: effects {seen:?}");
    // The rules were reached: a free lease held off (Unavailable while vacant is counted with
    // the others), acquisitions, renewals and step-downs for a better candidate.
    let count = |prefix: &str| -> usize {
        seen.iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, n)| n)
            .sum()
    };
    for effect in ["Acquired", "Renewed", "Unavailable", "SteppedDown"] {
        assert!(count(effect) > 0, "{kind}: no {effect} among {seen:?}");
    }
}

#[test]
fn model_among_candidates_matches_sqlite() {
    model_matches(BackendKind::Sqlite);
}

#[test]
fn model_among_candidates_matches_postgres() {
    model_matches(BackendKind::Postgres);
}

#[test]
fn model_among_candidates_matches_mysql() {
    model_matches(BackendKind::MySql);
}
