//! Consul's contracts at the edges (issue 25): a key's index moves whenever its answer
//! changes (also when tenure changes the lock under it), and a release is checked against the
//! session's liveness and the key's lock at the database's now, as an acquire is.

use crate::common::{unique, until_db_passes};
use crate::consul::{call, get, put, session};
use crate::ops::campaign;
use std::time::Duration;
use tenure::consul::{Behavior, PutMode, Reply, Request};
use tenure::{DbTime, Effect, Store};

const LONG: u64 = 60_000;

/// The end of session `id`, by the database's clock.
async fn session_end(store: &Store, id: &str) -> DbTime {
    match call(store, Request::Session(id.to_string())).await.reply {
        Reply::Session(Some(s)) => s.expires_at,
        other => panic!("session {id}: {other:?}"),
    }
}

// === Consul: the index moves whenever a key's answer changes ===

/// `S` holds `key`; `change` takes the lock from it through tenure's own operations; then the
/// store-wide index (what blocking queries wait on) and the key's `ModifyIndex` have moved, and
/// the key shows no session.
async fn index_moves_after(store: &Store, what: &str, change: impl AsyncFnOnce(&Store, &str)) {
    let key = unique("consul-index");
    let a = session(store, 0, Duration::from_secs(30), Behavior::Release).await;
    assert!(put(store, &key, "a", PutMode::Acquire(a.clone())).await);
    let before = call(
        store,
        Request::Get {
            key: key.clone(),
            recurse: false,
        },
    )
    .await;
    let Reply::Entries(entries) = &before.reply else {
        panic!("{before:?}")
    };
    let modified = entries[0].modify_index;
    assert_eq!(entries[0].session.as_deref(), Some(a.as_str()));
    change(store, &key).await;
    // The poller's read comes first: it is what wakes the blocking queries.
    let index = call(store, Request::Index).await.index;
    assert!(
        index > before.index,
        "{what}: the index stayed at {index} although the key's lock changed"
    );
    let entry = get(store, &key).await.unwrap();
    assert_eq!(entry.session, None, "{what}: the key still shows {a}");
    assert!(
        entry.modify_index > modified,
        "{what}: the key's ModifyIndex stayed at {modified}"
    );
    assert_eq!(entry.value, b"a", "{what}: the value is kept");
}

pub(crate) async fn consul_admin_changes_move_the_index(store: Store) {
    index_moves_after(&store, "demote", async |s: &Store, key: &str| {
        s.demote(key, false, "admin").await.unwrap();
    })
    .await;
    index_moves_after(&store, "demote --now", async |s: &Store, key: &str| {
        s.demote(key, true, "admin").await.unwrap();
    })
    .await;
    index_moves_after(&store, "handover --now", async |s: &Store, key: &str| {
        s.handover(key, "someone", true, "admin").await.unwrap();
    })
    .await;
    // A takeover by a holder that is not a Consul session, once the demoted lease ran out.
    index_moves_after(&store, "takeover", async |s: &Store, key: &str| {
        s.demote(key, true, "admin").await.unwrap();
        let taken = campaign(s, key, "native", LONG).await;
        assert!(matches!(taken.effect, Effect::Acquired { .. }));
    })
    .await;
}

/// A session whose time ran out no longer shows as the key's holder, and the index has moved
/// before any read shows that, with no reap in between.
pub(crate) async fn consul_expiry_moves_the_index(store: Store) {
    let key = unique("consul-expiry-index");
    let a = session(&store, 0, Duration::from_secs(3), Behavior::Release).await;
    assert!(put(&store, &key, "a", PutMode::Acquire(a.clone())).await);
    let before = call(&store, Request::Index).await.index;
    let modified = get(&store, &key).await.unwrap().modify_index;
    until_db_passes(&store, session_end(&store, &a).await).await;
    let index = call(&store, Request::Index).await.index;
    assert!(index > before, "expiry: the index stayed at {index}");
    let entry = get(&store, &key).await.unwrap();
    assert_eq!(entry.session, None);
    assert!(entry.modify_index > modified);
}

