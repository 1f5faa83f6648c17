//! Unit tests of [`decide`]'s admin operations: demote, handover, pause and resume.

use super::tests::*;
use super::*;

#[test]
fn demote_keeps_expiry_as_lock_delay() {
    let row = held("a", 5, 0, 1_000, 10_000); // expires at 11 s
    let now = at(2_000);
    let d = decide(now, NAME, Some(&row), &Op::Demote { immediate: false });
    assert_eq!(d.effect, Effect::Demoted);
    assert!(d.write);
    assert_eq!(
        d.lease,
        Some(Lease {
            holder: None,
            ..row.clone()
        })
    );
    assert_eq!(event_of(&d), Some(event(EventKind::Demoted, 5, Some("a"))));
    assert!(d.event.unwrap().detail.contains("a demoted"));
    let after = d.lease.unwrap();
    assert_eq!(after.expires_at, at(11_000));
    // Nobody starts before the old expiry, not even the old holder...
    for c in ["a", "b"] {
        let d = decide(at(10_999), NAME, Some(&after), &campaign(c, 10_000));
        assert_unchanged(&d, Some(&after), Effect::Unavailable);
    }
    // ...whose renew fails: it no longer holds the lease.
    let d = decide(at(11_000), NAME, Some(&after), &campaign("b", 10_000));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(d.lease.unwrap().term, 6);
    // A stale release of the demoted term changes nothing.
    let d = decide(at(3_000), NAME, Some(&after), &release("a", 5, 0));
    assert_unchanged(&d, Some(&after), Effect::NotHolder);
}

#[test]
fn immediate_demote_ends_the_lease_now() {
    let row = held("a", 5, 0, 1_000, 10_000);
    let now = at(2_000);
    let d = decide(now, NAME, Some(&row), &Op::Demote { immediate: true });
    assert_eq!(d.effect, Effect::Demoted);
    assert_eq!(
        d.lease,
        Some(Lease {
            holder: None,
            expires_at: now,
            ..row.clone()
        })
    );
    assert_eq!(event_of(&d), Some(event(EventKind::Demoted, 5, Some("a"))));
    assert!(d.event.unwrap().detail.contains("unsafe"));
    let after = d.lease.unwrap();
    let d = decide(now, NAME, Some(&after), &campaign("b", 10_000));
    assert_eq!(d.lease.unwrap().term, 6);

    // An already expired holder: expires_at = min(expires_at, now) keeps the old expiry.
    let expired = held("a", 5, 0, 0, 10);
    let d = decide(
        at(500),
        NAME,
        Some(&expired),
        &Op::Demote { immediate: true },
    );
    assert_eq!(d.effect, Effect::Demoted);
    let lease = d.lease.unwrap();
    assert_eq!(lease.expires_at, at(10));
    assert_eq!(lease.holder, None);
}

#[test]
fn demote_of_a_vacant_lease() {
    // Nothing held and nothing blocked: no change.
    let free = vacant(5, 0, 1_000, 10_000);
    for immediate in [false, true] {
        let d = decide(at(2_000), NAME, Some(&free), &Op::Demote { immediate });
        assert_unchanged(&d, Some(&free), Effect::NoChange);
    }
    // In a lock-delay: a plain demote keeps it, an immediate one cuts it short.
    let blocked = vacant(5, 0, 30_000, 10_000);
    let d = decide(
        at(2_000),
        NAME,
        Some(&blocked),
        &Op::Demote { immediate: false },
    );
    assert_unchanged(&d, Some(&blocked), Effect::NoChange);
    let d = decide(
        at(2_000),
        NAME,
        Some(&blocked),
        &Op::Demote { immediate: true },
    );
    assert_eq!(d.effect, Effect::Demoted);
    assert_eq!(d.lease.as_ref().unwrap().expires_at, at(2_000));
    assert_eq!(event_of(&d), Some(event(EventKind::Demoted, 5, None)));
}

