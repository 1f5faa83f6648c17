//! Properties of [`decide`] over random sequences of operations and clock steps.

use super::tests::*;
use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

const CANDIDATES: [&str; 4] = ["a", "b", "c", "d"];

#[derive(Clone, Debug)]
enum Step {
    /// Advance the clock by this many milliseconds.
    Tick(u64),
    Op(OpSpec),
}

/// An operation whose release term is relative to the row's term at the time it is applied.
#[derive(Clone, Debug)]
enum OpSpec {
    /// Candidate, ttl, and which term it names: 0 none, 1 the term it believes it holds (none
    /// if it believes nothing), 2 the row's term, 3 the row's term minus one.
    Campaign(usize, u64, u8),
    Release(usize, i64, u64),
    /// Candidate, ttl, the term it names relative to the row's.
    Succeed(usize, u64, i64),
    Demote(bool),
    Handover(usize, bool),
    Pause,
    Resume,
}

fn step() -> impl Strategy<Value = Step> {
    let ttl = prop::sample::select(vec![1u64, 5, 20, 100]);
    prop_oneof![
        3 => (0u64..150).prop_map(Step::Tick),
        5 => (0..3usize, ttl.clone(), prop::sample::select(vec![0u8, 1, 1, 1, 2, 3]))
            .prop_map(|(c, t, n)| Step::Op(OpSpec::Campaign(c, t, n))),
        2 => (0..3usize, -1i64..=1, prop::sample::select(vec![0u64, 0, 50]))
            .prop_map(|(c, d, l)| Step::Op(OpSpec::Release(c, d, l))),
        1 => (0..3usize, ttl, -1i64..=0).prop_map(|(c, t, d)| Step::Op(OpSpec::Succeed(c, t, d))),
        1 => any::<bool>().prop_map(|i| Step::Op(OpSpec::Demote(i))),
        1 => (0..4usize, any::<bool>()).prop_map(|(c, i)| Step::Op(OpSpec::Handover(c, i))),
        1 => Just(Step::Op(OpSpec::Pause)),
        1 => Just(Step::Op(OpSpec::Resume)),
    ]
}

