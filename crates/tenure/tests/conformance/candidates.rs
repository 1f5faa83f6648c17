//! The candidate registry and priorities on one backend (issue 28): every elector is a
//! registered candidate; a crashed leader's lease goes to the best live candidate; a better
//! candidate takes the lead by a graceful handover with no overlap; equal priorities and
//! observers never take the lead.

use crate::common::unique;
use std::time::Duration;
use tenure::candidates::Candidates;
use tenure::{Elector, Error, Role, Store, Timing};
use tokio::time::{sleep, timeout, Instant};

/// 2 s: renew every 500 ms, database timeout 400 ms (a loaded machine's round trips fit).
pub(crate) const TTL_MS: u64 = 2_000;

pub(crate) fn spawn(store: &Store, name: &str, id: &str, priority: i32) -> Elector {
    Elector::builder(store.clone(), name)
        .candidate(id)
        .metadata(format!("{id}:8080"))
        .priority(priority)
        .timing(Timing::from_ttl(Duration::from_millis(TTL_MS)).unwrap())
        .spawn()
        .unwrap()
}

pub(crate) fn leads(e: &Elector) -> Option<u64> {
    let role = e.role().borrow().clone();
    match role {
        Role::Leader { term, .. } if role.is_leader() => Some(term),
        _ => None,
    }
}

/// Waits (bounded) until exactly `who` leads, and never sees two believers meanwhile.
pub(crate) async fn until_leads(electors: &[(&str, &Elector)], who: &str, within: Duration) -> u64 {
    let start = Instant::now();
    loop {
        let leading: Vec<(&str, u64)> = electors
            .iter()
            .filter_map(|(id, e)| leads(e).map(|t| (*id, t)))
            .collect();
        assert!(leading.len() <= 1, "two believers: {leading:?}");
        if let [(id, term)] = leading[..] {
            if id == who {
                return term;
            }
        }
        assert!(
            start.elapsed() < within,
            "{who} did not lead within {within:?} (leading: {leading:?})"
        );
        sleep(Duration::from_millis(5)).await;
    }
}

