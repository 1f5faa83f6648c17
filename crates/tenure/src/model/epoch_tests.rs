//! The lease rules across epochs: every operation that begins a tenure mints its term with
//! [`Epoch::next_term`] — above every term of an earlier epoch, never past the end of its own.

use super::tests::at;
use super::*;

const NAME: &str = "billing-cron";

fn campaign(candidate: &str) -> Op {
    Op::Campaign {
        candidate: candidate.to_string(),
        term: None,
        ttl_ms: 1_000,
        metadata: None,
        purpose: Purpose::Election,
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
        ttl_ms: 1_000,
        metadata: None,
        handover_to: None,
        paused: false,
    }
}

fn in_epoch(ms: i64, epoch: Epoch) -> Clock {
    Clock { now: at(ms), epoch }
}

fn term_of(d: &Decision) -> u64 {
    d.lease.as_ref().expect("a row").term
}

#[test]
fn a_tenure_after_a_promotion_starts_above_the_old_timeline() {
    let two = Epoch::timeline(2);
    // A new name, a vacant row, and a row whose last terms were lost with the old primary: the
    // new timeline's first term lies above every term timeline 1 could have issued.
    let fresh = decide(in_epoch(10, two), NAME, None, &campaign("a"));
    assert_eq!(term_of(&fresh), 1 << TIMELINE_BITS);
    let after = decide(in_epoch(10, two), NAME, Some(&vacant(7)), &campaign("a"));
    assert_eq!(
        after.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(term_of(&after), 1 << TIMELINE_BITS);
    // Within the timeline, one more per tenure.
    let next = decide(
        in_epoch(10, two),
        NAME,
        Some(&vacant(1 << TIMELINE_BITS)),
        &campaign("b"),
    );
    assert_eq!(term_of(&next), (1 << TIMELINE_BITS) + 1);
    // MySQL/MariaDB: a floor in microseconds.
    let floor = 1_764_000_000_000_000;
    let mysql = decide(
        in_epoch(10, Epoch::from_floor(floor)),
        NAME,
        Some(&vacant(7)),
        &campaign("a"),
    );
    assert_eq!(term_of(&mysql), floor);
}

#[test]
fn every_operation_that_mints_uses_the_epoch() {
    let two = Epoch::timeline(2);
    let held = Lease {
        holder: Some("a".to_string()),
        expires_at: at(1_000),
        ..vacant(3)
    };
    let forced = decide(
        in_epoch(10, two),
        NAME,
        Some(&held),
        &Op::Handover {
            to: "b".to_string(),
            immediate: true,
        },
    );
    assert_eq!(forced.effect, Effect::Forced);
    assert_eq!(term_of(&forced), 1 << TIMELINE_BITS);
    let succeeded = decide(
        in_epoch(10, two),
        NAME,
        Some(&held),
        &Op::Succeed {
            candidate: "a".to_string(),
            term: 3,
            ttl_ms: 1_000,
            purpose: Purpose::Election,
        },
    );
    assert_eq!(term_of(&succeeded), 1 << TIMELINE_BITS);
}

#[test]
fn the_last_term_of_an_epoch_is_minted_and_then_nothing() {
    let one = Epoch::timeline(1);
    let last = (1 << TIMELINE_BITS) - 1;
    let d = decide(
        in_epoch(10, one),
        NAME,
        Some(&vacant(last - 1)),
        &campaign("a"),
    );
    assert_eq!(term_of(&d), last);
    for op in [
        campaign("a"),
        Op::Handover {
            to: "b".to_string(),
            immediate: true,
        },
    ] {
        let row = vacant(last);
        let d = decide(in_epoch(10, one), NAME, Some(&row), &op);
        assert_eq!(d.effect, Effect::TermsExhausted, "{op:?}");
        assert!(!d.write && d.event.is_none(), "{op:?}: nothing written");
        assert_eq!(d.lease.as_ref(), Some(&row));
    }
    let end = decide(
        in_epoch(10, Epoch::ZERO),
        NAME,
        Some(&vacant(i64::MAX as u64)),
        &campaign("a"),
    );
    assert_eq!(end.effect, Effect::TermsExhausted, "never wraps past 2⁶³");
    // Operations that mint nothing are not refused: a release, a demote, a pause.
    let held = Lease {
        holder: Some("a".to_string()),
        expires_at: at(1_000),
        ..vacant(last)
    };
    let release = Op::Release {
        candidate: "a".to_string(),
        term: last,
        at_least_ms: 0,
        reason: None,
        purpose: Purpose::Election,
    };
    assert_eq!(
        decide(in_epoch(10, one), NAME, Some(&held), &release).effect,
        Effect::Released
    );
}
