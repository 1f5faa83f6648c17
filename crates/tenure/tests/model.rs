//! The model-based test (`docs/design-notes.md`, "One set of rules"): every backend must give
//! the same answers as the IO-free model ([`tenure::model::decide`]) for random sequences of operations and clock steps,
//! through `Store::apply` (and each engine's one-statement paths), the batched keep-alive
//! (`Backend::renew_many`) and the seam's batch of lease operations (`Tx::leases`, every third
//! operation).
//!
//! The database's clock cannot be moved, so time passes for real: leases get short ttls
//! (1, 20 or 60 ms, or 10 s) and some steps sleep. Each operation is checked by evaluating the
//! model at the exact instant the database used (`Applied::now`) on the test's OWN copy of the
//! row, which is only ever updated from the model, never from the backend. After every
//! operation the row is read back and compared with that copy, and at the end of each case the
//! history is compared with the events the model produced, so that a backend that stores,
//! reads or converts a value wrongly is caught.

mod common;

use proptest::prelude::*;
use proptest::test_runner::{TestCaseError, TestError, TestRunner};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tenure::model::{decide, Clock, DbTime, Effect, Lease, Op, Purpose};
use tenure::{BackendKind, Store};

/// Proptest cases per backend; the test fails if fewer ran.
const CASES: u32 = 384;
/// The actor recorded in the history.
const ACTOR: &str = "model-test";
/// Three campaigning candidates and a fourth that only ever gets handovers.
const CANDIDATES: [&str; 4] = ["cand-a", "cand-b", "cand-c", "cand-d"];
const TTLS: [u64; 4] = [1, 20, 60, 10_000];
/// Includes an empty string (not NULL) and non-ASCII text, which a backend must keep as is.
const METADATA: [&str; 4] = ["10.0.0.1:8080", "", "{\"addr\":\"hôte-ü:443\"}", "✓ leader"];
/// An election's, a lock's and an audited lock's: each records different events.
const PURPOSES: [Purpose; 3] = [
    Purpose::Election,
    Purpose::Lock {
        record_every_cycle: false,
    },
    Purpose::Lock {
        record_every_cycle: true,
    },
];
/// A lock's release is recorded when it gives a reason.
const REASONS: [Option<&str>; 2] = [None, Some("stepped down: health check failed")];

/// One step of a case. Releases name their term relative to the row's term at that point.
#[derive(Clone, Debug)]
enum Step {
    Campaign {
        candidate: &'static str,
        ttl_ms: u64,
        metadata: Option<&'static str>,
        /// The term it names, relative to the row's: none (a new tenure wanted), -1 or 0.
        names: Option<i64>,
        purpose: Purpose,
    },
    Release {
        candidate: &'static str,
        /// -1 (stale), 0 (current) or +1 relative to the row's term.
        term_delta: i64,
        at_least_ms: u64,
        reason: Option<&'static str>,
        purpose: Purpose,
    },
    Demote {
        immediate: bool,
    },
    Handover {
        to: &'static str,
        immediate: bool,
    },
    Pause,
    Resume,
    /// The batched keep-alive (`Backend::renew_many`) of one lease, with a term relative to the
    /// row's as for releases.
    Renew {
        candidate: &'static str,
        term_delta: i64,
    },
    /// A holder ending its tenure and beginning the next at once (election-mode relock), with
    /// a term relative to the row's.
    Succeed {
        candidate: &'static str,
        ttl_ms: u64,
        term_delta: i64,
        purpose: Purpose,
    },
    /// Let the database's clock run for this many milliseconds.
    Sleep(u64),
}

