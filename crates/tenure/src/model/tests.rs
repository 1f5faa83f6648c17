//! Unit tests of [`decide`]: one or a few per row of the operations table
//! (`docs/design-notes.md`), with no IO — campaigns and renewals here, releases in
//! `release_tests.rs`, the admin operations in `admin_tests.rs`, and a property test over
//! random sequences of operations and clock steps in `property_tests.rs` — and the helpers
//! they share.

use super::*;

pub(super) const NAME: &str = "billing-cron";
/// An arbitrary database instant, in microseconds.
pub(super) const BASE: i64 = 1_700_000_000_000_000;

/// `BASE` plus `ms` milliseconds.
pub(super) fn at(ms: i64) -> DbTime {
    DbTime(BASE + ms * 1000)
}

/// A campaign that names no term: by a candidate that holds nothing.
pub(super) fn campaign(candidate: &str, ttl_ms: u64) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term: None,
        ttl_ms,
        metadata: None,
        purpose: Purpose::Election,
    }
}

/// The campaign of a holder that believes it holds `term`.
pub(super) fn renew_as(candidate: &str, term: u64, ttl_ms: u64) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term: Some(term),
        ttl_ms,
        metadata: None,
        purpose: Purpose::Election,
    }
}

pub(super) fn campaign_with(candidate: &str, term: Option<u64>, ttl_ms: u64, metadata: &str) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term,
        ttl_ms,
        metadata: Some(metadata.to_string()),
        purpose: Purpose::Election,
    }
}

pub(super) fn release(candidate: &str, term: u64, at_least_ms: u64) -> Op {
    Op::Release {
        candidate: candidate.to_string(),
        term,
        at_least_ms,
        reason: None,
        purpose: Purpose::Election,
    }
}

pub(super) fn handover(to: &str, immediate: bool) -> Op {
    Op::Handover {
        to: to.to_string(),
        immediate,
    }
}

/// A row held by `holder` in `term`, acquired at `acquired` ms with a ttl of `ttl_ms`, last
/// renewed at `renewed` ms (so it expires at `renewed + ttl_ms`).
pub(super) fn held(holder: &str, term: u64, acquired: i64, renewed: i64, ttl_ms: u64) -> Lease {
    Lease {
        name: NAME.to_string(),
        holder: Some(holder.to_string()),
        term,
        acquired_at: at(acquired),
        renewed_at: at(renewed),
        expires_at: at(renewed).plus_ms(ttl_ms),
        ttl_ms,
        metadata: Some("10.0.0.1:8080".to_string()),
        handover_to: None,
        paused: false,
    }
}

/// `held(..)` after a release: no holder, blocked until `expires` ms.
pub(super) fn vacant(term: u64, acquired: i64, expires: i64, ttl_ms: u64) -> Lease {
    Lease {
        holder: None,
        expires_at: at(expires),
        ..held("gone", term, acquired, acquired, ttl_ms)
    }
}

#[test]
fn time_arithmetic_saturates_instead_of_wrapping() {
    // A minimum hold of u64::MAX ms once wrapped to -1 ms on its way to microseconds and
    // freed the name at once.
    assert_eq!(at(0).plus_ms(u64::MAX), DbTime(i64::MAX));
    assert_eq!(at(0).plus_ms(1_500), at(1_500));
    let row = held("a", 1, 0, 0, 1_000);
    let d = decide(at(10), NAME, Some(&row), &release("a", 1, u64::MAX));
    assert_eq!(d.lease.unwrap().expires_at, DbTime(i64::MAX));
    assert_eq!(at(5).ms_since(at(10)), 0);
    assert_eq!(at(10).ms_since(at(5)), 5);
}

pub(super) fn event(
    kind: EventKind,
    term: u64,
    holder: Option<&str>,
) -> (EventKind, u64, Option<String>) {
    (kind, term, holder.map(str::to_string))
}

/// The event of `d` without its free-text detail.
pub(super) fn event_of(d: &Decision) -> Option<(EventKind, u64, Option<String>)> {
    d.event.as_ref().map(|e| (e.kind, e.term, e.holder.clone()))
}

