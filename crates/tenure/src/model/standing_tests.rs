//! The priority rules: a free lease waits for a better live candidate (for one renew interval
//! after it was last seen, at most), a holder hands over to a better candidate that has
//! settled, and equal priorities and observers change nothing.

use super::tests::at;
use super::*;

const NAME: &str = "billing-cron";

fn campaign(candidate: &str, term: Option<u64>) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term,
        ttl_ms: 4_000,
        metadata: None,
        purpose: Purpose::Election,
    }
}

fn rival(candidate: &str, priority: i32, since: i64, seen: i64) -> Rival {
    Rival {
        candidate: candidate.to_string(),
        priority,
        observer: false,
        since: at(since),
        seen_at: at(seen),
        expires_at: at(seen).plus_ms(4_000),
        alive_at: at(seen),
        renew_ms: 1_000,
        settle_ms: 1_000,
        backoff_until: None,
    }
}

fn standing(priority: i32, rivals: &[Rival]) -> Standing<'_> {
    Standing {
        priority,
        settle_ms: 1_000,
        since: at(-60_000),
        rivals,
        ..Standing::default()
    }
}

fn vacant(term: u64) -> Lease {
    Lease {
        name: NAME.to_string(),
        holder: None,
        term,
        acquired_at: at(0),
        renewed_at: at(0),
        expires_at: at(0),
        ttl_ms: 4_000,
        metadata: None,
        handover_to: None,
        paused: false,
    }
}

fn held(holder: &str, term: u64, renewed: i64) -> Lease {
    Lease {
        holder: Some(holder.to_string()),
        renewed_at: at(renewed),
        expires_at: at(renewed).plus_ms(4_000),
        ..vacant(term)
    }
}

#[test]
fn a_free_lease_waits_for_a_better_live_candidate_one_renew_interval_at_most() {
    let rivals = [rival("best", 3, 0, 10_000)];
    let low = standing(1, &rivals);
    for row in [None, Some(vacant(5))] {
        // Seen 500 ms ago (its renew interval is 1 s): it will campaign soon; wait.
        let d = decide_among(
            at(10_500),
            NAME,
            row.as_ref(),
            &campaign("low", None),
            Some(&low),
        );
        assert_eq!(d.effect, Effect::Unavailable, "{row:?}");
        assert!(!d.write);
        // Not seen for a whole renew interval (yet still live): it cannot win; take it.
        let d = decide_among(
            at(11_000),
            NAME,
            row.as_ref(),
            &campaign("low", None),
            Some(&low),
        );
        assert!(
            matches!(d.effect, Effect::Acquired { .. }),
            "{row:?}: {d:?}"
        );
    }
    // An equal, a worse or an observer never holds anyone off; nor does an expired one.
    let others = [
        rival("same", 1, 0, 10_000),
        rival("worse", 0, 0, 10_000),
        Rival {
            observer: true,
            ..rival("watcher", 9, 0, 10_000)
        },
        Rival {
            expires_at: at(10_400),
            ..rival("gone", 9, 0, 10_000)
        },
    ];
    let d = decide_among(
        at(10_500),
        NAME,
        Some(&vacant(5)),
        &campaign("low", None),
        Some(&standing(1, &others)),
    );
    assert!(matches!(d.effect, Effect::Acquired { .. }), "{d:?}");
}

#[test]
fn the_better_candidate_itself_does_not_wait() {
    let rivals = [rival("low", 1, 0, 10_000)];
    let d = decide_among(
        at(10_500),
        NAME,
        Some(&vacant(5)),
        &campaign("best", None),
        Some(&standing(3, &rivals)),
    );
    assert!(matches!(d.effect, Effect::Acquired { .. }));
    assert_eq!(d.lease.unwrap().term, 6);
}

#[test]
fn a_holder_hands_over_to_a_better_candidate_once_it_has_settled() {
    let row = held("low", 5, 9_000);
    // Live for 500 ms of the 1 s settle time: renewed as usual.
    let fresh = [rival("best", 3, 10_000, 10_000)];
    let d = decide_among(
        at(10_500),
        NAME,
        Some(&row),
        &campaign("low", Some(5)),
        Some(&standing(1, &fresh)),
    );
    assert_eq!(d.effect, Effect::Renewed);
    // Settled: the lease is reserved for it and the holder steps down (the graceful handover).
    let settled = [
        rival("best", 3, 10_000, 11_000),
        rival("second", 2, 9_000, 11_000),
    ];
    let d = decide_among(
        at(11_000),
        NAME,
        Some(&row),
        &campaign("low", Some(5)),
        Some(&standing(1, &settled)),
    );
    assert_eq!(
        d.effect,
        Effect::SteppedDown(StepDownReason::HandoverTo("best".into()))
    );
    let lease = d.lease.clone().unwrap();
    assert_eq!(lease.handover_to.as_deref(), Some("best"));
    assert_eq!(
        (lease.holder.as_deref(), lease.term, lease.expires_at),
        (Some("low"), 5, row.expires_at),
        "not renewed: its work stops and it releases"
    );
    let event = d.event.unwrap();
    assert_eq!(event.kind, EventKind::HandedOver);
    assert!(event.detail.contains("priority"), "{}", event.detail);
    // Then the reservation holds: the second-best waits, the target takes it.
    let released = decide(
        at(11_100),
        NAME,
        Some(&lease),
        &Op::Release {
            candidate: "low".into(),
            term: 5,
            at_least_ms: 0,
            reason: None,
            purpose: Purpose::Election,
        },
    );
    let vacated = released.lease.unwrap();
    let second = decide_among(
        at(11_200),
        NAME,
        Some(&vacated),
        &campaign("second", None),
        Some(&standing(2, &settled[..1])),
    );
    assert_eq!(second.effect, Effect::Unavailable);
    let best = decide_among(
        at(11_200),
        NAME,
        Some(&vacated),
        &campaign("best", None),
        Some(&standing(3, &settled[1..])),
    );
    assert!(matches!(best.effect, Effect::Acquired { .. }));
    assert_eq!(best.lease.unwrap().term, 6);
}

#[test]
fn equal_priorities_and_observers_never_take_the_lead() {
    let row = held("a", 5, 9_000);
    let rivals = [
        rival("b", 1, 0, 11_000),
        Rival {
            observer: true,
            ..rival("watcher", 9, 0, 11_000)
        },
    ];
    let d = decide_among(
        at(11_000),
        NAME,
        Some(&row),
        &campaign("a", Some(5)),
        Some(&standing(1, &rivals)),
    );
    assert_eq!(d.effect, Effect::Renewed);
}
