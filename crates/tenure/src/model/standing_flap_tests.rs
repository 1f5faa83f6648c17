//! A flapping better candidate does not pull the lead, and an operator's handover stands
//! (issue 35, items 2 and 8): a priority counts only once its candidate has been seen
//! campaigning across the settle time in one incarnation and while it does not back off; a
//! candidate whose priority does not count yet defers to one whose does; tenures that keep
//! ending by expiry back off, doubling; the tenure an operator chose is not handed over.

use super::tests::at;
use super::*;

const NAME: &str = "billing-cron";

fn campaign(candidate: &str, term: Option<u64>) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term,
        ttl_ms: 2_000,
        metadata: None,
        purpose: Purpose::Election,
    }
}

/// A rival of `priority` registered at `since`, last seen at `seen` (cadence 900 ms, settle
/// 500 ms).
fn rival(candidate: &str, priority: i32, since: i64, seen: i64) -> Rival {
    Rival {
        candidate: candidate.to_string(),
        priority,
        since: at(since),
        seen_at: at(seen),
        expires_at: at(seen).plus_ms(2_000),
        alive_at: at(seen),
        renew_ms: 900,
        settle_ms: 500,
        ..Rival::default()
    }
}

/// A campaigner of `priority` whose run began at `since` (settle 500 ms).
fn standing(priority: i32, since: i64, rivals: &[Rival]) -> Standing<'_> {
    Standing {
        priority,
        settle_ms: 500,
        since: at(since),
        rivals,
        ..Standing::default()
    }
}

fn vacant() -> Lease {
    Lease {
        name: NAME.to_string(),
        holder: None,
        term: 7,
        acquired_at: at(0),
        renewed_at: at(0),
        expires_at: at(0),
        ttl_ms: 2_000,
        metadata: None,
        handover_to: None,
        paused: false,
    }
}

fn held(holder: &str) -> Lease {
    Lease {
        holder: Some(holder.to_string()),
        renewed_at: at(9_800),
        expires_at: at(11_800),
        ..vacant()
    }
}

fn takes(standing: &Standing<'_>, me: &str, now: i64) -> bool {
    let d = decide_among(
        at(now),
        NAME,
        Some(&vacant()),
        &campaign(me, None),
        Some(standing),
    );
    match d.effect {
        Effect::Acquired { .. } => true,
        Effect::Unavailable => false,
        other => panic!("{other:?}"),
    }
}

fn renewal(standing: &Standing<'_>, me: &str, now: i64) -> Effect {
    decide_among(
        at(now),
        NAME,
        Some(&held(me)),
        &campaign(me, Some(7)),
        Some(standing),
    )
    .effect
}

#[test]
fn a_restart_begins_a_new_run() {
    let now = at(10_000);
    let live = |incarnation| Some((at(1_000), at(11_000), incarnation));
    assert_eq!(
        registration_since(now, "run-2", live(Some("run-2"))),
        at(1_000)
    );
    // Another incarnation of the same id (a restart), an older build's row, an expired row,
    // no row: a new run.
    assert_eq!(registration_since(now, "run-2", live(Some("run-1"))), now);
    assert_eq!(registration_since(now, "run-2", live(None)), now);
    let expired = Some((at(1_000), at(10_000), Some("run-2")));
    assert_eq!(registration_since(now, "run-2", expired), now);
    assert_eq!(registration_since(now, "run-2", None), now);
}

#[test]
fn a_priority_counts_once_seen_campaigning_across_the_settle_time() {
    // Registered at 9_800 and seen then only (its first campaign): it may be gone already.
    let once = [rival("best", 5, 9_800, 9_800)];
    assert_eq!(
        renewal(&standing(1, 0, &once), "low", 10_000),
        Effect::Renewed
    );
    assert!(
        takes(&standing(1, 0, &once), "low", 10_000),
        "held off for a candidate whose priority does not count"
    );
    // Seen again 500 ms after it registered: it counts.
    let twice = [rival("best", 5, 9_300, 9_800)];
    assert_eq!(
        renewal(&standing(1, 0, &twice), "low", 10_000),
        Effect::SteppedDown(StepDownReason::HandoverTo("best".into()))
    );
    assert!(!takes(&standing(1, 0, &twice), "low", 10_000));
}