fn step() -> impl Strategy<Value = Step> {
    let candidate = || prop::sample::select(CANDIDATES[..3].to_vec());
    prop_oneof![
        5 => (
            candidate(),
            prop::sample::select(TTLS.to_vec()),
            prop::option::of(prop::sample::select(METADATA.to_vec())),
            prop::sample::select(vec![None, Some(0i64), Some(0), Some(-1)]),
            purpose(),
        )
            .prop_map(|(candidate, ttl_ms, metadata, names, purpose)| Step::Campaign {
                candidate,
                ttl_ms,
                metadata,
                names,
                purpose,
            }),
        2 => (
            candidate(),
            prop::sample::select(vec![-1i64, 0, 0, 1]),
            prop::sample::select(vec![0u64, 0, 40]),
            prop::sample::select(REASONS.to_vec()),
            purpose(),
        )
            .prop_map(|(candidate, term_delta, at_least_ms, reason, purpose)| Step::Release {
                candidate,
                term_delta,
                at_least_ms,
                reason,
                purpose,
            }),
        1 => any::<bool>().prop_map(|immediate| Step::Demote { immediate }),
        1 => (prop::sample::select(CANDIDATES.to_vec()), any::<bool>())
            .prop_map(|(to, immediate)| Step::Handover { to, immediate }),
        1 => Just(Step::Pause),
        1 => Just(Step::Resume),
        2 => (candidate(), prop::sample::select(vec![-1i64, 0, 0, 0]))
            .prop_map(|(candidate, term_delta)| Step::Renew { candidate, term_delta }),
        1 => (
            candidate(),
            prop::sample::select(TTLS.to_vec()),
            prop::sample::select(vec![-1i64, 0, 0]),
            purpose(),
        )
            .prop_map(|(candidate, ttl_ms, term_delta, purpose)| Step::Succeed {
                candidate,
                ttl_ms,
                term_delta,
                purpose,
            }),
        1 => (0u64..80).prop_map(Step::Sleep),
    ]
}

fn purpose() -> impl Strategy<Value = Purpose> {
    prop::sample::select(PURPOSES.to_vec())
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec(step(), 5..25)
}

/// The operation for `step` given the test's copy of the row (`None` for a sleep).
fn op_for(step: &Step, copy: Option<&Lease>) -> Option<Op> {
    let term = copy.map_or(0, |l| l.term);
    Some(match *step {
        Step::Campaign {
            candidate,
            ttl_ms,
            metadata,
            names,
            purpose,
        } => Op::Campaign {
            candidate: candidate.to_string(),
            term: names.map(|delta| term.saturating_add_signed(delta)),
            ttl_ms,
            metadata: metadata.map(str::to_string),
            purpose,
        },
        Step::Release {
            candidate,
            term_delta,
            at_least_ms,
            reason,
            purpose,
        } => Op::Release {
            candidate: candidate.to_string(),
            term: term.saturating_add_signed(term_delta),
            at_least_ms,
            reason: reason.map(str::to_string),
            purpose,
        },
        Step::Demote { immediate } => Op::Demote { immediate },
        Step::Handover { to, immediate } => Op::Handover {
            to: to.to_string(),
            immediate,
        },
        Step::Pause => Op::Pause,
        Step::Resume => Op::Resume,
        Step::Renew {
            candidate,
            term_delta,
        } => Op::Renew {
            candidate: candidate.to_string(),
            term: term.saturating_add_signed(term_delta),
        },
        Step::Succeed {
            candidate,
            ttl_ms,
            term_delta,
            purpose,
        } => Op::Succeed {
            candidate: candidate.to_string(),
            term: term.saturating_add_signed(term_delta),
            ttl_ms,
            purpose,
        },
        Step::Sleep(_) => return None,
    })
}

/// The fields in which two rows differ, for a readable failure.
fn lease_diff(got: Option<&Lease>, want: Option<&Lease>) -> Vec<String> {
    let (got, want) = match (got, want) {
        (None, None) => return Vec::new(),
        (Some(g), Some(w)) => (g, w),
        (g, w) => return vec![format!("row: backend {g:?}, model {w:?}")],
    };
    let mut diff = Vec::new();
    macro_rules! field {
        ($f:ident) => {
            if got.$f != want.$f {
                diff.push(format!(
                    "{}: backend {:?}, model {:?}",
                    stringify!($f),
                    got.$f,
                    want.$f
                ));
            }
        };
    }
    field!(name);
    field!(holder);
    field!(term);
    field!(acquired_at);
    field!(renewed_at);
    field!(expires_at);
    field!(ttl_ms);
    field!(metadata);
    field!(handover_to);
    field!(paused);
    diff
}

/// What happened over one backend's run, so that the test cannot silently test nothing.
#[derive(Default)]
struct Stats {
    cases: AtomicUsize,
    effects: Mutex<BTreeMap<&'static str, usize>>,
}

impl Stats {
    fn count(&self, effect: &Effect) {
        let label = match effect {
            Effect::Acquired {
                took_over_from: Some(_),
            } => "acquired (took over an expired holder)",
            Effect::Acquired {
                took_over_from: None,
            } => "acquired",
            Effect::Renewed => "renewed",
            Effect::SteppedDown(_) => "stepped down",
            Effect::Released => "released",
            Effect::NotHolder => "not holder",
            Effect::Unavailable => "unavailable",
            Effect::Demoted => "demoted",
            Effect::HandoverRequested => "handover requested",
            Effect::Forced => "forced",
            Effect::Paused => "paused",
            Effect::Resumed => "resumed",
            Effect::NoChange => "no change",
            Effect::UnknownName => "unknown name",
            other => panic!("an effect this test does not count yet: {other:?}"),
        };
        self.count_label(label);
    }

