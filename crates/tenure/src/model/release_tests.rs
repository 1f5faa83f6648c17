//! Unit tests of [`decide`]'s releases: by the holder, with a minimum hold, stale ones.

use super::tests::*;
use super::*;

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