fn to_op(spec: &OpSpec, current: Option<&Lease>, beliefs: &HashMap<String, (u64, DbTime)>) -> Op {
    let term = current.map_or(0, |l| l.term);
    match *spec {
        OpSpec::Campaign(c, ttl_ms, names) => {
            let named = match names {
                0 => None,
                1 => beliefs.get(CANDIDATES[c]).map(|(t, _)| *t),
                2 => Some(term),
                _ => Some(term.saturating_sub(1)),
            };
            match named {
                Some(t) => renew_as(CANDIDATES[c], t, ttl_ms),
                None => campaign(CANDIDATES[c], ttl_ms),
            }
        }
        OpSpec::Release(c, delta, at_least_ms) => release(
            CANDIDATES[c],
            term.saturating_add_signed(delta),
            at_least_ms,
        ),
        OpSpec::Succeed(c, ttl_ms, delta) => Op::Succeed {
            candidate: CANDIDATES[c].to_string(),
            term: term.saturating_add_signed(delta),
            ttl_ms,
            purpose: Purpose::Election,
        },
        OpSpec::Demote(immediate) => Op::Demote { immediate },
        OpSpec::Handover(c, immediate) => handover(CANDIDATES[c], immediate),
        OpSpec::Pause => Op::Pause,
        OpSpec::Resume => Op::Resume,
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// P1 (terms never decrease; every new tenure raises the term by exactly one), P5 (a stale
    /// release writes nothing) and at most one believing leader at any instant unless an
    /// operator used one of the unsafe `immediate` operations.
    #[test]
    fn random_sequences_keep_the_invariants(steps in prop::collection::vec(step(), 1..60)) {
        let mut now = at(0);
        let mut row: Option<Lease> = None;
        // Who believes it leads, in which term, until when (its last acquire/renew + ttl).
        let mut beliefs: HashMap<String, (u64, DbTime)> = HashMap::new();
        for step in &steps {
            let spec = match step {
                Step::Tick(ms) => {
                    now = now.plus_ms(*ms);
                    continue;
                }
                Step::Op(spec) => spec,
            };
            let op = to_op(spec, row.as_ref(), &beliefs);
            let d = decide(now, NAME, row.as_ref(), &op);
            let before = row.as_ref().map_or(0, |l| l.term);
            let after = d.lease.as_ref().map_or(0, |l| l.term);

            // The decision is self-consistent.
            if !d.write {
                prop_assert_eq!(d.lease.as_ref(), row.as_ref(), "no write but a new row: {:?}", d);
                prop_assert!(d.event.is_none(), "an event without a write: {:?}", d);
            } else {
                prop_assert!(d.lease.is_some());
                prop_assert!(d.lease.as_ref() != row.as_ref() || matches!(d.effect, Effect::Renewed),
                    "a write that changes nothing: {:?}", d);
            }
            if let (Some(e), Some(l)) = (&d.event, &d.lease) {
                prop_assert_eq!(e.term, l.term);
                // Releases and demotes name who gave the lease up; the rest, the row's holder.
                let expected = if matches!(e.kind, EventKind::Released | EventKind::Demoted) {
                    row.as_ref().and_then(|r| r.holder.clone())
                } else {
                    l.holder.clone()
                };
                prop_assert_eq!(&e.holder, &expected);
            }
            if let Some(l) = &d.lease {
                prop_assert_eq!(l.name.as_str(), NAME);
                prop_assert!(l.acquired_at <= l.renewed_at && l.renewed_at <= now, "{:?}", l);
            }
            if row.is_some() {
                prop_assert!(d.lease.is_some(), "a row vanished: {:?}", d);
            }

            // P1.
            prop_assert!(after >= before, "term went down from {} to {}: {:?}", before, after, d);
            // An acquisition without an event adopts a forced grant, and only that.
            let adopted = matches!(d.effect, Effect::Acquired { .. }) && d.event.is_none();
            if adopted {
                prop_assert!(row.as_ref().is_some_and(|r| r.forced_grant_pending() && r.live_holder(now).is_some()), "{:?}", d);
            }
            match &d.effect {
                Effect::Acquired { .. } if adopted => {
                    // A forced grant adopted: its term was raised by the handover.
                    prop_assert_eq!(after, before, "{:?}", d);
                    prop_assert!(!d.lease.as_ref().unwrap().forced_grant_pending());
                }
                Effect::Acquired { .. } | Effect::Forced => {
                    prop_assert_eq!(after, before + 1, "{:?}", d);
                    let l = d.lease.as_ref().unwrap();
                    prop_assert_eq!(l.acquired_at, now);
                    prop_assert!(l.holder.is_some());
                }
                _ => prop_assert_eq!(after, before, "term changed without a new tenure: {:?}", d),
            }
            // P5.
            if matches!(op, Op::Release { .. }) && d.effect == Effect::NotHolder {
                prop_assert!(!d.write);
            }
            // Only a campaign naming the live term renews: a holder id alone never does.
            if let (Op::Campaign { term: named, .. }, Effect::Renewed) = (&op, &d.effect) {
                prop_assert_eq!(*named, Some(before), "renewed a term it did not name: {:?}", d);
            }

            // Beliefs: at most one candidate believes it leads at any instant.
            match (&op, &d.effect) {
                (Op::Campaign { candidate, ttl_ms, .. } | Op::Succeed { candidate, ttl_ms, .. }, Effect::Acquired { .. }) => {
                    for (other, (_, until)) in &beliefs {
                        prop_assert!(other == candidate || *until <= now,
                            "{} acquired at {} while {} believes it leads until {}: {:?}",
                            candidate, now, other, until, steps);
                    }
                    beliefs.clear();
                    beliefs.insert(candidate.clone(), (after, now.plus_ms(*ttl_ms)));
                }
                (Op::Campaign { candidate, ttl_ms, .. }, Effect::Renewed) => {
                    for (other, (_, until)) in &beliefs {
                        prop_assert!(other == candidate || *until <= now,
                            "{} renewed at {} while {} believes it leads until {}",
                            candidate, now, other, until);
                    }
                    beliefs.insert(candidate.clone(), (after, now.plus_ms(*ttl_ms)));
                }
                (Op::Campaign { candidate, .. } | Op::Succeed { candidate, .. }, Effect::SteppedDown(_))
                | (Op::Release { candidate, .. }, Effect::Released) => {
                    beliefs.remove(candidate);
                }
                // The unsafe operations: the old holder may overlap by design. Forget it.
                (Op::Demote { immediate: true }, Effect::Demoted) | (_, Effect::Forced) => {
                    beliefs.clear();
                }
                _ => {}
            }
            // The row agrees with the beliefs: a live holder that campaigned in its term
            // is the only believer.
            if let Some(l) = &d.lease {
                if let Some(h) = l.live_holder(now) {
                    for (other, (term, until)) in &beliefs {
                        if other != h && *until > now {
                            prop_assert!(false, "{} leads term {} at {} but {} believes in term {} until {}",
                                h, l.term, now, other, term, until);
                        }
                    }
                }
            }
            row = d.lease;
        }
    }
}