#[test]
fn a_lapsed_handover_can_be_asked_for_again() {
    // Released at 1 s with a 1 s ttl; a handover to "c" was asked for and lapsed at 2 s.
    let lapsed = Lease {
        handover_to: Some("c".to_string()),
        ..vacant(5, 0, 1_000, 1_000)
    };
    assert_eq!(
        decide(at(3_000), NAME, Some(&lapsed), &campaign("b", 1_000)).effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    let d = decide(at(3_000), NAME, Some(&lapsed), &handover("c", false));
    assert_eq!(
        d.effect,
        Effect::HandoverRequested,
        "a lapsed request is renewed, not ignored"
    );
    let renewed = d.lease.unwrap();
    assert_eq!(renewed.expires_at, at(3_000));
    assert_eq!(
        decide(at(3_500), NAME, Some(&renewed), &campaign("b", 1_000)).effect,
        Effect::Unavailable
    );
    // While it is pending, asking again changes nothing.
    assert_unchanged(
        &decide(at(3_500), NAME, Some(&renewed), &handover("c", false)),
        Some(&renewed),
        Effect::NoChange,
    );
}

#[test]
fn handover_of_a_name_never_held_is_unknown() {
    let d = decide(at(0), NAME, None, &Op::Pause);
    let paused = d.lease.unwrap();
    for immediate in [false, true] {
        let d = decide(at(10), NAME, Some(&paused), &handover("c", immediate));
        assert_unchanged(&d, Some(&paused), Effect::UnknownName);
    }
}

// ---------------------------------------------------------------------------------------------
// handover

#[test]
fn graceful_handover_of_a_live_lease() {
    let row = held("a", 5, 0, 1_000, 10_000);
    let now = at(2_000);
    let d = decide(now, NAME, Some(&row), &handover("b", false));
    assert_eq!(d.effect, Effect::HandoverRequested);
    assert!(d.write);
    assert_eq!(
        d.lease,
        Some(Lease {
            handover_to: Some("b".to_string()),
            ..row.clone()
        })
    );
    assert_eq!(
        event_of(&d),
        Some(event(EventKind::HandedOver, 5, Some("a")))
    );
    let after = d.lease.unwrap();
    // The holder still leads until its next renew; b waits for it.
    assert_eq!(after.live_holder(now), Some("a"));
    let d = decide(at(2_500), NAME, Some(&after), &campaign("b", 10_000));
    assert_unchanged(&d, Some(&after), Effect::Unavailable);
    // Asking again, or for the holder itself, changes nothing.
    let d = decide(at(2_500), NAME, Some(&after), &handover("b", false));
    assert_unchanged(&d, Some(&after), Effect::NoChange);
    let d = decide(at(2_500), NAME, Some(&row), &handover("a", false));
    assert_unchanged(&d, Some(&row), Effect::NoChange);
    // A different target replaces the pending one.
    let d = decide(at(2_500), NAME, Some(&after), &handover("c", false));
    assert_eq!(d.effect, Effect::HandoverRequested);
    assert_eq!(d.lease.unwrap().handover_to.as_deref(), Some("c"));
}

#[test]
fn graceful_handover_of_a_vacant_lease_counts_from_now() {
    // Released long ago: the reservation must start now, so b may acquire at once and
    // others one ttl later.
    let row = vacant(5, 0, 1_000, 10_000);
    let now = at(60_000);
    let d = decide(now, NAME, Some(&row), &handover("b", false));
    assert_eq!(d.effect, Effect::HandoverRequested);
    let after = d.lease.clone().unwrap();
    assert_eq!(
        after,
        Lease {
            handover_to: Some("b".to_string()),
            expires_at: now,
            ..row.clone()
        }
    );
    assert_eq!(event_of(&d), Some(event(EventKind::HandedOver, 5, None)));
    let d = decide(at(69_999), NAME, Some(&after), &campaign("c", 10_000));
    assert_unchanged(&d, Some(&after), Effect::Unavailable);
    let d = decide(now, NAME, Some(&after), &campaign("b", 10_000));
    assert_eq!(d.lease.unwrap().term, 6);
    let d = decide(at(70_000), NAME, Some(&after), &campaign("c", 10_000));
    assert_eq!(d.lease.unwrap().term, 6);

    // In a lock-delay the later expiry is kept.
    let blocked = vacant(5, 0, 90_000, 10_000);
    let d = decide(now, NAME, Some(&blocked), &handover("b", false));
    assert_eq!(d.lease.unwrap().expires_at, at(90_000));
    // An expired holder counts as vacant.
    let expired = held("a", 5, 0, 0, 10);
    let d = decide(now, NAME, Some(&expired), &handover("b", false));
    let lease = d.lease.unwrap();
    assert_eq!(lease.expires_at, now);
    assert_eq!(lease.holder.as_deref(), Some("a"));
}

#[test]
fn immediate_handover_installs_the_target_with_a_new_term() {
    let row = Lease {
        handover_to: Some("c".to_string()),
        ..held("a", 5, 0, 1_000, 10_000)
    };
    let now = at(2_000);
    let d = decide(now, NAME, Some(&row), &handover("b", true));
    assert_eq!(d.effect, Effect::Forced);
    assert!(d.write);
    assert_eq!(
        d.lease,
        Some(Lease {
            holder: Some("b".to_string()),
            term: 6,
            acquired_at: now,
            renewed_at: now,
            expires_at: now.plus_ms(10_000),
            metadata: None,
            // Not yet adopted.
            handover_to: Some("b".to_string()),
            ..row.clone()
        })
    );
    assert_eq!(event_of(&d), Some(event(EventKind::Forced, 6, Some("b"))));
    assert!(d.event.unwrap().detail.contains("unsafe"));
    let after = d.lease.unwrap();
    assert!(after.forced_grant_pending());
    assert!(!after.handover_pending(at(2_100)), "not a reservation");
    // a's renew fails and its release is stale.
    let d = decide(at(2_100), NAME, Some(&after), &renew_as("a", 5, 10_000));
    assert_unchanged(&d, Some(&after), Effect::Unavailable);
    // b adopts the term once, at its next campaign: a new tenure for b, no new term.
    let d = decide(at(2_100), NAME, Some(&after), &campaign("b", 10_000));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(d.event, None, "the grant's history is its forced event");
    let adopted = d.lease.unwrap();
    assert_eq!((adopted.term, adopted.handover_to.as_deref()), (6, None));
    assert_eq!(adopted.expires_at, at(12_100));
    // Only once: a second campaign naming no term finds it held.
    let d = decide(at(2_200), NAME, Some(&adopted), &campaign("b", 10_000));
    assert_unchanged(&d, Some(&adopted), Effect::Unavailable);
    let d = decide(at(2_200), NAME, Some(&adopted), &renew_as("b", 6, 10_000));
    assert_eq!(d.effect, Effect::Renewed);
    let d = decide(at(2_100), NAME, Some(&after), &release("a", 5, 0));
    assert_unchanged(&d, Some(&after), Effect::NotHolder);
    // Forcing the current holder also starts a new term.
    let d = decide(at(2_100), NAME, Some(&after), &handover("b", true));
    assert_eq!(d.effect, Effect::Forced);
    assert_eq!(d.lease.unwrap().term, 7);
}

// ---------------------------------------------------------------------------------------------
// pause / resume

#[test]
fn pause_of_an_unknown_name_creates_a_paused_vacant_row() {
    let now = at(0);
    let d = decide(now, NAME, None, &Op::Pause);
    assert_eq!(d.effect, Effect::Paused);
    assert!(d.write);
    assert_eq!(
        d.lease,
        Some(Lease {
            name: NAME.to_string(),
            holder: None,
            term: 0,
            acquired_at: now,
            renewed_at: now,
            expires_at: now,
            ttl_ms: 0,
            metadata: None,
            handover_to: None,
            paused: true,
        })
    );
    assert_eq!(event_of(&d), Some(event(EventKind::Paused, 0, None)));
    let paused = d.lease.unwrap();
    let d = decide(at(1), NAME, Some(&paused), &campaign("a", 10_000));
    assert_unchanged(&d, Some(&paused), Effect::Unavailable);
    let d = decide(at(1), NAME, Some(&paused), &Op::Pause);
    assert_unchanged(&d, Some(&paused), Effect::NoChange);

    // Resumed, the first tenure gets term 1.
    let d = decide(at(2), NAME, Some(&paused), &Op::Resume);
    assert_eq!(d.effect, Effect::Resumed);
    let resumed = d.lease.unwrap();
    let d = decide(at(3), NAME, Some(&resumed), &campaign("a", 10_000));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(event_of(&d), Some(event(EventKind::Acquired, 1, Some("a"))));
}

#[test]
fn pause_and_resume_of_a_held_lease() {
    let row = held("a", 5, 0, 0, 10_000);
    let d = decide(at(1_000), NAME, Some(&row), &Op::Pause);
    assert_eq!(d.effect, Effect::Paused);
    assert!(d.write);
    let paused = d.lease.clone().unwrap();
    assert_eq!(
        paused,
        Lease {
            paused: true,
            ..row.clone()
        }
    );
    assert_eq!(event_of(&d), Some(event(EventKind::Paused, 5, Some("a"))));
    // The holder keeps its lease until its next renew.
    assert_eq!(paused.live_holder(at(1_000)), Some("a"));

    let d = decide(at(1_500), NAME, Some(&paused), &Op::Resume);
    assert_eq!(d.effect, Effect::Resumed);
    assert!(d.write);
    assert_eq!(d.lease.as_ref(), Some(&row));
    assert_eq!(event_of(&d), Some(event(EventKind::Resumed, 5, Some("a"))));
    let d = decide(at(1_500), NAME, Some(&row), &Op::Resume);
    assert_unchanged(&d, Some(&row), Effect::NoChange);
}

#[test]
fn admin_ops_on_an_unknown_name() {
    for op in [
        Op::Demote { immediate: false },
        Op::Demote { immediate: true },
        handover("b", false),
        handover("b", true),
        Op::Resume,
    ] {
        let d = decide(at(0), NAME, None, &op);
        assert_unchanged(&d, None, Effect::UnknownName);
    }
}