/// Asserts that `d` changed nothing: same row, no write, no event, and `effect`.
pub(super) fn assert_unchanged(d: &Decision, current: Option<&Lease>, effect: Effect) {
    assert_eq!(d.effect, effect, "{d:?}");
    assert_eq!(d.lease.as_ref(), current, "{d:?}");
    assert!(!d.write, "{d:?}");
    assert_eq!(d.event, None, "{d:?}");
}

// ---------------------------------------------------------------------------------------------
// campaign

#[test]
fn campaign_on_unknown_name_creates_term_1() {
    let now = at(0);
    let d = decide(now, NAME, None, &campaign_with("a", None, 10_000, "addr-a"));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert!(d.write);
    assert_eq!(
        d.lease,
        Some(Lease {
            name: NAME.to_string(),
            holder: Some("a".to_string()),
            term: 1,
            acquired_at: now,
            renewed_at: now,
            expires_at: at(10_000),
            ttl_ms: 10_000,
            metadata: Some("addr-a".to_string()),
            handover_to: None,
            paused: false,
        })
    );
    assert_eq!(event_of(&d), Some(event(EventKind::Acquired, 1, Some("a"))));
    assert_eq!(d.lease.unwrap().live_holder(now), Some("a"));
}

#[test]
fn renew_keeps_term_and_extends_expiry_from_now() {
    let row = held("a", 5, 0, 1_000, 10_000); // expires at 11 s
    let now = at(3_000);
    let d = decide(
        now,
        NAME,
        Some(&row),
        &campaign_with("a", Some(5), 20_000, "new-addr"),
    );
    assert_eq!(d.effect, Effect::Renewed);
    assert!(d.write);
    // Renewals are not history.
    assert_eq!(d.event, None);
    let expected = Lease {
        renewed_at: now,
        expires_at: at(23_000),
        ttl_ms: 20_000,
        metadata: Some("new-addr".to_string()),
        ..row.clone()
    };
    assert_eq!(d.lease, Some(expected));
    let lease = d.lease.unwrap();
    assert_eq!(lease.term, 5);
    assert_eq!(lease.acquired_at, at(0));
    assert_eq!(lease.remaining_ms(now), 20_000);

    // A shorter ttl shortens the lease: it is always counted from now.
    let d = decide(now, NAME, Some(&row), &renew_as("a", 5, 1));
    assert_eq!(d.effect, Effect::Renewed);
    let lease = d.lease.unwrap();
    assert_eq!(lease.expires_at, at(3_001));
    assert_eq!(lease.metadata, None);
}

#[test]
fn renew_just_before_expiry_and_reacquire_at_expiry() {
    let row = held("a", 5, 0, 0, 10_000);
    // One microsecond before the expiry the holder still renews its own term.
    let now = DbTime(at(10_000).0 - 1);
    let d = decide(now, NAME, Some(&row), &renew_as("a", 5, 10_000));
    assert_eq!(d.effect, Effect::Renewed);
    assert_eq!(d.lease.as_ref().unwrap().term, 5);
    // At the expiry (expires_at <= now) the lease is over: the same candidate starts a new
    // tenure with a new term, as a takeover of its own expired lease.
    let now = at(10_000);
    let d = decide(now, NAME, Some(&row), &renew_as("a", 5, 10_000));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: Some("a".to_string())
        }
    );
    let lease = d.lease.clone().unwrap();
    assert_eq!(lease.term, 6);
    assert_eq!(lease.acquired_at, now);
    assert_eq!(
        event_of(&d),
        Some(event(EventKind::TakenOverExpired, 6, Some("a")))
    );
}