    fn count_label(&self, label: &'static str) {
        *self.effects.lock().unwrap().entry(label).or_default() += 1;
    }

    fn get(&self, label: &str) -> usize {
        self.effects
            .lock()
            .unwrap()
            .get(label)
            .copied()
            .unwrap_or(0)
    }
}

/// Runs the batched keep-alive for one lease and phrases its answer as an `Applied`: the batch
/// reports only which leases it renewed, so a lease it did not renew is compared as "no
/// change" (the model's NotHolder or SteppedDown, which write nothing either).
async fn renew_one(
    store: &Store,
    name: &str,
    candidate: &str,
    term: u64,
    copy: Option<&Lease>,
) -> tenure::Result<tenure::Applied> {
    let renewed = store
        .backend()
        .renew_many(candidate, &[(name.to_string(), term)])
        .await?;
    let now = renewed.now;
    let op = Op::Renew {
        candidate: candidate.to_string(),
        term,
    };
    Ok(match renewed.leases.into_iter().next() {
        Some(lease) => tenure::Applied {
            now,
            epoch: Default::default(),
            lease: Some(lease),
            effect: Effect::Renewed,
        },
        None => {
            // Not renewed: the model must agree that nothing was written.
            let model = decide(now, name, copy, &op);
            tenure::Applied {
                now,
                epoch: Default::default(),
                lease: copy.cloned(),
                effect: if model.write {
                    Effect::NoChange
                } else {
                    model.effect
                },
            }
        }
    })
}

fn db_err(what: &str, e: tenure::Error) -> TestCaseError {
    TestCaseError::fail(format!("{what}: {e}"))
}

/// One event as the history should show it: (event, term, holder, at, detail).
type ExpectedEvent = (String, u64, Option<String>, DbTime, String);

async fn run_case(store: &Store, steps: &[Step], stats: &Stats) -> Result<(), TestCaseError> {
    let name = common::unique("model");
    // The test's own copy of the row, only ever updated from the model.
    let mut copy: Option<Lease> = None;
    let mut last_now: Option<DbTime> = None;
    let mut events: Vec<ExpectedEvent> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let Some(op) = op_for(step, copy.as_ref()) else {
            if let Step::Sleep(ms) = step {
                tokio::time::sleep(Duration::from_millis(*ms)).await;
            }
            continue;
        };
        // Every third operation goes through the seam's batch (`Tx::leases`, as a layer
        // sends it), the others through `apply` (the fast paths included) and `renew_many`.
        let batched = i % 3 == 2;
        let applied = match &op {
            _ if batched => {
                stats.count_label("through the batch");
                let mut applied = tenure::backend::apply_batch(
                    store.backend().as_ref(),
                    &[(name.as_str(), op.clone())],
                    ACTOR,
                )
                .await
                .map_err(|e| db_err(&format!("step {i}: batch {op:?}"), e))?;
                applied
                    .pop()
                    .ok_or_else(|| TestCaseError::fail(format!("step {i}: an empty batch")))?
            }
            Op::Renew { candidate, term } => {
                renew_one(store, &name, candidate, *term, copy.as_ref())
                    .await
                    .map_err(|e| db_err(&format!("step {i}: renew_many {op:?}"), e))?
            }
            _ => store
                .apply(&name, &op, ACTOR)
                .await
                .map_err(|e| db_err(&format!("step {i}: apply {op:?}"), e))?,
        };
        let now = applied.now;
        if let Some(last) = last_now {
            prop_assert!(
                now >= last,
                "step {}: the database clock went back from {} to {}",
                i,
                last,
                now
            );
        }

        // In the epoch the backend read with its clock (terms are minted in it).
        let clock = Clock {
            now,
            epoch: applied.epoch,
        };
        let model = decide(clock, &name, copy.as_ref(), &op);
        stats.count(&model.effect);
        if matches!(op, Op::Renew { .. }) && !batched {
            stats.count_label(if model.effect == Effect::Renewed {
                "batch renewed"
            } else {
                "batch not renewed"
            });
        }
        prop_assert_eq!(
            &applied.effect,
            &model.effect,
            "step {}: {:?} at {} on {:?}: backend effect differs from the model",
            i,
            op,
            now,
            copy
        );
        let diff = lease_diff(applied.lease.as_ref(), model.lease.as_ref());
        prop_assert!(
            diff.is_empty(),
            "step {}: {:?} at {} on {:?}: the backend's row differs from the model's: {}",
            i,
            op,
            now,
            copy,
            diff.join("; ")
        );
        if let Some(e) = &model.event {
            events.push((
                e.kind.as_str().to_string(),
                e.term,
                e.holder.clone(),
                now,
                e.detail.clone(),
            ));
        }
        copy = model.lease;

        // What the backend stored, read back.
        let snapshot = store
            .get(&name)
            .await
            .map_err(|e| db_err(&format!("step {i}: get"), e))?;
        prop_assert!(
            snapshot.now >= now,
            "step {}: the read's clock {} is before the operation's {}",
            i,
            snapshot.now,
            now
        );
        last_now = Some(snapshot.now);
        prop_assert!(
            snapshot.leases.len() <= 1,
            "step {}: get returned {} rows",
            i,
            snapshot.leases.len()
        );
        let diff = lease_diff(snapshot.leases.first(), copy.as_ref());
        prop_assert!(
            diff.is_empty(),
            "step {}: after {:?} at {} the stored row differs from the model's: {}",
            i,
            op,
            now,
            diff.join("; ")
        );
    }

    // Every transition the model records (for its purpose) is in the history, in order, with
    // its database time and actor; no other.
    let history = store
        .history(&name, 1_000)
        .await
        .map_err(|e| db_err("history", e))?;
    let got: Vec<ExpectedEvent> = history
        .iter()
        .rev()
        .map(|h| {
            (
                h.event.clone(),
                h.term,
                h.holder.clone(),
                h.at,
                h.detail.clone(),
            )
        })
        .collect();
    prop_assert_eq!(&got, &events, "history of {}", name);
    for h in &history {
        prop_assert_eq!(h.actor.as_str(), ACTOR);
        prop_assert_eq!(h.name.as_str(), name.as_str());
    }
    Ok(())
}

