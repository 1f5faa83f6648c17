//! The client edge: one believer per lease, also between tasks of one process and between
//! processes that share a holder id. Each test is a regression test for one way the guards'
//! bookkeeping once handed out a second belief (issue 11), on the in-memory backend with
//! paused time.

mod common;

use common::memory::{elector, setup};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tenure::{Elector, LeaderGuard, LockOptions, Locks};
use tokio::time::{sleep, Instant};

fn short(at_most_ms: u64) -> LockOptions {
    LockOptions::default().ttl(Duration::from_millis(at_most_ms))
}

/// Every guard `elector` hands out within `for_how_long`, in order.
async fn guards_within(elector: &Elector, for_how_long: Duration) -> Vec<LeaderGuard> {
    let mut seen: Vec<LeaderGuard> = vec![];
    let until = Instant::now() + for_how_long;
    while Instant::now() < until {
        let next = tokio::time::timeout_at(until, elector.wait_until_leader()).await;
        let Ok(Ok(guard)) = next else { break };
        seen.push(guard.clone());
        tokio::select! {
            () = guard.lost() => {}
            () = tokio::time::sleep_until(until) => {}
        }
    }
    seen
}

/// Hole 1: a guard dropped (its release runs in the background) and a `try_lock` of the same
/// name by another task of the same `Locks` at once. The campaign must not be taken for a
/// renewal of the term being released.
#[tokio::test(start_paused = true)]
async fn relock_after_a_drop_never_gives_two_holders() {
    let (backend, store) = setup(false);
    let a = Locks::with_holder(store.clone(), "proc-a").unwrap();
    let b = Locks::with_holder(store.clone(), "proc-b").unwrap();
    // Every call of proc-a takes 20 ms, so the release and the relock are in flight together.
    backend
        .round_trips
        .lock()
        .unwrap()
        .insert("proc-a".into(), Duration::from_millis(20));
    let first = a.try_lock("cron", short(10_000)).await.unwrap().unwrap();
    drop(first);
    let relocked = a.try_lock("cron", short(10_000)).await.unwrap();
    sleep(Duration::from_millis(100)).await;
    let other = b.try_lock("cron", short(10_000)).await.unwrap();
    if let (Some(mine), Some(theirs)) = (&relocked, &other) {
        assert!(
            mine.is_lost(),
            "two holders: proc-a term {} and proc-b term {}",
            mine.term(),
            theirs.term()
        );
    }
}

/// Hole 1 with an explicit release racing a `try_lock` from another task of the process.
#[tokio::test(start_paused = true)]
async fn relock_racing_an_explicit_release_never_gives_two_holders() {
    let (backend, store) = setup(false);
    let a = Locks::with_holder(store.clone(), "proc-a").unwrap();
    let b = Locks::with_holder(store.clone(), "proc-b").unwrap();
    backend
        .round_trips
        .lock()
        .unwrap()
        .insert("proc-a".into(), Duration::from_millis(20));
    for round in 0..20u64 {
        let first = a.try_lock("cron", short(10_000)).await.unwrap();
        let Some(first) = first else {
            sleep(Duration::from_secs(11)).await;
            continue;
        };
        // The relock starts 0..19 ms after the release, in virtual time.
        let relock = async {
            sleep(Duration::from_millis(round)).await;
            a.try_lock("cron", short(10_000)).await.unwrap()
        };
        let (_, relocked) = tokio::join!(first.release(), relock);
        sleep(Duration::from_millis(100)).await;
        let other = b.try_lock("cron", short(10_000)).await.unwrap();
        if let (Some(mine), Some(theirs)) = (&relocked, &other) {
            assert!(
                mine.is_lost(),
                "round {round}: two holders, proc-a term {} and proc-b term {}",
                mine.term(),
                theirs.term()
            );
        }
        for guard in [relocked, other].into_iter().flatten() {
            guard.release().await.unwrap();
        }
    }
}

