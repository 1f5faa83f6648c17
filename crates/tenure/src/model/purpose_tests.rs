//! Unit tests of what each [`Purpose`] records and announces: an election every transition;
//! a lock by default only takeovers, acquisitions by handover, releases with a reason and
//! admin events, and never an acquisition's announcement.

use super::tests::at;
use super::*;

const NAME: &str = "nightly-report";
const LOCK: Purpose = Purpose::Lock {
    record_every_cycle: false,
};
const AUDITED_LOCK: Purpose = Purpose::Lock {
    record_every_cycle: true,
};
const PURPOSES: [Purpose; 3] = [Purpose::Election, LOCK, AUDITED_LOCK];

fn campaign(candidate: &str, purpose: Purpose) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term: None,
        ttl_ms: 1_000,
        metadata: None,
        purpose,
    }
}

fn release(candidate: &str, term: u64, reason: Option<&str>, purpose: Purpose) -> Op {
    Op::Release {
        candidate: candidate.to_string(),
        term,
        at_least_ms: 0,
        reason: reason.map(str::to_string),
        purpose,
    }
}

/// `holder`'s tenure `term`, acquired at 0 with a 1 s ttl; `None`: vacant since 0.
fn row(holder: Option<&str>, term: u64) -> Lease {
    Lease {
        name: NAME.to_string(),
        holder: holder.map(str::to_string),
        term,
        acquired_at: at(0),
        renewed_at: at(0),
        expires_at: at(if holder.is_some() { 1_000 } else { 0 }),
        ttl_ms: 1_000,
        metadata: None,
        handover_to: None,
        paused: false,
    }
}

/// (recorded event, announced) of a decision that wrote.
fn outcome(d: &Decision) -> (Option<EventKind>, bool) {
    assert!(d.write, "{d:?}");
    (d.event.as_ref().map(|e| e.kind), d.wake)
}

#[test]
fn an_uncontested_acquisition_is_recorded_and_announced_only_for_an_election() {
    for current in [None, Some(row(None, 4))] {
        for purpose in PURPOSES {
            let d = decide(at(10), NAME, current.as_ref(), &campaign("a", purpose));
            let recorded = (purpose != LOCK).then_some(EventKind::Acquired);
            let announced = purpose == Purpose::Election;
            assert_eq!(
                outcome(&d),
                (recorded, announced),
                "{purpose:?} on {current:?}"
            );
            assert_eq!(
                d.lease.unwrap().term,
                current.as_ref().map_or(1, |r| r.term + 1)
            );
        }
    }
}

#[test]
fn a_lock_records_a_takeover_and_an_acquisition_by_handover_without_announcing_them() {
    let expired = row(Some("a"), 4);
    let reserved = Lease {
        handover_to: Some("b".to_string()),
        ..row(None, 4)
    };
    for (current, kind) in [
        (expired, EventKind::TakenOverExpired),
        (reserved, EventKind::Acquired),
    ] {
        for purpose in [LOCK, AUDITED_LOCK] {
            let d = decide(at(2_000), NAME, Some(&current), &campaign("b", purpose));
            assert_eq!(
                outcome(&d),
                (Some(kind), false),
                "{purpose:?} on {current:?}"
            );
            assert_eq!(d.lease.unwrap().term, 5, "the term rises all the same");
        }
        let d = decide(
            at(2_000),
            NAME,
            Some(&current),
            &campaign("b", Purpose::Election),
        );
        assert_eq!(outcome(&d), (Some(kind), true));
    }
}

#[test]
fn a_lock_succeeding_its_own_term_is_an_uncontested_acquisition() {
    for purpose in PURPOSES {
        let op = Op::Succeed {
            candidate: "a".to_string(),
            term: 4,
            ttl_ms: 1_000,
            purpose,
        };
        let d = decide(at(10), NAME, Some(&row(Some("a"), 4)), &op);
        let recorded = (purpose != LOCK).then_some(EventKind::Acquired);
        let announced = purpose == Purpose::Election;
        assert_eq!(outcome(&d), (recorded, announced), "{purpose:?}");
        assert_eq!(d.lease.unwrap().term, 5);
    }
}

#[test]
fn every_release_is_announced_and_a_locks_is_recorded_only_with_a_reason() {
    let current = row(Some("a"), 4);
    for purpose in PURPOSES {
        for reason in [None, Some("health check failed")] {
            let d = decide(
                at(10),
                NAME,
                Some(&current),
                &release("a", 4, reason, purpose),
            );
            let recorded = (purpose != LOCK || reason.is_some()).then_some(EventKind::Released);
            assert_eq!(outcome(&d), (recorded, true), "{purpose:?}, {reason:?}");
            assert_eq!(d.lease.unwrap().holder, None);
        }
    }
    let stale = decide(at(10), NAME, Some(&current), &release("a", 3, None, LOCK));
    assert!(!stale.write && !stale.wake && stale.event.is_none());
}

#[test]
fn admin_events_are_recorded_and_announced() {
    let current = row(Some("a"), 4);
    for op in [
        Op::Demote { immediate: false },
        Op::Handover {
            to: "b".to_string(),
            immediate: false,
        },
        Op::Pause,
    ] {
        let d = decide(at(10), NAME, Some(&current), &op);
        assert!(d.event.is_some() && d.wake, "{op:?}: {d:?}");
    }
    let paused = Lease {
        paused: true,
        ..current
    };
    let d = decide(at(10), NAME, Some(&paused), &Op::Resume);
    assert_eq!(outcome(&d), (Some(EventKind::Resumed), true));
}

#[test]
fn renewals_are_neither_recorded_nor_announced() {
    let renew = Op::Campaign {
        candidate: "a".to_string(),
        term: Some(4),
        ttl_ms: 1_000,
        metadata: None,
        purpose: LOCK,
    };
    let d = decide(at(10), NAME, Some(&row(Some("a"), 4)), &renew);
    assert_eq!(d.effect, Effect::Renewed);
    assert_eq!(outcome(&d), (None, false));
}