/// Pause and a graceful handover end the lock when its session next renews (the holder steps
/// down, as every holder does): from then on the key shows no session, at a new index.
pub(crate) async fn consul_step_down_moves_the_index(store: Store) {
    for (what, graceful) in [("pause", false), ("handover", true)] {
        let key = unique("consul-stepdown");
        let a = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
        assert!(put(&store, &key, "a", PutMode::Acquire(a.clone())).await);
        if graceful {
            store.handover(&key, "next", false, "admin").await.unwrap();
        } else {
            store.pause(&key, "admin").await.unwrap();
        }
        let before = call(&store, Request::Index).await.index;
        let renewed = call(&store, Request::RenewSession(a.clone())).await;
        assert!(matches!(renewed.reply, Reply::Session(Some(_))), "{what}");
        assert!(renewed.index > before, "{what}: the renewal moved no index");
        assert_eq!(get(&store, &key).await.unwrap().session, None, "{what}");
        assert!(
            store.leader(&key).await.unwrap().is_none(),
            "{what}: the session stepped down"
        );
    }
}

// === Consul: a stale release ===

/// After tenure took the lock from `S1`, `?release=S1` answers false and writes nothing.
pub(crate) async fn consul_stale_release_is_refused(store: Store) {
    for (what, immediate_handover) in [("demote", false), ("handover --now", true)] {
        let key = unique("consul-stale-release");
        let a = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
        assert!(put(&store, &key, "a", PutMode::Acquire(a.clone())).await);
        if immediate_handover {
            store
                .handover(&key, "someone", true, "admin")
                .await
                .unwrap();
        } else {
            store.demote(&key, false, "admin").await.unwrap();
        }
        let lease_before = store.get(&key).await.unwrap().leases.pop().unwrap();
        assert!(
            !put(&store, &key, "overwritten", PutMode::Release(a.clone())).await,
            "{what}: a release by a session that lost the lock was accepted"
        );
        let entry = get(&store, &key).await.unwrap();
        assert_eq!(
            entry.value, b"a",
            "{what}: the stale release wrote its value"
        );
        assert_eq!(entry.session, None);
        let lease = store.get(&key).await.unwrap().leases.pop().unwrap();
        assert_eq!(
            lease, lease_before,
            "{what}: the stale release changed the lease"
        );
    }
}

/// A session whose time ran out (not yet reaped) cannot release its key: the answer is false,
/// and the lock-delay still counts from the session's end, so nobody acquires before it.
pub(crate) async fn consul_expired_session_cannot_release(store: Store) {
    const LOCK_DELAY_MS: u64 = 10_000;
    let key = unique("consul-expired-release");
    // The windows are wide enough for a loaded machine: `a` acquires well within its 3 s, and
    // the release and the refused acquire after its end take far less than the 10 s lock-delay.
    let b = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
    let a = session(
        &store,
        LOCK_DELAY_MS,
        Duration::from_secs(3),
        Behavior::Release,
    )
    .await;
    assert!(put(&store, &key, "a", PutMode::Acquire(a.clone())).await);
    let end = session_end(&store, &a).await;
    until_db_passes(&store, end).await;
    assert!(
        !put(&store, &key, "late", PutMode::Release(a.clone())).await,
        "an expired session released its key"
    );
    assert_eq!(get(&store, &key).await.unwrap().value, b"a");
    let acquired = call(
        &store,
        Request::Put {
            key: key.clone(),
            value: b"b".to_vec(),
            flags: 0,
            mode: PutMode::Acquire(b.clone()),
        },
    )
    .await;
    assert_eq!(
        acquired.reply,
        Reply::Done(false),
        "acquired within the lock-delay of the expired session"
    );
    let lease = store.get(&key).await.unwrap().leases.pop().unwrap();
    assert!(lease.holder.is_none());
    assert!(
        lease.expires_at >= end.plus_ms(LOCK_DELAY_MS),
        "lock-delay counts from the session's end {end}: the lease is free from {}",
        lease.expires_at
    );
    until_db_passes(&store, lease.expires_at).await;
    assert!(put(&store, &key, "b", PutMode::Acquire(b.clone())).await);
}