pub(crate) async fn candidates_register_follow_and_leave(store: Store) {
    let name = unique("candidates");
    let a = spawn(&store, &name, "a", 0);
    let guard = timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .unwrap()
        .unwrap();
    let b = spawn(&store, &name, "b", -1);
    let watcher = Elector::builder(store.clone(), &name)
        .candidate("watcher")
        .observe()
        .priority(9)
        .timing(Timing::from_ttl(Duration::from_millis(TTL_MS)).unwrap())
        .spawn()
        .unwrap();
    let registry = Candidates::new(store.clone());
    let start = Instant::now();
    let roster = loop {
        let roster = registry.list(&name).await.unwrap();
        if roster.candidates.len() == 3 {
            break roster;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{roster:?}");
        sleep(Duration::from_millis(20)).await;
    };
    let shown: Vec<(&str, i32, bool)> = roster
        .candidates
        .iter()
        .map(|c| (c.candidate.as_str(), c.priority, c.observer))
        .collect();
    assert_eq!(
        shown,
        [("a", 0, false), ("b", -1, false), ("watcher", 9, true)]
    );
    assert!(roster.candidates.iter().all(|c| c.is_live(roster.now)));
    assert_eq!(roster.candidates[0].metadata.as_deref(), Some("a:8080"));
    // The observer follows the leader and, with the highest priority, never takes it.
    let start = Instant::now();
    loop {
        if let Role::Follower { leader: Some(l) } = &*watcher.role().borrow() {
            assert_eq!((l.holder.as_str(), l.term), ("a", guard.term()));
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the observer saw no leader"
        );
        sleep(Duration::from_millis(20)).await;
    }
    sleep(Duration::from_millis(3 * TTL_MS)).await;
    assert_eq!(leads(&a), Some(guard.term()), "an observer took the lead");
    // A clean stop leaves the registry at once.
    drop(guard);
    b.shutdown().await;
    let left = registry.list(&name).await.unwrap();
    assert!(
        left.candidates.iter().all(|c| c.candidate != "b"),
        "{left:?}"
    );
    a.shutdown().await;
    watcher.shutdown().await;
}

/// The lowest candidate holds off while the middle one campaigns, that is while the middle one
/// was seen within its cadence (its renew interval plus its database timeout); a middle one
/// later than that may rightly be passed over. With the default timing of a 2 s ttl a follower
/// campaigns every 500-600 ms against a cadence of 900 ms, and CI's loaded MariaDB once let
/// the lowest lead: a late campaign, not a wrong rule. This test's timing keeps a 4 s ttl, a
/// follower's campaign every 500-600 ms and a 2 s database timeout: a cadence of 2.5 s, which
/// no scheduling stall of a loaded machine reaches, while a rule that let the lowest take a
/// lease the middle one waits for fails it whenever the lowest campaigns first.
pub(crate) async fn failover_picks_the_best_live_candidate(store: Store) {
    let name = unique("best-live");
    let timing = Timing::builder()
        .ttl(Duration::from_secs(4))
        .renew_interval(Duration::from_millis(500))
        .db_timeout(Duration::from_secs(2))
        .safety_margin(Duration::from_millis(400))
        .build()
        .unwrap();
    let spawn = |id: &str, priority: i32| {
        Elector::builder(store.clone(), &name)
            .candidate(id)
            .priority(priority)
            .timing(timing)
            .spawn()
            .unwrap()
    };
    let low = spawn("low", 1);
    let mid = spawn("mid", 2);
    let high = spawn("high", 3);
    let all = [("low", &low), ("mid", &mid), ("high", &high)];
    let first = until_leads(&all, "high", Duration::from_secs(15)).await;
    // On a loaded machine a first leader's renewals may have failed until its lease expired:
    // it backs off for a ttl, and nobody waits for it meanwhile. The test is of candidates
    // whose priorities count.
    let registry = Candidates::new(store.clone());
    let start = Instant::now();
    loop {
        let roster = registry.list(&name).await.unwrap();
        if !roster.candidates.iter().any(|c| c.backs_off(roster.now)) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{roster:?}");
        sleep(Duration::from_millis(50)).await;
    }
    // A crash: the lease expires unreleased; the next best live candidate takes it, and the
    // lowest never does (it holds off while the middle one is live and campaigning — not
    // "takes it and then hands it over").
    high.abort();
    let mut low_role = low.role();
    let low_never_led = tokio::spawn(async move {
        loop {
            if low_role.borrow_and_update().is_leader() {
                return false;
            }
            if low_role.changed().await.is_err() {
                return true;
            }
        }
    });
    let rest = [("low", &low), ("mid", &mid)];
    // The lease expires a ttl after the last renewal at most; the bound is generous (an event
    // is awaited, not a time measured).
    let next = until_leads(&rest, "mid", timing.ttl() * 4).await;
    assert!(next > first);
    sleep(timing.renew_interval() * 2).await;
    low.shutdown().await;
    assert!(
        low_never_led.await.unwrap(),
        "the lowest led during the failover"
    );
    mid.shutdown().await;
}

/// A better candidate takes the lead by a graceful handover: once it has been live for the
/// leader's settle time (one renew interval), the leader hands over at its next renewal and the
/// better one campaigns at its next attempt — within two renew intervals of the settle, plus
/// the three round trips in between (the leader's campaign, its release, the better one's
/// campaign), each bounded by the database timeout.
///
/// Measured on the database's clock, from the better candidate's first registration (`since`
/// in the registry) to its acquisition in the history: the test's own wake-ups and the spawn
/// of the better candidate are not part of the contract. (Measured from before the spawn on
/// the test's clock against 2×ttl, a loaded machine failed it now and then.)
pub(crate) async fn a_better_candidate_takes_the_lead_by_handover(store: Store) {
    let name = unique("preferred");
    let timing = Timing::from_ttl(Duration::from_millis(TTL_MS)).unwrap();
    let low = spawn(&store, &name, "low", 1);
    let guard = timeout(Duration::from_secs(10), low.wait_until_leader())
        .await
        .unwrap()
        .unwrap();
    let low_term = guard.term();
    // The low leader's work runs until its guard reports the loss.
    let work = tokio::spawn(async move {
        guard.lost().await;
        Instant::now()
    });
    let high = spawn(&store, &name, "high", 3);
    let high_guard = timeout(Duration::from_secs(15), high.wait_until_leader())
        .await
        .expect("the better candidate leads")
        .unwrap();
    let took_over = Instant::now();
    let stopped = work.await.unwrap();
    assert!(stopped <= took_over, "the old leader's work stopped first");
    assert_eq!(
        high_guard.term(),
        low_term + 1,
        "the handover path: term + 1"
    );
    let roster = Candidates::new(store.clone()).list(&name).await.unwrap();
    let registered = roster
        .candidates
        .iter()
        .find(|c| c.candidate == "high")
        .expect("the better candidate is registered")
        .since;
    let acquired = store
        .history(&name, 10)
        .await
        .unwrap()
        .into_iter()
        .filter(|h| h.term == high_guard.term() && h.holder.as_deref() == Some("high"))
        .map(|h| h.at)
        .min()
        .expect("the better candidate's tenure is in the history");
    let took = Duration::from_micros(
        u64::try_from(acquired.0 - registered.0).expect("acquired after registering"),
    );
    let settle = timing.renew_interval();
    let bound = settle + timing.renew_interval() * 2 + timing.db_timeout() * 3;
    eprintln!("the better candidate led {took:?} after registering (bound {bound:?})");
    assert!(
        took <= bound,
        "led {took:?} after registering, more than the settle time ({settle:?}), two renew \
         intervals and three database timeouts ({bound:?})"
    );
    let history = store.history(&name, 10).await.unwrap();
    assert!(
        history
            .iter()
            .any(|h| h.event == "handed_over" && h.detail.contains("priority")),
        "{history:?}"
    );
    // The low candidate stays a follower now.
    sleep(Duration::from_millis(2 * TTL_MS)).await;
    assert_eq!(leads(&low), None);
    drop(high_guard);
    low.shutdown().await;
    high.shutdown().await;
}

pub(crate) async fn equal_priorities_never_hand_over(store: Store) {
    let name = unique("equals");
    let a = spawn(&store, &name, "a", 5);
    let guard = timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .unwrap()
        .unwrap();
    let b = spawn(&store, &name, "b", 5);
    sleep(Duration::from_millis(3 * TTL_MS)).await;
    let b_leads = leads(&b);
    let history = store.history(&name, 20).await.unwrap();
    assert!(
        history.iter().all(|h| h.event != "handed_over"),
        "an equal candidate was handed the lease: {history:?}"
    );
    // While a's first tenure lasts, b follows and nobody else holds the lease. A later
    // tenure can only follow a renewal that a loaded machine made late (the lease lapsed),
    // never a handover (CI, on PostgreSQL beside a build: a led again, in term 2).
    if history.iter().all(|h| h.term == guard.term()) {
        assert_eq!(b_leads, None);
        assert!(
            history.iter().all(|h| h.holder.as_deref() == Some("a")),
            "{history:?}"
        );
    } else {
        eprintln!("a's first tenure lapsed on a loaded machine: {history:?}");
    }
    drop(guard);
    a.shutdown().await;
    b.shutdown().await;
}

/// Where the database wakes followers (PostgreSQL's NOTIFY, the doorbells of SQLite and
/// MySQL), a leader that steps down wakes its follower at once: with a 40 s ttl the follower's
/// next poll is 10 s after its campaign, so a lead seconds after the release is the wake-up.
/// (A registered candidate campaigns in the registry's transaction: that transaction must ring
/// the bell as a lone lease operation does.)
pub(crate) async fn a_leader_stepping_down_wakes_its_follower(store: Store) {
    if store.backend().subscribe().is_none() {
        return;
    }
    let name = unique("wakes");
    let timing = Timing::from_ttl(Duration::from_secs(40)).unwrap();
    let spawn_slow = |id: &str| {
        Elector::builder(store.clone(), &name)
            .candidate(id)
            .timing(timing)
            .spawn()
            .unwrap()
    };
    let a = spawn_slow("a");
    let guard = timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .unwrap()
        .unwrap();
    let b = spawn_slow("b");
    // b has campaigned once (it is registered), and follows a.
    let registry = Candidates::new(store.clone());
    let start = Instant::now();
    while registry.list(&name).await.unwrap().candidates.len() < 2 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "b never registered"
        );
        sleep(Duration::from_millis(20)).await;
    }
    drop(guard);
    let released = Instant::now();
    a.shutdown().await;
    let term = until_leads(&[("b", &b)], "b", Duration::from_secs(5)).await;
    assert!(term > 1, "term {term}");
    eprintln!("woken after {:?}", released.elapsed());
    b.shutdown().await;
}

