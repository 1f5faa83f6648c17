//! `Locks::try_lock_many`: a batch takes the free names and only those, raises each name's
//! term as a single lock does, never gives a name to two holders when it races single
//! `try_lock`s, hands out guards that release one by one, and keeps the spreading rule.

use crate::common::unique;
use crate::locks::holder;
use std::collections::HashSet;
use std::time::Duration;
use tenure::{Error, LockOptions, Store};
use tokio::time::{sleep, Instant};

fn names(prefix: &str, n: usize) -> Vec<String> {
    let base = unique(prefix);
    (0..n).map(|i| format!("{base}-{i}")).collect()
}

pub(crate) async fn lock_many_takes_the_free_names_only(store: Store) {
    let names = names("many", 5);
    let (a, b) = (holder(&store, "a"), holder(&store, "b"));
    let options = LockOptions::default();
    // b holds two of the five; a once held (and released) a third, whose term was 1.
    let held_1 = b.try_lock(&names[1], options).await.unwrap().unwrap();
    let held_3 = b.try_lock(&names[3], options).await.unwrap().unwrap();
    a.try_lock(&names[4], options)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();

    let guards = a.try_lock_many(&names, options).await.unwrap();
    let took: Vec<&str> = guards.iter().map(|g| g.name()).collect();
    assert_eq!(
        took,
        [&names[0], &names[2], &names[4]],
        "3 of 5: the free names, in order"
    );
    let terms: Vec<u64> = guards.iter().map(|g| g.term()).collect();
    assert_eq!(terms, [1, 1, 2], "every acquisition raises its name's term");
    assert_eq!(a.held(), 3);
    for g in &guards {
        let info = store.leader(g.name()).await.unwrap().expect("held");
        assert_eq!((info.holder.as_str(), info.term), ("a", g.term()));
        assert!(!g.is_lost());
    }
    // Still b's, untouched.
    for (guard, name) in [(&held_1, &names[1]), (&held_3, &names[3])] {
        let info = store.leader(name).await.unwrap().expect("held");
        assert_eq!((info.holder.as_str(), info.term), ("b", guard.term()));
    }
    // Asked again: nothing more to take (a holds three, b two), and none taken twice.
    assert!(a.try_lock_many(&names, options).await.unwrap().is_empty());
    assert_eq!(a.held(), 3);

    // Each guard releases on its own; the next holder gets the next term.
    let mut guards = guards.into_iter();
    let first = guards.next().unwrap();
    first.release().await.unwrap();
    assert!(store.leader(&names[0]).await.unwrap().is_none());
    assert_eq!(store.leader(&names[2]).await.unwrap().unwrap().holder, "a");
    let next = b
        .try_lock(&names[0], options)
        .await
        .unwrap()
        .expect("freed");
    assert_eq!(next.term(), 2);
    for g in guards {
        let name = g.name().to_string();
        g.release().await.unwrap();
        assert!(store.leader(&name).await.unwrap().is_none());
    }
    assert_eq!(a.held(), 0);

    // A name given twice is taken once; a kept term is succeeded, term + 1, nobody between.
    let kept = a
        .try_lock(&names[2], options.keep_alive(false))
        .await
        .unwrap()
        .unwrap();
    let kept_term = kept.term();
    kept.forget();
    let again = a
        .try_lock_many([&names[2], &names[2]], options)
        .await
        .unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].term(), kept_term + 1);
}