/// Hole 2: two tasks of one process take one name at once with different ttls. The row
/// must not end up with a ttl shorter than the one the winner believes in.
#[tokio::test(start_paused = true)]
async fn a_guard_believes_no_longer_than_the_row_it_holds() {
    for long_first in [true, false] {
        let (backend, store) = setup(false);
        let a = Locks::with_holder(store.clone(), "proc-a").unwrap();
        let b = Locks::with_holder(store.clone(), "proc-b").unwrap();
        // Each call of proc-a takes 10 ms; the second campaign is sent 1 ms after the first,
        // so it is decided while the first one's answer is still on its way.
        backend
            .round_trips
            .lock()
            .unwrap()
            .insert("proc-a".into(), Duration::from_millis(10));
        let (first, second) = if long_first {
            (60_000, 500)
        } else {
            (500, 60_000)
        };
        let (one, two) = tokio::join!(a.try_lock("cron", short(first)), async {
            sleep(Duration::from_millis(1)).await;
            a.try_lock("cron", short(second)).await
        });
        let (long, brief) = if long_first { (one, two) } else { (two, one) };
        let winner = long.unwrap().or(brief.unwrap()).expect("one of them wins");
        let snapshot = store.get("cron").await.unwrap();
        let left = Duration::from_millis(snapshot.leases[0].remaining_ms(snapshot.now));
        let believed = winner.deadline().saturating_duration_since(Instant::now());
        assert!(
            believed < left,
            "long first: {long_first}: the guard believes {believed:?}, the row has {left:?} left"
        );
        sleep(Duration::from_millis(800)).await;
        let other = b.try_lock("cron", short(60_000)).await.unwrap();
        if let Some(theirs) = &other {
            assert!(
                winner.is_lost(),
                "long first: {long_first}: proc-a (term {}) still believes, proc-b holds term {}",
                winner.term(),
                theirs.term()
            );
        }
    }
}

/// Hole 3: a voluntary release that times out without landing. The term must not come back in
/// a new guard when the elector campaigns again.
#[tokio::test(start_paused = true)]
async fn a_failed_release_never_resumes_the_term() {
    let (backend, store) = setup(false);
    let e = elector(&store, "a");
    let first = e.wait_until_leader().await.unwrap();
    backend.failing_releases.store(1, Ordering::SeqCst);
    let term = first.term();
    assert!(first.release().await.is_err(), "the release failed");
    leads_again_with_a_new_term(&e, term).await;
}

/// Hole 3 after a local pause whose release fails.
#[tokio::test(start_paused = true)]
async fn a_local_pause_with_a_failed_release_never_resumes_the_term() {
    let (backend, store) = setup(false);
    let e = elector(&store, "a");
    let first = e.wait_until_leader().await.unwrap();
    backend.failing_releases.store(1, Ordering::SeqCst);
    e.pause().await.unwrap();
    first.lost().await;
    let term = first.term();
    drop(first);
    sleep(Duration::from_millis(50)).await;
    e.resume().await.unwrap();
    leads_again_with_a_new_term(&e, term).await;
}

/// Hole 3 after a cluster pause whose step-down release fails, then a resume.
#[tokio::test(start_paused = true)]
async fn a_cluster_pause_with_a_failed_release_never_resumes_the_term() {
    let (backend, store) = setup(false);
    let e = elector(&store, "a");
    let first = e.wait_until_leader().await.unwrap();
    backend.failing_releases.store(5, Ordering::SeqCst);
    store.pause("job", "operator").await.unwrap();
    first.lost().await;
    let term = first.term();
    drop(first);
    sleep(Duration::from_millis(300)).await;
    store.resume("job", "operator").await.unwrap();
    leads_again_with_a_new_term(&e, term).await;
}

/// The elector leads again within a few ttls, and every guard it hands out has a term above
/// `old` and above the one before.
async fn leads_again_with_a_new_term(elector: &Elector, old: u64) {
    let later = guards_within(elector, Duration::from_secs(4)).await;
    assert!(!later.is_empty(), "the elector leads again");
    let mut terms = vec![old];
    terms.extend(later.iter().map(|g| g.term()));
    assert!(
        terms.windows(2).all(|w| w[0] < w[1]),
        "a term reached two guards: {terms:?}"
    );
}