#[test]
fn a_candidate_whose_priority_does_not_count_yet_defers_to_one_whose_does() {
    // `new` (priority 5) began its run 100 ms ago; `low` (priority 1) has settled.
    let settled_low = [rival("low", 1, 0, 9_900)];
    assert!(
        !takes(&standing(5, 9_900, &settled_low), "new", 10_000),
        "a new better candidate took a free lease from a settled lower one"
    );
    // Once its own run has settled, it takes it.
    assert!(takes(&standing(5, 9_500, &settled_low), "new", 10_000));
    // Nobody defers to a lower candidate that has not settled, nor to an equal one.
    let unsettled_low = [rival("low", 1, 9_900, 9_900)];
    assert!(takes(&standing(5, 9_900, &unsettled_low), "new", 10_000));
    let settled_equal = [rival("peer", 5, 0, 9_900)];
    assert!(takes(&standing(5, 9_900, &settled_equal), "new", 10_000));
    // At a cold start (nobody settled) the better one is still waited for.
    let unsettled_best = [rival("best", 5, 9_900, 9_900)];
    assert!(!takes(&standing(1, 9_900, &unsettled_best), "low", 10_000));
    // A settled candidate does not wait for a better one that has not settled.
    assert!(takes(&standing(1, 0, &unsettled_best), "low", 10_000));
}

#[test]
fn a_candidate_that_backs_off_neither_leads_nor_is_waited_for() {
    let backing = [Rival {
        backoff_until: Some(at(12_000)),
        ..rival("best", 5, 0, 9_900)
    }];
    assert_eq!(
        renewal(&standing(1, 0, &backing), "low", 10_000),
        Effect::Renewed
    );
    assert!(takes(&standing(1, 0, &backing), "low", 10_000));
    // Its back-off over, it counts again.
    let back = [Rival {
        backoff_until: Some(at(9_950)),
        ..rival("best", 5, 0, 9_900)
    }];
    assert_eq!(
        renewal(&standing(1, 0, &back), "low", 10_000),
        Effect::SteppedDown(StepDownReason::HandoverTo("best".into()))
    );
    // The candidate that backs off defers to a settled lower one for a free lease, and as a
    // holder hands over to it (never to an equal one).
    let low = [rival("low", 1, 0, 9_900), rival("peer", 5, 0, 9_900)];
    let me = Standing {
        backoff_until: Some(at(12_000)),
        ..standing(5, 0, &low)
    };
    assert!(!takes(&me, "best", 10_000));
    let d = decide_among(
        at(10_000),
        NAME,
        Some(&held("best")),
        &campaign("best", Some(7)),
        Some(&me),
    );
    assert_eq!(
        d.effect,
        Effect::SteppedDown(StepDownReason::HandoverTo("low".into()))
    );
    let detail = d.event.unwrap().detail;
    assert!(detail.contains("backing off"), "{detail}");
}

#[test]
fn tenures_ending_by_expiry_back_off_doubling_up_to_a_bound_and_are_forgiven() {
    let ttl = 2_000;
    let first = Backoff::default().after_expiry(ttl, at(10_000));
    assert_eq!(
        first,
        Backoff {
            expiries: 1,
            until: Some(at(12_000))
        }
    );
    let second = first.after_expiry(ttl, at(15_000));
    assert_eq!(
        second,
        Backoff {
            expiries: 2,
            until: Some(at(19_000))
        }
    );
    let third = second.after_expiry(ttl, at(20_000));
    assert_eq!(
        third,
        Backoff {
            expiries: 3,
            until: Some(at(28_000))
        }
    );
    // At most 32 ttls, however many in a row.
    let mut many = third;
    for _ in 0..40 {
        many = many.after_expiry(ttl, at(30_000));
    }
    assert_eq!(many.until, Some(at(30_000 + 64_000)));
    assert_eq!(many.expiries, 43);
    // After a quiet spell of 32 ttls past its last back-off, a new expiry counts as the first.
    let quiet = third.after_expiry(ttl, at(28_000 + 64_000));
    assert_eq!(
        quiet,
        Backoff {
            expiries: 1,
            until: Some(at(94_000))
        }
    );
    let not_quite = third.after_expiry(ttl, at(28_000 + 63_999));
    assert_eq!(not_quite.expiries, 4);
}