fn model_matches(kind: BackendKind) {
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    let Some(store) = rt.block_on(common::store(kind)) else {
        return;
    };
    let stats = Stats::default();
    let config = ProptestConfig {
        cases: CASES,
        // Real time makes a failing case hard to replay exactly: do not write regression
        // files, and keep shrinking bounded.
        failure_persistence: None,
        max_shrink_iters: 256,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let result = runner.run(&steps(), |steps| {
        stats.cases.fetch_add(1, Ordering::SeqCst);
        rt.block_on(run_case(&store, &steps, &stats))
    });
    match result {
        Ok(()) => {}
        Err(TestError::Fail(reason, steps)) => {
            panic!(
                "{kind}: the backend disagrees with the model: {reason}\nminimal steps: {steps:#?}"
            )
        }
        Err(TestError::Abort(reason)) => panic!("{kind}: proptest aborted: {reason}"),
    }

    let cases = stats.cases.load(Ordering::SeqCst);
    let effects = stats.effects.lock().unwrap().clone();
    eprintln!(
        "{kind}: {cases} cases in {:.1} s; effects: {effects:?}",
        started.elapsed().as_secs_f64()
    );
    assert!(
        cases >= CASES as usize,
        "{kind}: only {cases} proptest cases ran, expected at least {CASES}"
    );
    // Expiry-driven transitions really happened, and so did refusals.
    let takeovers = stats.get("acquired (took over an expired holder)");
    assert!(
        takeovers >= 20,
        "{kind}: only {takeovers} takeovers of an expired lease: {effects:?}"
    );
    for label in [
        "batch renewed",
        "batch not renewed",
        "through the batch",
        "unavailable",
        "renewed",
        "acquired",
        "released",
        "not holder",
    ] {
        assert!(
            stats.get(label) >= 20,
            "{kind}: too few '{label}' outcomes: {effects:?}"
        );
    }
    for label in [
        "released",
        "stepped down",
        "demoted",
        "handover requested",
        "forced",
        "paused",
        "resumed",
    ] {
        assert!(
            stats.get(label) > 0,
            "{kind}: no '{label}' outcome: {effects:?}"
        );
    }
}

#[test]
fn model_matches_sqlite() {
    model_matches(BackendKind::Sqlite);
}

#[test]
fn model_matches_postgres() {
    model_matches(BackendKind::Postgres);
}

#[test]
fn model_matches_mysql() {
    model_matches(BackendKind::MySql);
}
