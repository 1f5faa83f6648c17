//! Cluster locks and semaphores on one backend.

use crate::common::unique;
use std::time::Duration;
use tenure::{Effect, LockOptions, Locks, Store};
use tokio::time::{sleep, timeout, Instant};

pub(crate) fn holder(store: &Store, id: &str) -> Locks {
    Locks::with_holder(store.clone(), id).unwrap()
}

/// 1 s: renewed every 250 ms.
fn short() -> LockOptions {
    LockOptions::default().ttl(Duration::from_secs(1))
}

pub(crate) async fn lock_excludes_and_release_hands_on(store: Store) {
    let name = unique("lock");
    let (a, b) = (holder(&store, "a"), holder(&store, "b"));
    let guard = a
        .try_lock(&name, LockOptions::default())
        .await
        .unwrap()
        .expect("free");
    assert_eq!(guard.term(), 1);
    assert!(b
        .try_lock(&name, LockOptions::default())
        .await
        .unwrap()
        .is_none());
    assert!(
        a.try_lock(&name, LockOptions::default())
            .await
            .unwrap()
            .is_none(),
        "a lock already held by this process is not taken twice"
    );
    guard.release().await.unwrap();
    let next = b
        .try_lock(&name, LockOptions::default())
        .await
        .unwrap()
        .expect("released");
    assert_eq!(next.term(), 2);
    let info = store.leader(&name).await.unwrap().unwrap();
    assert_eq!((info.holder.as_str(), info.term), ("b", 2));
}

pub(crate) async fn lock_at_least_holds_the_name(store: Store) {
    let name = unique("atleast");
    let (a, b) = (holder(&store, "a"), holder(&store, "b"));
    let options = LockOptions::default().at_least(Duration::from_millis(600));
    let taken = Instant::now();
    let guard = a.try_lock(&name, options).await.unwrap().unwrap();
    guard.release().await.unwrap();
    assert!(
        b.try_lock(&name, options).await.unwrap().is_none(),
        "at_least"
    );
    let got = b
        .lock(&name, options, Duration::from_secs(3))
        .await
        .unwrap()
        .expect("free after at_least");
    assert!(taken.elapsed() >= Duration::from_millis(550));
    assert_eq!(got.term(), 2);
}

/// P5 for locks: a stale release leaves the successor untouched.
///
/// Decided by what the database recorded, not by how fast the successor's calls were: on a
/// loaded machine a grant can reach its caller after the call's timeout (the database granted
/// a term the caller never heard of; doubt means "not leader"), and the caller takes the next
/// term. So the successor's term is checked against the history: the takeover of `a`'s
/// expired term 1 was `b`'s term 2, every later grant was `b`'s, and `b` holds the last.
pub(crate) async fn lock_stale_release_is_harmless(store: Store) {
    let name = unique("stalelock");
    let (a, b) = (holder(&store, "a"), holder(&store, "b"));
    let guard = a
        .try_lock(&name, short().keep_alive(false))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.term(), 1);
    timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("no keep-alive: lost at the deadline");
    guard.forget();
    // The database's expiry lies a safety margin after the local deadline. The successor's
    // ttl leaves its keep-alive room on a loaded machine: its belief ends by nothing but the
    // stale release, if that could touch it.
    let patient = LockOptions::default().ttl(Duration::from_secs(10));
    let successor = b
        .lock(&name, patient, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("expired");
    let mut granted = store.history(&name, 100).await.unwrap();
    granted.reverse();
    let granted: Vec<(String, u64, Option<String>)> = granted
        .into_iter()
        .map(|h| (h.event, h.term, h.holder))
        .collect();
    assert_eq!(
        granted.first(),
        Some(&("taken_over_expired".to_string(), 2, Some("b".to_string()))),
        "b took a's expired term 1 over as term 2: {granted:?}"
    );
    assert!(
        granted
            .iter()
            .all(|(_, term, who)| who.as_deref() == Some("b")
                && (2..=successor.term()).contains(term)),
        "every grant after a's was b's, up to the successor's term {}: {granted:?}",
        successor.term()
    );
    let before = store.get(&name).await.unwrap().leases[0].clone();
    assert_eq!(
        (before.holder.as_deref(), before.term),
        (Some("b"), successor.term())
    );
    let stale = store.release(&name, "a", 1, Duration::ZERO).await.unwrap();
    assert_eq!(stale.effect, Effect::NotHolder);
    // (The successor's keep-alive may have renewed it meanwhile; nothing else changed.)
    let after = stale.lease.unwrap();
    assert_eq!((after.holder, after.term), (before.holder, before.term));
    assert!(after.expires_at >= before.expires_at);
    assert!(!successor.is_lost());
}