#[test]
fn only_the_named_term_renews() {
    let row = held("a", 5, 0, 0, 10_000);
    // The holder id alone never renews: no term, a stale term or a future one find it held,
    // so a second process or task with the same id, or a restart, never shares the tenure.
    for op in [
        campaign("a", 10_000),
        renew_as("a", 4, 10_000),
        renew_as("a", 6, 10_000),
    ] {
        let d = decide(at(100), NAME, Some(&row), &op);
        assert_unchanged(&d, Some(&row), Effect::Unavailable);
    }
    // Nor does another candidate naming the right term.
    let d = decide(at(100), NAME, Some(&row), &renew_as("b", 5, 10_000));
    assert_unchanged(&d, Some(&row), Effect::Unavailable);
    let d = decide(at(100), NAME, Some(&row), &renew_as("a", 5, 10_000));
    assert_eq!(d.effect, Effect::Renewed);
}

#[test]
fn succeed_begins_the_next_term_with_nobody_in_between() {
    let succeed = |who: &str, term| Op::Succeed {
        candidate: who.to_string(),
        term,
        ttl_ms: 20_000,
        purpose: Purpose::Election,
    };
    let row = held("a", 5, 0, 0, 10_000);
    let d = decide(at(100), NAME, Some(&row), &succeed("a", 5));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    let lease = d.lease.clone().unwrap();
    assert_eq!(
        (lease.holder.as_deref(), lease.term, lease.acquired_at),
        (Some("a"), 6, at(100))
    );
    assert_eq!(lease.expires_at, at(20_100));
    assert_eq!(event_of(&d), Some(event(EventKind::Acquired, 6, Some("a"))));
    // Not the holder of that term (another id, a stale term): exactly a campaign.
    for (who, term) in [("b", 5), ("a", 4)] {
        let d = decide(at(100), NAME, Some(&row), &succeed(who, term));
        assert_unchanged(&d, Some(&row), Effect::Unavailable);
    }
    let d = decide(at(10_000), NAME, Some(&row), &succeed("b", 5));
    assert_eq!(
        d.lease.unwrap().term,
        6,
        "an expired lease is acquired as usual"
    );
    // Paused or handed over: step down instead.
    let paused = Lease {
        paused: true,
        ..row.clone()
    };
    let d = decide(at(100), NAME, Some(&paused), &succeed("a", 5));
    assert_unchanged(
        &d,
        Some(&paused),
        Effect::SteppedDown(StepDownReason::Paused),
    );
}

/// A step-down changes nothing by itself: the holder stops renewing, stops its work, and only
/// then releases, so that nobody can start while its work may still run.
#[test]
fn holder_steps_down_on_pause() {
    let row = Lease {
        paused: true,
        ..held("a", 5, 0, 0, 10_000)
    };
    let now = at(2_500);
    let d = decide(now, NAME, Some(&row), &renew_as("a", 5, 10_000));
    assert_unchanged(&d, Some(&row), Effect::SteppedDown(StepDownReason::Paused));
    // Nobody else acquires meanwhile.
    let d = decide(now, NAME, Some(&row), &campaign("b", 10_000));
    assert_unchanged(&d, Some(&row), Effect::Unavailable);
    // The release that follows vacates the row; still nobody acquires while paused.
    let d = decide(now, NAME, Some(&row), &release("a", 5, 0));
    assert_eq!(d.effect, Effect::Released);
    assert_eq!(event_of(&d), Some(event(EventKind::Released, 5, Some("a"))));
    let after = d.lease.unwrap();
    assert_eq!(
        after,
        Lease {
            holder: None,
            expires_at: now,
            ..row.clone()
        }
    );
    for c in ["a", "b"] {
        let d = decide(at(3_000), NAME, Some(&after), &campaign(c, 10_000));
        assert_unchanged(&d, Some(&after), Effect::Unavailable);
    }
}

