//! A better candidate that stops campaigning (crashed, SIGSTOPped, cut off) costs the leader
//! its cadence at most (its renew interval plus its database timeout after it was last seen),
//! never a ttl: it is not handed over to once it has not campaigned within that gap, and a
//! reservation made for it lapses at the end of that gap — also when its ttl is longer than
//! the leader's (issue 35, item 1). Exact database instants, no IO.

use super::tests::at;
use super::*;

const NAME: &str = "billing-cron";

fn campaign(candidate: &str, term: Option<u64>, ttl_ms: u64) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term,
        ttl_ms,
        metadata: None,
        purpose: Purpose::Election,
    }
}

fn release(candidate: &str, term: u64) -> Op {
    Op::Release {
        candidate: candidate.to_string(),
        term,
        at_least_ms: 0,
        reason: None,
        purpose: Purpose::Election,
    }
}

/// A better candidate registered at `since` and last seen at `seen`, with a ttl of `ttl_ms`
/// and a cadence (renew interval + database timeout) of `renew_ms`.
fn better(since: i64, seen: i64, ttl_ms: u64, renew_ms: u64) -> Rival {
    Rival {
        candidate: "best".to_string(),
        priority: 5,
        observer: false,
        since: at(since),
        seen_at: at(seen),
        expires_at: at(seen).plus_ms(ttl_ms),
        alive_at: at(seen),
        renew_ms,
        ..Rival::default()
    }
}

fn low_standing(rivals: &[Rival]) -> Standing<'_> {
    Standing {
        priority: 1,
        settle_ms: 500,
        since: at(-60_000),
        rivals,
        ..Standing::default()
    }
}

fn held_by_low(term: u64, renewed: i64, ttl_ms: u64) -> Lease {
    Lease {
        name: NAME.to_string(),
        holder: Some("low".to_string()),
        term,
        acquired_at: at(-60_000),
        renewed_at: at(renewed),
        expires_at: at(renewed).plus_ms(ttl_ms),
        ttl_ms,
        metadata: None,
        handover_to: None,
        paused: false,
    }
}

#[test]
fn a_better_candidate_not_seen_within_its_cadence_is_not_handed_over_to() {
    // Registered twice across the settle time, then silent since 1 s: its cadence is 900 ms,
    // its registration still live for 29 s more (a 30 s ttl).
    let rivals = [better(0, 1_000, 30_000, 900)];
    let row = held_by_low(7, 1_500, 2_000);
    // Seen 800 ms ago: it campaigns, the holder hands over.
    let d = decide_among(
        at(1_800),
        NAME,
        Some(&row),
        &campaign("low", Some(7), 2_000),
        Some(&low_standing(&rivals)),
    );
    assert_eq!(
        d.effect,
        Effect::SteppedDown(StepDownReason::HandoverTo("best".into()))
    );
    // Seen 900 ms ago: it has stopped campaigning; the holder renews.
    let d = decide_among(
        at(1_900),
        NAME,
        Some(&row),
        &campaign("low", Some(7), 2_000),
        Some(&low_standing(&rivals)),
    );
    assert_eq!(d.effect, Effect::Renewed, "{d:?}");
}

#[test]
fn a_reservation_for_a_candidate_that_stopped_campaigning_lapses_after_its_cadence() {
    let rivals = [better(0, 1_000, 30_000, 900)];
    let standing = low_standing(&rivals);
    let row = held_by_low(7, 1_500, 2_000);
    let handed = decide_among(
        at(1_800),
        NAME,
        Some(&row),
        &campaign("low", Some(7), 2_000),
        Some(&standing),
    );
    let released = decide(at(1_850), NAME, handed.lease.as_ref(), &release("low", 7));
    let free = released.lease.expect("the row");
    assert_eq!(free.handover_to.as_deref(), Some("best"));
    // Within the target's cadence after it was last seen, the reservation holds ...
    let d = decide_among(
        at(1_899),
        NAME,
        Some(&free),
        &campaign("low", None, 2_000),
        Some(&standing),
    );
    assert_eq!(d.effect, Effect::Unavailable);
    // ... and at its end it lapses: the old holder leads again (not one ttl after the lease
    // became free, 3_850).
    let d = decide_among(
        at(1_900),
        NAME,
        Some(&free),
        &campaign("low", None, 2_000),
        Some(&standing),
    );
    assert!(matches!(d.effect, Effect::Acquired { .. }), "{d:?}");
    let lease = d.lease.unwrap();
    assert_eq!((lease.term, lease.handover_to), (8, None));
}

/// B (ttl 30 s, cadence 13.5 s, as `tenure run --ttl 30s`) registers twice and dies; A (ttl
/// 2 s, renewing every 500 ms) hands over to it once, leads again when B's cadence has run
/// out, and never hands over to it again while B's registration stays live.
#[test]
fn a_dead_candidate_with_a_longer_ttl_is_handed_over_to_once() {
    let rivals = [better(0, 1_000, 30_000, 13_500)];
    let standing = low_standing(&rivals);
    let mut row = Some(held_by_low(7, 1_000, 2_000));
    let mut term = Some(7);
    let (mut handovers, mut led_again_at) = (0, None);
    for t in (1_500..40_000).step_by(500) {
        let d = decide_among(
            at(t),
            NAME,
            row.as_ref(),
            &campaign("low", term, 2_000),
            Some(&standing),
        );
        match &d.effect {
            Effect::SteppedDown(StepDownReason::HandoverTo(to)) => {
                assert_eq!(to, "best");
                handovers += 1;
                let released = decide(at(t + 10), NAME, d.lease.as_ref(), &release("low", 7));
                row = released.lease;
                term = None;
                continue;
            }
            Effect::Acquired { .. } => {
                led_again_at.get_or_insert(t);
                term = d.lease.as_ref().map(|l| l.term);
            }
            Effect::Renewed => assert!(led_again_at.is_some() || handovers == 0),
            Effect::Unavailable => assert!(term.is_none(), "{t}: {d:?}"),
            other => panic!("{t}: {other:?}"),
        }
        row = d.lease;
    }
    assert_eq!(
        handovers, 1,
        "handed over to the dead candidate more than once"
    );
    let back = led_again_at.expect("the leader came back");
    assert!(
        back <= 1_000 + 13_500 + 500,
        "led again at {back} ms: later than the dead candidate's cadence after it was last \
         seen plus one renew interval"
    );
}

/// A target that holds off after a demote keeps its registration alive without campaigning:
/// the reservation stands (it will campaign when its hold-off ends), although nobody waits for
/// it on a free lease.
#[test]
fn a_reservation_for_a_live_candidate_that_holds_off_stands() {
    let holding_off = [Rival {
        alive_at: at(2_800),
        ..better(0, 1_000, 2_000, 900)
    }];
    let reserved = Lease {
        holder: None,
        handover_to: Some("best".into()),
        expires_at: at(1_500),
        ..held_by_low(7, 1_000, 2_000)
    };
    let d = decide_among(
        at(3_000),
        NAME,
        Some(&reserved),
        &campaign("low", None, 2_000),
        Some(&low_standing(&holding_off)),
    );
    assert_eq!(d.effect, Effect::Unavailable, "{d:?}");
    // Not campaigning (last seen at 1_000): a free lease does not wait for it.
    let free = Lease {
        handover_to: None,
        ..reserved
    };
    let d = decide_among(
        at(3_000),
        NAME,
        Some(&free),
        &campaign("low", None, 2_000),
        Some(&low_standing(&holding_off)),
    );
    assert!(matches!(d.effect, Effect::Acquired { .. }), "{d:?}");
}
