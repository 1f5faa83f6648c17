//! Locks on the in-memory backend: a term whose belief ended is never handed out again.

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