#[test]
fn holder_steps_down_on_handover_to_someone_else() {
    let row = Lease {
        handover_to: Some("b".to_string()),
        ..held("a", 5, 0, 0, 10_000)
    };
    let now = at(2_500);
    let d = decide(now, NAME, Some(&row), &renew_as("a", 5, 10_000));
    assert_unchanged(
        &d,
        Some(&row),
        Effect::SteppedDown(StepDownReason::HandoverTo("b".to_string())),
    );
    // Not even the target starts before the holder has released.
    let d = decide(now, NAME, Some(&row), &campaign("b", 10_000));
    assert_unchanged(&d, Some(&row), Effect::Unavailable);
    let after = decide(now, NAME, Some(&row), &release("a", 5, 0))
        .lease
        .unwrap();
    assert_eq!(after.handover_to.as_deref(), Some("b"));

    // Then the target may acquire at once, with the next term; others may not.
    let d = decide(now, NAME, Some(&after), &campaign("c", 10_000));
    assert_unchanged(&d, Some(&after), Effect::Unavailable);
    let d = decide(now, NAME, Some(&after), &campaign("b", 10_000));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    let lease = d.lease.clone().unwrap();
    assert_eq!((lease.holder.as_deref(), lease.term), (Some("b"), 6));
    assert_eq!(lease.handover_to, None);
    assert_eq!(event_of(&d), Some(event(EventKind::Acquired, 6, Some("b"))));
    assert_eq!(d.event.unwrap().detail, "by handover");
}

#[test]
fn acquire_after_expiry_raises_term_by_one() {
    let row = held("a", 41, 0, 5_000, 10_000); // expires at 15 s
    for now in [at(15_000), at(15_001), at(3_600_000)] {
        let d = decide(
            now,
            NAME,
            Some(&row),
            &campaign_with("b", None, 20, "addr-b"),
        );
        assert_eq!(
            d.effect,
            Effect::Acquired {
                took_over_from: Some("a".to_string())
            }
        );
        assert!(d.write);
        assert_eq!(
            d.lease,
            Some(Lease {
                name: NAME.to_string(),
                holder: Some("b".to_string()),
                term: 42,
                acquired_at: now,
                renewed_at: now,
                expires_at: now.plus_ms(20),
                ttl_ms: 20,
                metadata: Some("addr-b".to_string()),
                handover_to: None,
                paused: false,
            })
        );
        assert_eq!(
            event_of(&d),
            Some(event(EventKind::TakenOverExpired, 42, Some("b")))
        );
        assert!(d.event.unwrap().detail.contains("'a' (term 41)"));
    }
}

#[test]
fn acquire_of_released_lease_is_plain_acquired() {
    let row = vacant(7, 0, 1_000, 10_000);
    let d = decide(at(1_000), NAME, Some(&row), &campaign("c", 10_000));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(event_of(&d), Some(event(EventKind::Acquired, 8, Some("c"))));
    assert_eq!(d.event.unwrap().detail, "");
}

#[test]
fn no_acquire_while_live() {
    let row = held("a", 3, 0, 0, 10_000);
    for now in [at(0), at(5_000), DbTime(at(10_000).0 - 1)] {
        let d = decide(now, NAME, Some(&row), &campaign("b", 10_000));
        assert_unchanged(&d, Some(&row), Effect::Unavailable);
    }
}

#[test]
fn no_acquire_during_lock_delay() {
    // Released with at_least, or demoted: vacant but blocked until expires_at.
    let row = vacant(3, 0, 8_000, 10_000);
    let d = decide(at(7_999), NAME, Some(&row), &campaign("b", 10_000));
    assert_unchanged(&d, Some(&row), Effect::Unavailable);
    let d = decide(at(8_000), NAME, Some(&row), &campaign("b", 10_000));
    assert_eq!(d.lease.unwrap().term, 4);
}

#[test]
fn no_acquire_while_paused() {
    let expired = Lease {
        paused: true,
        ..held("a", 3, 0, 0, 10)
    };
    let released = Lease {
        paused: true,
        ..vacant(3, 0, 10, 10)
    };
    for row in [expired, released] {
        for c in ["a", "b"] {
            let d = decide(at(60_000), NAME, Some(&row), &campaign(c, 10_000));
            assert_unchanged(&d, Some(&row), Effect::Unavailable);
        }
    }
}