#[test]
fn the_tenure_an_operator_chose_is_not_handed_over_for_priority() {
    let better = [rival("best", 5, 0, 9_900)];
    // Handed over after term 6: tenure 7 is the chosen one.
    let chosen = Standing {
        chosen_after: Some(6),
        ..standing(1, 0, &better)
    };
    assert_eq!(renewal(&chosen, "low", 10_000), Effect::Renewed);
    // Its next tenure follows priorities again.
    let later = Standing {
        chosen_after: Some(5),
        ..standing(1, 0, &better)
    };
    assert_eq!(
        renewal(&later, "low", 10_000),
        Effect::SteppedDown(StepDownReason::HandoverTo("best".into()))
    );
    // In a new epoch, the chosen tenure is the epoch's first.
    let epoch = Epoch::from_floor(1_000);
    let row = Lease {
        term: 1_000,
        ..held("low")
    };
    let chosen = Standing {
        chosen_after: Some(999),
        ..standing(1, 0, &better)
    };
    let clock = Clock {
        now: at(10_000),
        epoch,
    };
    let d = decide_among(
        clock,
        NAME,
        Some(&row),
        &campaign("low", Some(1_000)),
        Some(&chosen),
    );
    assert_eq!(d.effect, Effect::Renewed);
}

#[test]
fn a_target_the_registry_does_not_know_keeps_its_reservation_one_ttl() {
    let reserved = Lease {
        handover_to: Some("not-yet-started".into()),
        expires_at: at(10_000),
        ..vacant()
    };
    let nobody: [Rival; 0] = [];
    let low = standing(1, 0, &nobody);
    let at_ = |now| {
        decide_among(
            at(now),
            NAME,
            Some(&reserved),
            &campaign("low", None),
            Some(&low),
        )
        .effect
    };
    assert_eq!(at_(11_999), Effect::Unavailable);
    assert!(matches!(at_(12_000), Effect::Acquired { .. }));
}

/// Two campaigning candidates of different priorities and settle times, each at any stage of
/// its run (new, settled, backing off) and seen a moment ago: never does each wait for the
/// other on a free lease (each judges a pair with the lower one's settle time).
#[test]
fn two_candidates_never_wait_for_each_other() {
    #[derive(Clone, Copy, Debug)]
    struct Side {
        priority: i32,
        settle_ms: u64,
        age_ms: i64,
        lag_ms: i64,
        backing_off: bool,
    }
    let now = 10_000;
    let sides = || {
        let mut all = Vec::new();
        for priority in [1, 5] {
            for settle_ms in [0, 500, 2_000] {
                for age_ms in [0, 300, 1_000, 5_000] {
                    for lag_ms in [0, 200] {
                        for backing_off in [false, true] {
                            all.push(Side {
                                priority,
                                settle_ms,
                                age_ms,
                                lag_ms,
                                backing_off,
                            });
                        }
                    }
                }
            }
        }
        all
    };
    let as_rival = |id: &str, s: Side| Rival {
        settle_ms: s.settle_ms,
        backoff_until: s.backing_off.then(|| at(now + 5_000)),
        ..rival(id, s.priority, now - s.age_ms, now - s.lag_ms.min(s.age_ms))
    };
    let waits = |me: Side, id: &str, other: &Rival| {
        let rivals = [other.clone()];
        let standing = Standing {
            priority: me.priority,
            settle_ms: me.settle_ms,
            since: at(now - me.age_ms),
            backoff_until: me.backing_off.then(|| at(now + 5_000)),
            rivals: &rivals,
            ..Standing::default()
        };
        !takes(&standing, id, now)
    };
    let mut cases = 0;
    for x in sides() {
        for y in sides().into_iter().filter(|y| y.priority != x.priority) {
            let x_waits = waits(x, "x", &as_rival("y", y));
            let y_waits = waits(y, "y", &as_rival("x", x));
            assert!(!(x_waits && y_waits), "both wait: {x:?} and {y:?}");
            cases += 1;
        }
    }
    assert_eq!(cases, 96 * 48);
}
