//! Each invariant on a clean history, and on a history that breaks it: the checker must pass
//! the first and name the broken invariant in the second.

use super::*;
use crate::event::{Event, Kind, Resource};

const MS: u64 = 1_000_000;

fn at(t_ms: u64, node: &str, kind: Kind) -> Event {
    Event {
        t: t_ms * MS,
        wall_ms: 0,
        node: node.to_string(),
        lock: None,
        kind,
    }
}

fn gained(t: u64, node: &str, term: u64, deadline: u64) -> Event {
    at(
        t,
        node,
        Kind::Gained {
            term,
            deadline: deadline * MS,
            holder: None,
        },
    )
}

fn down(t: u64, node: &str, term: u64) -> Event {
    at(t, node, Kind::SteppedDown { term })
}

fn issued(t: u64, node: &str, resource: Resource, term: u64, seq: u64, deadline: u64) -> Event {
    at(
        t,
        node,
        Kind::OpIssued {
            resource,
            term,
            seq,
            deadline: deadline * MS,
        },
    )
}

fn accepted(t: u64, node: &str, resource: Resource, term: u64, prev: (&str, u64)) -> Event {
    at(
        t,
        node,
        Kind::OpAccepted {
            resource,
            term,
            seq: t,
            prev_node: prev.0.to_string(),
            prev_term: prev.1,
            prev_seq: 0,
        },
    )
}

fn fault(t: u64, fault: &str, target: &str) -> Event {
    at(
        t,
        "nemesis",
        Kind::FaultStart {
            fault: fault.into(),
            target: target.into(),
        },
    )
}

fn db(terms: &[(u64, &str)]) -> Vec<DbAcquisition> {
    terms
        .iter()
        .map(|(term, holder)| DbAcquisition {
            term: *term,
            holder: holder.to_string(),
        })
        .collect()
}

fn strict() -> Expect {
    Expect {
        exclusive: true,
        control_must_fail: false,
        fence_must_refuse: false,
        failover_bound: Some(Duration::from_millis(2_500)),
    }
}

fn invariants(v: &Verdict) -> Vec<&'static str> {
    v.violations.iter().map(|x| x.invariant).collect()
}

/// a leads term 1, is killed at 1000 ms (deadline 1800), b gains term 2 at 2100.
fn clean() -> Vec<Event> {
    vec![
        gained(0, "a", 1, 1_800),
        issued(10, "a", Resource::Fenced, 1, 1, 1_800),
        accepted(12, "a", Resource::Fenced, 1, ("", 0)),
        issued(20, "a", Resource::Unfenced, 1, 2, 1_800),
        accepted(25, "a", Resource::Unfenced, 1, ("", 0)),
        fault(1_000, "kill", "a"),
        gained(2_100, "b", 2, 3_900),
        issued(2_110, "b", Resource::Fenced, 2, 1, 3_900),
        accepted(2_112, "b", Resource::Fenced, 2, ("a", 1)),
    ]
}

#[test]
fn a_clean_history_passes_with_its_failover_measured() {
    let v = check(&clean(), &db(&[(1, "a"), (2, "b")]), &strict());
    assert!(v.violations.is_empty(), "{:?}", v.violations);
    assert!(v.control.is_empty());
    assert!(v.passed(&strict()));
    assert_eq!(
        (v.tenures, v.faults, v.fenced_accepted, v.control_accepted),
        (2, 1, 2, 1)
    );
    assert_eq!(v.failovers, vec![Duration::from_millis(1_100)]);
}

#[test]
fn i1_a_term_gained_by_two_nodes() {
    let mut h = clean();
    h.push(gained(2_200, "c", 2, 4_000));
    assert!(invariants(&check(&h, &[], &Expect::default())).contains(&"I1"));
}

#[test]
fn i1_a_term_gained_twice_by_one_node() {
    let mut h = clean();
    h.push(gained(2_200, "b", 2, 4_000));
    let v = check(&h, &[], &Expect::default());
    assert_eq!(invariants(&v), vec!["I1"]);
    assert!(v.violations[0].detail.contains("b gained term 2 twice"));
}

#[test]
fn i1_a_term_acquired_twice_even_if_not_believed_twice() {
    let answer = |t, node, effect: &str, term| {
        at(
            t,
            node,
            Kind::CampaignAnswered {
                effect: effect.into(),
                term,
            },
        )
    };
    let mut h = clean();
    h.push(answer(2_100, "b", "acquired", 2));
    h.push(answer(2_150, "b", "renewed", 2));
    assert!(check(&h, &[], &Expect::default()).violations.is_empty());
    h.push(answer(5_000, "b", "acquired", 2));
    let v = check(&h, &[], &Expect::default());
    assert_eq!(invariants(&v), vec!["I1"]);
    assert!(v.violations[0].detail.contains("term 2 acquired twice"));
}

#[test]
fn i1_a_lower_term_gained_later() {
    let h = vec![gained(0, "a", 5, 100), gained(500, "b", 4, 900)];
    assert_eq!(invariants(&check(&h, &[], &Expect::default())), vec!["I1"]);
}

