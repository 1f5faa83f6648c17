//! Locks on the in-memory backend: a term whose belief ended is never handed out again, and
//! the keep-alive of more locks than one call renews within its bound keeps them all.

mod common;

use common::memory::{setup, TTL};
use std::sync::atomic::Ordering;
use std::time::Duration;
use tenure::{LockOptions, Locks, Timing};

/// A lock whose answer came after its deadline is given back; if that release fails (it timed
/// out), the database still names us with that term, and the next `try_lock` renews it. That
/// renewal must be released again, never returned as a new guard under the old term.
#[tokio::test(flavor = "current_thread")]
async fn a_term_given_back_is_never_handed_out_until_its_release_lands() {
    let (backend, store) = setup(false);
    let locks = Locks::with_holder(store, "me").unwrap();
    let options = LockOptions::default().ttl(TTL).keep_alive(false);
    let belief = Timing::from_ttl(TTL).unwrap().max_belief();

    // Term 1 is taken in the database but read after the local deadline, and its release fails.
    *backend.stall_once.lock().unwrap() = Some(belief + Duration::from_millis(50));
    backend.failing_releases.store(1, Ordering::SeqCst);
    assert!(locks.try_lock("job", options).await.unwrap().is_none());
    assert_eq!(backend.failing_releases.load(Ordering::SeqCst), 0);
    assert_eq!(backend.row("job").unwrap().holder.as_deref(), Some("me"));

    let mut guard = None;
    for _ in 0..5 {
        guard = locks.try_lock("job", options).await.unwrap();
        if guard.is_some() {
            break;
        }
    }
    let guard = guard.expect("the lock is taken again");
    assert_eq!(guard.term(), 2, "a new term, never the one given back");
}

/// The keep-alive's time grows with the number of locks held, its bound does not: 25,000 locks
/// at 0.1 ms each take 2.5 s in one call, past the 2 s bound of a 10 s ttl, and a call past its
/// bound renews nothing (so would every next one, as long: every lock was lost). The keep-alive
/// renews at most 10,000 per call, each call under its own bound.
#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn a_keep_alive_of_more_locks_than_its_bound_allows_keeps_them_all() {
    let (backend, store) = setup(false);
    let locks = Locks::with_holder(store, "me").unwrap();
    let ttl = Duration::from_secs(10);
    let timing = Timing::from_ttl(ttl).unwrap();
    assert_eq!(timing.db_timeout(), Duration::from_secs(2));
    let options = LockOptions::default().ttl(ttl);
    let mut guards = Vec::new();
    for i in 0..25_000 {
        let name = format!("lock-{i}");
        guards.push(locks.try_lock(&name, options).await.unwrap().expect("free"));
    }
    *backend.renew_per_lease.lock().unwrap() = Duration::from_micros(100);
    let calls = backend.calls.load(Ordering::SeqCst);
    // Four renew intervals, the whole ttl: past every lock's deadline unless it was renewed.
    tokio::time::sleep(4 * timing.renew_interval()).await;
    assert!(
        backend.calls.load(Ordering::SeqCst) > calls,
        "the keep-alive ran"
    );
    assert_eq!(locks.held(), 25_000, "every lock is still held");
    assert!(guards.iter().all(|g| !g.is_lost()));
}
