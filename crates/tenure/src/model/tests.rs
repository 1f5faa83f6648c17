//! Unit tests of [`decide`]: one or a few per row of the operations table
//! (`docs/design-notes.md`), with no IO, and a property test over random sequences of
//! operations and clock steps.

use super::*;
use proptest::prelude::*;
use std::collections::HashMap;

const NAME: &str = "billing-cron";
/// An arbitrary database instant, in microseconds.
const BASE: i64 = 1_700_000_000_000_000;

/// `BASE` plus `ms` milliseconds.
pub(super) fn at(ms: i64) -> DbTime {
    DbTime(BASE + ms * 1000)
}

/// A campaign that names no term: by a candidate that holds nothing.
fn campaign(candidate: &str, ttl_ms: u64) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term: None,
        ttl_ms,
        metadata: None,
        purpose: Purpose::Election,
    }
}

/// The campaign of a holder that believes it holds `term`.
fn renew_as(candidate: &str, term: u64, ttl_ms: u64) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term: Some(term),
        ttl_ms,
        metadata: None,
        purpose: Purpose::Election,
    }
}

fn campaign_with(candidate: &str, term: Option<u64>, ttl_ms: u64, metadata: &str) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term,
        ttl_ms,
        metadata: Some(metadata.to_string()),
        purpose: Purpose::Election,
    }
}

fn release(candidate: &str, term: u64, at_least_ms: u64) -> Op {
    Op::Release {
        candidate: candidate.to_string(),
        term,
        at_least_ms,
        reason: None,
        purpose: Purpose::Election,
    }
}

fn handover(to: &str, immediate: bool) -> Op {
    Op::Handover {
        to: to.to_string(),
        immediate,
    }
}

/// A row held by `holder` in `term`, acquired at `acquired` ms with a ttl of `ttl_ms`, last
/// renewed at `renewed` ms (so it expires at `renewed + ttl_ms`).
fn held(holder: &str, term: u64, acquired: i64, renewed: i64, ttl_ms: u64) -> Lease {
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
fn vacant(term: u64, acquired: i64, expires: i64, ttl_ms: u64) -> Lease {
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

fn event(kind: EventKind, term: u64, holder: Option<&str>) -> (EventKind, u64, Option<String>) {
    (kind, term, holder.map(str::to_string))
}

/// The event of `d` without its free-text detail.
fn event_of(d: &Decision) -> Option<(EventKind, u64, Option<String>)> {
    d.event.as_ref().map(|e| (e.kind, e.term, e.holder.clone()))
}

/// Asserts that `d` changed nothing: same row, no write, no event, and `effect`.
fn assert_unchanged(d: &Decision, current: Option<&Lease>, effect: Effect) {
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
fn release_by_holder_with_matching_term() {
    let row = held("a", 5, 1_000, 4_000, 10_000);
    let now = at(5_000);
    let d = decide(now, NAME, Some(&row), &release("a", 5, 0));
    assert_eq!(d.effect, Effect::Released);
    assert!(d.write);
    assert_eq!(
        d.lease,
        Some(Lease {
            holder: None,
            expires_at: now,
            ..row.clone()
        })
    );
    assert_eq!(event_of(&d), Some(event(EventKind::Released, 5, Some("a"))));
    // Somebody else may start at once.
    let after = d.lease.unwrap();
    let d = decide(now, NAME, Some(&after), &campaign("b", 10_000));
    assert_eq!(d.lease.unwrap().term, 6);
}

#[test]
fn release_at_least_keeps_the_lease_blocked() {
    let row = held("a", 5, 1_000, 4_000, 10_000);
    let now = at(5_000);
    // acquired_at + at_least in the future: blocked until then.
    let d = decide(now, NAME, Some(&row), &release("a", 5, 30_000));
    assert_eq!(d.effect, Effect::Released);
    let after = d.lease.unwrap();
    assert_eq!(after.expires_at, at(31_000));
    assert_eq!(after.holder, None);
    let d = decide(at(30_999), NAME, Some(&after), &campaign("b", 10_000));
    assert_unchanged(&d, Some(&after), Effect::Unavailable);
    let d = decide(at(31_000), NAME, Some(&after), &campaign("b", 10_000));
    assert_eq!(d.lease.unwrap().term, 6);
    // acquired_at + at_least already past: now.
    let d = decide(now, NAME, Some(&row), &release("a", 5, 3_000));
    assert_eq!(d.lease.unwrap().expires_at, now);
    // Exactly now.
    let d = decide(now, NAME, Some(&row), &release("a", 5, 4_000));
    assert_eq!(d.lease.unwrap().expires_at, now);
}

#[test]
fn release_of_an_expired_but_untaken_lease() {
    let row = held("a", 5, 0, 0, 10);
    let now = at(1_000);
    let d = decide(now, NAME, Some(&row), &release("a", 5, 0));
    assert_eq!(d.effect, Effect::Released);
    assert_eq!(d.lease.unwrap().expires_at, now);
}

#[test]
fn stale_release_changes_nothing() {
    let row = held("a", 5, 0, 0, 10_000);
    let now = at(1_000);
    for op in [
        release("a", 4, 0),
        release("a", 6, 0),
        release("b", 5, 0),
        release("b", 4, 30_000),
    ] {
        let d = decide(now, NAME, Some(&row), &op);
        assert_unchanged(&d, Some(&row), Effect::NotHolder);
    }
    // A vacant row has no holder to release.
    let row = vacant(5, 0, 0, 10_000);
    let d = decide(now, NAME, Some(&row), &release("gone", 5, 0));
    assert_unchanged(&d, Some(&row), Effect::NotHolder);
    // Nor does an unknown name, and nothing is created.
    let d = decide(now, NAME, None, &release("a", 0, 0));
    assert_unchanged(&d, None, Effect::NotHolder);
}

#[test]
fn stale_release_never_touches_a_successor() {
    // a held term 5 and expired; b took over with term 6; a's late release must not count.
    let row = held("a", 5, 0, 0, 10);
    let d = decide(at(100), NAME, Some(&row), &campaign("b", 10_000));
    let successor = d.lease.unwrap();
    assert_eq!(successor.term, 6);
    let d = decide(at(200), NAME, Some(&successor), &release("a", 5, 0));
    assert_unchanged(&d, Some(&successor), Effect::NotHolder);
    // Even when a itself re-acquired with term 6, a release of term 5 is stale.
    let d = decide(at(100), NAME, Some(&row), &campaign("a", 10_000));
    let again = d.lease.unwrap();
    assert_eq!(again.term, 6);
    let d = decide(at(200), NAME, Some(&again), &release("a", 5, 0));
    assert_unchanged(&d, Some(&again), Effect::NotHolder);
}

// ---------------------------------------------------------------------------------------------
// demote

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

// ---------------------------------------------------------------------------------------------
// Properties over random sequences.

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