/// A batch and single `try_lock`s of another holder on the same names, at once, round after
/// round: every name has at most one holder, and it is the one the database records.
pub(crate) async fn lock_many_racing_single_locks_never_doubles(store: Store) {
    let (a, b) = (holder(&store, "a"), holder(&store, "b"));
    let options = LockOptions::default();
    for round in 0..8 {
        let names = names(&format!("race{round}"), 12);
        let batch = {
            let (a, names) = (a.clone(), names.clone());
            tokio::spawn(async move { a.try_lock_many(&names, options).await })
        };
        let mut singles = Vec::new();
        for name in names.iter().rev() {
            let (b, name) = (b.clone(), name.clone());
            singles.push(tokio::spawn(
                async move { b.try_lock(&name, options).await },
            ));
        }
        let ours = batch.await.unwrap().unwrap();
        let mut theirs = Vec::new();
        for s in singles {
            theirs.extend(s.await.unwrap().unwrap());
        }
        let a_names: HashSet<&str> = ours.iter().map(|g| g.name()).collect();
        let b_names: HashSet<&str> = theirs.iter().map(|g| g.name()).collect();
        assert!(
            a_names.is_disjoint(&b_names),
            "round {round}: a name with two holders: {:?}",
            a_names.intersection(&b_names).collect::<Vec<_>>()
        );
        assert_eq!(
            a_names.len() + b_names.len(),
            names.len(),
            "round {round}: every free name went to one of them"
        );
        for g in ours.iter().chain(&theirs) {
            let info = store.leader(g.name()).await.unwrap().expect("held");
            assert_eq!(info.term, g.term(), "round {round}: {}", g.name());
            let expected = if a_names.contains(g.name()) { "a" } else { "b" };
            assert_eq!(info.holder, expected, "round {round}: {}", g.name());
        }
        for g in ours.into_iter().chain(theirs) {
            g.release().await.unwrap();
        }
    }
}

/// The batch's guards are kept alive by the process's keep-alive and are lost like single
/// ones: a short ttl outlived several times over, then a pause of one name.
pub(crate) async fn lock_many_guards_renew_and_are_lost_like_single_ones(store: Store) {
    let names = names("kept", 3);
    let a = holder(&store, "a");
    let options = LockOptions::default().ttl(Duration::from_secs(1));
    let guards = a.try_lock_many(&names, options).await.unwrap();
    assert_eq!(guards.len(), 3);
    sleep(Duration::from_millis(2500)).await;
    for g in &guards {
        assert!(!g.is_lost(), "{} renewed", g.name());
        let info = store.leader(g.name()).await.unwrap().expect("renewed");
        assert_eq!(info.term, g.term());
    }
    store.pause(&names[1], "operator").await.unwrap();
    let lost_by = Instant::now() + Duration::from_secs(5);
    while !guards[1].is_lost() {
        assert!(Instant::now() < lost_by, "a paused lock's guard is lost");
        sleep(Duration::from_millis(50)).await;
    }
    assert!(!guards[0].is_lost() && !guards[2].is_lost());
}

/// A live spreading group's name and its shards are refused for a batch as for `tenure lock`,
/// and nothing of the batch is taken.
pub(crate) async fn lock_many_refuses_a_spreading_groups_names(store: Store) {
    let group = unique("group");
    let member = crate::spread::join(&store, &group, "m").await;
    let live_by = Instant::now() + Duration::from_secs(10);
    while !tenure::spread::groups(&store)
        .await
        .unwrap()
        .contains_key(&group)
    {
        assert!(Instant::now() < live_by, "the group is live");
        sleep(Duration::from_millis(50)).await;
    }
    let free = unique("free");
    let a = holder(&store, "a");
    for bad in [group.clone(), format!("{group}/0")] {
        let err = a
            .try_lock_many([free.as_str(), bad.as_str()], LockOptions::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::Invalid { what: "name", value, .. } if *value == bad),
            "{err:?}"
        );
        assert!(
            store.get(&free).await.unwrap().leases.is_empty(),
            "nothing taken"
        );
    }
    // A name that only looks like a shard (beyond the group's count) is an ordinary name.
    let beyond = format!("{group}/1000");
    let took = a
        .try_lock_many([&free, &beyond], LockOptions::default())
        .await
        .unwrap();
    assert_eq!(took.len(), 2);
    drop(member);
}
