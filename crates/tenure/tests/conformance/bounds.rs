//! Durations on their way to the database are bounded (issue 25): a minimum hold time beyond
//! `MAX_DURATION` is refused before anything is written, and one at the bound round-trips as a
//! timestamp a century ahead on every engine.

use crate::common::unique;
use crate::ops::campaign;
use std::time::Duration;
use tenure::validate::MAX_DURATION;
use tenure::{Effect, Error, LockOptions, Locks, Store};

const LONG: u64 = 60_000;

/// A release's minimum hold time beyond [`MAX_DURATION`] is refused and changes nothing; up to
/// it, the name is held that long on every engine (a timestamp a century ahead round-trips).
pub(crate) async fn release_at_least_is_bounded(store: Store) {
    let name = unique("atleast-bound");
    campaign(&store, &name, "a", LONG).await;
    let forever = Duration::from_secs(999_999_999_999 * 3600);
    for at_least in [
        Duration::MAX,
        forever,
        MAX_DURATION + Duration::from_millis(1),
    ] {
        match store.release(&name, "a", 1, at_least).await {
            Err(Error::Invalid { what, value, .. }) => {
                assert_eq!(what, "at least");
                assert_eq!(value, format!("{at_least:?}"));
            }
            other => panic!("release with at least {at_least:?}: {other:?}"),
        }
        let leader = store.leader(&name).await.unwrap().expect("still held");
        assert_eq!((leader.holder.as_str(), leader.term), ("a", 1));
    }
    let released = store.release(&name, "a", 1, MAX_DURATION).await.unwrap();
    assert_eq!(released.effect, Effect::Released);
    let lease = store.get(&name).await.unwrap().leases.pop().unwrap();
    let century_us = i64::try_from(MAX_DURATION.as_micros()).unwrap();
    assert_eq!(lease.expires_at.0, lease.acquired_at.0 + century_us);
    assert_eq!(
        campaign(&store, &name, "b", LONG).await.effect,
        Effect::Unavailable,
        "held for at least a century"
    );
}

/// `LockOptions::at_least` beyond the bound (`Duration::MAX`, a natural "forever") is refused
/// before anything is written; at the bound the lock holds the name after its release.
pub(crate) async fn lock_at_least_is_bounded(store: Store) {
    let name = unique("lock-atleast-bound");
    let (a, b) = (
        Locks::with_holder(store.clone(), "a").unwrap(),
        Locks::with_holder(store.clone(), "b").unwrap(),
    );
    for at_least in [Duration::MAX, MAX_DURATION + Duration::from_secs(1)] {
        let options = LockOptions::default().at_least(at_least);
        match a.try_lock(&name, options).await {
            Err(Error::Invalid { what, .. }) => assert_eq!(what, "at least"),
            other => panic!("try_lock with at least {at_least:?}: {other:?}"),
        }
        match a.lock(&name, options, Duration::from_secs(1)).await {
            Err(Error::Invalid { what, .. }) => assert_eq!(what, "at least"),
            other => panic!("lock with at least {at_least:?}: {other:?}"),
        }
        assert!(
            store.get(&name).await.unwrap().leases.is_empty(),
            "a refused lock wrote a row"
        );
    }
    let options = LockOptions::default().at_least(MAX_DURATION);
    let guard = a.try_lock(&name, options).await.unwrap().expect("free");
    guard.release().await.unwrap();
    assert!(
        b.try_lock(&name, LockOptions::default())
            .await
            .unwrap()
            .is_none(),
        "released, but held for at least a century"
    );
}