/// A store wrapped by hand around a backend whose lease tables alone exist refuses the
/// registry with a clear [`Error::SchemaMissing`] naming its table (every elector campaigns
/// there), and works once migrated.
pub(crate) async fn an_unmigrated_hand_wrapped_store_names_the_missing_table(store: Store) {
    let url = crate::common::url_of(&store);
    let prefix = format!("t{}_", unique("w").replace('-', "_").to_lowercase());
    let options = crate::common::options().table_prefix(&prefix);
    // `backend::connect` prepares the lease's tables only.
    let backend = tenure::backend::connect(&url, &options).await.unwrap();
    let wrapped = Store::from_backend(backend, Duration::from_secs(10));
    let registry = Candidates::new(wrapped.clone());
    let err = registry.list("n").await.unwrap_err();
    match &err {
        Error::SchemaMissing { table, .. } => assert_eq!(table, &format!("{prefix}candidate")),
        other => panic!("{other:?}"),
    }
    assert!(err.to_string().contains("tenure migrate"), "{err}");
    wrapped.migrate().await.unwrap();
    assert!(registry.list("n").await.unwrap().candidates.is_empty());
    let elector = Elector::builder(wrapped.clone(), "n")
        .candidate("a")
        .timing(Timing::from_ttl(Duration::from_millis(TTL_MS)).unwrap())
        .spawn()
        .unwrap();
    timeout(Duration::from_secs(10), elector.wait_until_leader())
        .await
        .expect("leads once migrated")
        .unwrap();
    elector.shutdown().await;
}