/// Keep-alive holds a short lock for many ttls; dropping the guard releases it.
pub(crate) async fn lock_keep_alive_and_drop(store: Store) {
    let name = unique("keep");
    let (a, b) = (holder(&store, "a"), holder(&store, "b"));
    // A 3 s ttl held for 4.8 s: kept alive, never by its first grant alone. (A 1 s ttl bounds
    // each call at 200 ms, which `b`'s try_lock overran on a loaded machine: a timeout, not a
    // broken keep-alive.)
    let options = LockOptions::default().ttl(Duration::from_secs(3));
    let guard = a.try_lock(&name, options).await.unwrap().unwrap();
    for _ in 0..8 {
        sleep(Duration::from_millis(600)).await;
        assert!(!guard.is_lost(), "kept alive");
        assert!(b.try_lock(&name, options).await.unwrap().is_none());
    }
    drop(guard);
    let next = b
        .lock(&name, options, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("dropped guard released the lock");
    assert_eq!(next.term(), 2);
    assert_eq!(a.held(), 0);
}

/// A paused lock is not renewed: its holder learns at the next keep-alive.
pub(crate) async fn lock_lost_when_paused(store: Store) {
    let name = unique("pausedlock");
    let a = holder(&store, "a");
    let guard = a.try_lock(&name, short()).await.unwrap().unwrap();
    store.pause(&name, "op").await.unwrap();
    timeout(Duration::from_millis(1000), guard.lost())
        .await
        .expect("lost at the next keep-alive");
    assert_eq!(a.held(), 0);
}

/// Election mode: the same process takes its own live lock again, with nobody in between and
/// a new term (every guard has a term of its own); another process with the same holder id
/// does not share it.
pub(crate) async fn lock_election_mode(store: Store) {
    let name = unique("election");
    let (a, b) = (holder(&store, "a"), holder(&store, "b"));
    let options = LockOptions::default()
        .ttl(Duration::from_secs(2))
        .keep_alive(false);
    let first = a.try_lock(&name, options).await.unwrap().unwrap();
    let term = first.term();
    first.forget();
    assert!(b.try_lock(&name, options).await.unwrap().is_none());
    let same_id_elsewhere = holder(&store, "a");
    assert!(
        same_id_elsewhere
            .try_lock(&name, options)
            .await
            .unwrap()
            .is_none(),
        "a holder id is not a key"
    );
    let again = a
        .try_lock(&name, options)
        .await
        .unwrap()
        .expect("own live lock");
    assert_eq!(again.term(), term + 1, "the kept tenure is succeeded");
    again.forget();
    let recorded = LockOptions::default()
        .ttl(Duration::from_secs(2))
        .keep_alive(false)
        .record_every_cycle(true);
    let third = a.try_lock(&name, recorded).await.unwrap().expect("own");
    let history = store.history(&name, 1).await.unwrap();
    assert_eq!(
        history[0].detail,
        format!("succeeded its own term {}", term + 1)
    );
    assert_eq!(third.term(), term + 2);
    assert!(b.try_lock(&name, options).await.unwrap().is_none());
}

/// A semaphore of 3 with 5 contenders; permits have their own terms; N lowered and raised.
pub(crate) async fn semaphore_limits_holders(store: Store) {
    let name = unique("sem");
    let holders: Vec<Locks> = (0..5).map(|i| holder(&store, &format!("h{i}"))).collect();
    let mut guards = vec![];
    for locks in &holders {
        let sem = locks.semaphore(&name, 3).unwrap();
        guards.push(sem.try_acquire(LockOptions::default()).await.unwrap());
    }
    let held: Vec<_> = guards.iter().flatten().collect();
    assert_eq!(held.len(), 3, "three permits");
    let mut permits: Vec<&str> = held.iter().map(|g| g.name()).collect();
    permits.sort();
    assert_eq!(
        permits,
        [
            format!("{name}#0"),
            format!("{name}#1"),
            format!("{name}#2")
        ]
    );

    // Lowering N: nobody new gets in while permits 0 and 1 are held; the holder of permit 2
    // keeps it until it lets go.
    let late = holders[3].semaphore(&name, 2).unwrap();
    assert!(late
        .try_acquire(LockOptions::default())
        .await
        .unwrap()
        .is_none());
    // Raising N: a new permit at once.
    let more = holders[4].semaphore(&name, 4).unwrap();
    let fourth = more
        .try_acquire(LockOptions::default())
        .await
        .unwrap()
        .expect("permit 3");
    assert_eq!(fourth.name(), format!("{name}#3"));
    // A released permit goes to a waiter, with the next term of that permit.
    let released = guards.iter_mut().find_map(|g| g.take()).unwrap();
    let (permit, term) = (released.name().to_string(), released.term());
    released.release().await.unwrap();
    let sem = holders[3].semaphore(&name, 4).unwrap();
    let next = sem
        .acquire(LockOptions::default(), Duration::from_secs(3))
        .await
        .unwrap()
        .unwrap();
    assert_eq!((next.name(), next.term()), (permit.as_str(), term + 1));
    assert!(holders[0].semaphore(&name, 0).is_err());
}

pub(crate) async fn lock_waits_without_a_bound(store: Store) {
    let name = unique("lock-forever");
    let (a, b) = (holder(&store, "a"), holder(&store, "b"));
    let guard = a.try_lock(&name, short()).await.unwrap().expect("free");
    // Waiting without a bound: still waiting while the lock is held (longer than its ttl, as
    // the holder keeps it alive), and it returns once the holder releases.
    let waiter = tokio::spawn({
        let name = name.clone();
        async move { b.lock_until(&name, short(), None).await }
    });
    sleep(Duration::from_millis(1500)).await;
    assert!(
        !waiter.is_finished(),
        "a wait without a bound does not give up"
    );
    guard.release().await.unwrap();
    let got = timeout(Duration::from_secs(3), waiter)
        .await
        .expect("returns once released")
        .unwrap()
        .unwrap()
        .expect("a wait without a bound returns only with the lock");
    assert_eq!(got.candidate(), "b");
    got.release().await.unwrap();

    // The same for a semaphore's permit.
    let sem = unique("sem-forever");
    let taken = a
        .semaphore(&sem, 1)
        .unwrap()
        .try_acquire(short())
        .await
        .unwrap()
        .expect("free");
    let c = holder(&store, "c");
    let waiter = tokio::spawn(async move {
        let permits = c.semaphore(&sem, 1).unwrap();
        permits.acquire_until(short(), None).await
    });
    sleep(Duration::from_millis(1500)).await;
    assert!(
        !waiter.is_finished(),
        "a wait without a bound does not give up"
    );
    taken.release().await.unwrap();
    let got = timeout(Duration::from_secs(3), waiter)
        .await
        .expect("returns once released")
        .unwrap()
        .unwrap()
        .expect("a permit");
    assert_eq!(got.candidate(), "c");
    got.release().await.unwrap();
}