/// Hole 4: two electors with one candidate id must not share the lead.
#[tokio::test(start_paused = true)]
async fn one_candidate_id_in_two_places_never_shares_the_lead() {
    let (_backend, store) = setup(false);
    let one = elector(&store, "x");
    let two = elector(&store, "x");
    let until = Instant::now() + Duration::from_secs(5);
    let mut both_led = (false, false);
    while Instant::now() < until {
        let (a, b) = (one.current(), two.current());
        both_led.0 |= a.is_some();
        both_led.1 |= b.is_some();
        if let (Some(a), Some(b)) = (&a, &b) {
            assert!(
                a.is_lost() || b.is_lost(),
                "both lead: terms {} and {}",
                a.term(),
                b.term()
            );
        }
        sleep(Duration::from_millis(10)).await;
    }
    assert!(both_led.0 || both_led.1, "one of them leads");
}

/// Hole 4: a restarted incarnation with the crashed one's id starts a new term.
#[tokio::test(start_paused = true)]
async fn a_restart_with_the_same_id_never_adopts_the_old_term() {
    let (_backend, store) = setup(false);
    let crashed = elector(&store, "x");
    let old = crashed.wait_until_leader().await.unwrap().term();
    crashed.abort();
    let restarted = elector(&store, "x");
    let guard = tokio::time::timeout(Duration::from_secs(5), restarted.wait_until_leader())
        .await
        .expect("leads after the old lease expired")
        .unwrap();
    assert!(guard.term() > old, "term {} adopted", guard.term());
}

/// Shutdown waits for clones of the guard that still run leader-only work (or the deadline).
#[tokio::test(start_paused = true)]
async fn shutdown_releases_only_after_the_work_stopped() {
    let (backend, store) = setup(false);
    let e = elector(&store, "a");
    let guard = e.wait_until_leader().await.unwrap();
    let term = guard.term();
    let worker = tokio::spawn(async move {
        guard.lost().await;
        // Leader-only work takes 200 ms to stop after it was told.
        sleep(Duration::from_millis(200)).await;
        drop(guard);
        Instant::now()
    });
    let shutdown = tokio::spawn(e.shutdown());
    sleep(Duration::from_millis(100)).await;
    let row = backend.row("job").unwrap();
    assert_eq!(
        (row.holder.as_deref(), row.term),
        (Some("a"), term),
        "released while the work still ran"
    );
    let stopped = worker.await.unwrap();
    shutdown.await.unwrap();
    assert_eq!(backend.row("job").unwrap().holder, None);
    assert!(Instant::now() >= stopped);
}

/// A demoted leader holds off, so another live candidate takes the lead.
#[tokio::test(start_paused = true)]
async fn demote_moves_the_lead_to_another_candidate() {
    let (_backend, store) = setup(false);
    let a = elector(&store, "a");
    let b = elector(&store, "b");
    for round in 0..10 {
        let leader = loop {
            if let Some(l) = store.leader("job").await.unwrap() {
                break l;
            }
            sleep(Duration::from_millis(50)).await;
        };
        store.demote("job", false, "operator").await.unwrap();
        let next = loop {
            sleep(Duration::from_millis(50)).await;
            if let Some(l) = store.leader("job").await.unwrap() {
                break l;
            }
        };
        assert_ne!(
            next.holder, leader.holder,
            "round {round}: {} took the lead straight back",
            leader.holder
        );
    }
    drop((a, b));
}

/// Names and ids that MySQL's PAD SPACE collation would confuse with others are refused.
#[test]
fn trailing_spaces_are_refused() {
    for bad in ["job ", "job  ", " "] {
        let err = tenure::validate::name(bad).unwrap_err().to_string();
        assert!(err.contains("space"), "{bad:?}: {err}");
        assert!(tenure::validate::candidate(bad).is_err(), "{bad:?}");
    }
    tenure::validate::name(" job").unwrap();
    tenure::validate::name("a b").unwrap();
}