#[test]
fn i1_the_database_gave_the_term_to_someone_else() {
    let v = check(&clean(), &db(&[(1, "a"), (2, "c")]), &Expect::default());
    assert_eq!(invariants(&v), vec!["I1"]);
}

#[test]
fn i1_database_terms_out_of_order() {
    let v = check(
        &[],
        &db(&[(1, "a"), (3, "b"), (2, "c")]),
        &Expect::default(),
    );
    assert_eq!(invariants(&v), vec!["I1"]);
}

#[test]
fn i1_an_answer_with_a_lower_term() {
    let answer = |t, term| {
        at(
            t,
            "a",
            Kind::CampaignAnswered {
                effect: "renewed".into(),
                term,
            },
        )
    };
    let v = check(&[answer(0, 3), answer(10, 2)], &[], &Expect::default());
    assert_eq!(invariants(&v), vec!["I1"]);
}

#[test]
fn i2_overlap_is_a_violation_only_where_asserted() {
    // b gains before a's deadline and before a stepped down.
    let h = vec![gained(0, "a", 1, 1_800), gained(1_500, "b", 2, 3_300)];
    let strict = check(&h, &[], &strict());
    assert_eq!(invariants(&strict), vec!["I2"]);
    assert_eq!(strict.overlaps, 1);
    let lenient = check(&h, &[], &Expect::default());
    assert!(lenient.violations.is_empty());
    assert_eq!(lenient.overlaps, 1, "still counted");
}

#[test]
fn i2_a_renewal_extends_the_interval_and_a_step_down_ends_it() {
    let renewed = at(
        400,
        "a",
        Kind::Renewed {
            term: 1,
            deadline: 2_200 * MS,
        },
    );
    let h = vec![
        gained(0, "a", 1, 1_800),
        renewed.clone(),
        gained(2_000, "b", 2, 3_800),
    ];
    assert_eq!(invariants(&check(&h, &[], &strict())), vec!["I2"]);
    let h = vec![
        gained(0, "a", 1, 1_800),
        renewed,
        down(1_000, "a", 1),
        gained(2_000, "b", 2, 3_800),
    ];
    assert!(check(&h, &[], &strict()).violations.is_empty());
}

#[test]
fn i3_a_stale_fenced_write_is_a_violation_and_a_stale_control_write_is_caught() {
    let mut h = clean();
    h.push(accepted(2_500, "a", Resource::Fenced, 1, ("b", 2)));
    assert_eq!(invariants(&check(&h, &[], &Expect::default())), vec!["I3"]);

    let refused = at(
        2_501,
        "a",
        Kind::OpRejected {
            resource: Resource::Fenced,
            term: 1,
            seq: 8,
            error: "lease lost".into(),
        },
    );
    let mut h = clean();
    h.push(accepted(2_500, "a", Resource::Unfenced, 1, ("b", 2)));
    h.push(refused.clone());
    let control = Expect {
        control_must_fail: true,
        fence_must_refuse: true,
        ..Expect::default()
    };
    let v = check(&h, &[], &control);
    assert!(v.violations.is_empty());
    assert_eq!((v.control.len(), v.fenced_rejected), (1, 1));
    assert!(v.passed(&control));
    // Without the stale write the control was not caught; without the refusal the fence was
    // never tested: either way the run fails.
    let mut h = clean();
    h.push(refused);
    assert!(!check(&h, &[], &control).passed(&control));
    let mut h = clean();
    h.push(accepted(2_500, "a", Resource::Unfenced, 1, ("b", 2)));
    assert!(!check(&h, &[], &control).passed(&control));
}

#[test]
fn i4_an_operation_after_the_deadline_or_the_step_down() {
    let mut h = clean();
    h.push(issued(1_900, "a", Resource::Fenced, 1, 9, 1_800));
    assert_eq!(invariants(&check(&h, &[], &Expect::default())), vec!["I4"]);

    let h = vec![
        gained(0, "a", 1, 1_800),
        down(500, "a", 1),
        issued(600, "a", Resource::Fenced, 1, 3, 1_800),
    ];
    assert_eq!(invariants(&check(&h, &[], &Expect::default())), vec!["I4"]);
}

#[test]
fn i5_a_slow_or_missing_failover_after_a_crash() {
    let mut h = clean();
    h.retain(|e| e.node != "b");
    h.push(gained(4_000, "b", 2, 5_800));
    assert_eq!(invariants(&check(&h, &[], &strict())), vec!["I5"]);
    h.pop();
    assert_eq!(invariants(&check(&h, &[], &strict())), vec!["I5"]);
    // Not crash-like: measured, never asserted.
    let h = vec![
        gained(0, "a", 1, 1_800),
        fault(100, "blackhole", "a"),
        gained(9_000, "b", 2, 9_800),
    ];
    let v = check(&h, &[], &strict());
    assert!(v.violations.is_empty());
    assert_eq!(v.failovers, vec![Duration::from_millis(8_900)]);
}

#[test]
fn i5_the_crashed_node_itself_does_not_count_as_the_successor() {
    let h = vec![
        gained(0, "a", 1, 1_800),
        fault(100, "pause", "a"),
        gained(4_200, "a", 2, 6_000),
    ];
    assert_eq!(invariants(&check(&h, &[], &strict())), vec!["I5"]);
}