#[test]
fn handover_reserves_the_lease_for_one_ttl() {
    // Stepped down for b at 2 s; ttl 10 s: reserved for b until 12 s.
    let row = Lease {
        handover_to: Some("b".to_string()),
        ..vacant(5, 0, 2_000, 10_000)
    };
    for now in [at(2_000), at(5_000), DbTime(at(12_000).0 - 1)] {
        let d = decide(now, NAME, Some(&row), &campaign("c", 10_000));
        assert_unchanged(&d, Some(&row), Effect::Unavailable);
        // The target may acquire at once.
        let d = decide(now, NAME, Some(&row), &campaign("b", 10_000));
        assert_eq!(
            d.effect,
            Effect::Acquired {
                took_over_from: None
            }
        );
        assert_eq!(d.lease.unwrap().term, 6);
    }
    // Lapsed: anyone may acquire, and the reservation is cleared.
    let d = decide(at(12_000), NAME, Some(&row), &campaign("c", 30));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    let lease = d.lease.clone().unwrap();
    assert_eq!((lease.holder.as_deref(), lease.term), (Some("c"), 6));
    assert_eq!(lease.handover_to, None);
    assert_eq!(event_of(&d), Some(event(EventKind::Acquired, 6, Some("c"))));
    assert_eq!(d.event.unwrap().detail, "");
}

#[test]
fn handover_to_a_crashed_holders_successor_waits_one_ttl_after_expiry() {
    // a never renewed again (crashed) after a handover to b was requested.
    let row = Lease {
        handover_to: Some("b".to_string()),
        ..held("a", 5, 0, 0, 1_000)
    };
    let d = decide(at(1_500), NAME, Some(&row), &campaign("c", 1_000));
    assert_unchanged(&d, Some(&row), Effect::Unavailable);
    let d = decide(at(1_000), NAME, Some(&row), &campaign("b", 1_000));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: Some("a".to_string())
        }
    );
    let d = decide(at(2_000), NAME, Some(&row), &campaign("c", 1_000));
    assert_eq!(
        d.effect,
        Effect::Acquired {
            took_over_from: Some("a".to_string())
        }
    );
    assert_eq!(
        event_of(&d),
        Some(event(EventKind::TakenOverExpired, 6, Some("c")))
    );
}

// ---------------------------------------------------------------------------------------------
// release

#[test]
fn renew_keeps_a_held_lease_alive_with_its_own_ttl() {
    let row = held("a", 5, 0, 0, 10_000);
    let renew = |candidate: &str, term| Op::Renew {
        candidate: candidate.to_string(),
        term,
    };
    let d = decide(at(4_000), NAME, Some(&row), &renew("a", 5));
    assert_eq!(d.effect, Effect::Renewed);
    assert_eq!(d.event, None);
    let lease = d.lease.unwrap();
    assert_eq!(
        (lease.renewed_at, lease.expires_at, lease.term),
        (at(4_000), at(14_000), 5)
    );
    // Never acquires: not for a stale term, another candidate, or an expired lease.
    for (who, term, now) in [("a", 4, 4_000), ("b", 5, 4_000), ("a", 5, 10_000)] {
        let d = decide(at(now), NAME, Some(&row), &renew(who, term));
        assert_unchanged(&d, Some(&row), Effect::NotHolder);
    }
    assert_unchanged(
        &decide(at(0), NAME, None, &renew("a", 1)),
        None,
        Effect::NotHolder,
    );
    // Steps down like a campaign would.
    let paused = Lease {
        paused: true,
        ..row.clone()
    };
    let d = decide(at(1_000), NAME, Some(&paused), &renew("a", 5));
    assert_unchanged(
        &d,
        Some(&paused),
        Effect::SteppedDown(StepDownReason::Paused),
    );
    let handed = Lease {
        handover_to: Some("b".to_string()),
        ..row.clone()
    };
    let d = decide(at(1_000), NAME, Some(&handed), &renew("a", 5));
    assert_unchanged(
        &d,
        Some(&handed),
        Effect::SteppedDown(StepDownReason::HandoverTo("b".to_string())),
    );
}
