//! Consul's index contract as its blocking queries read it (issue 36): a read answers with the
//! index of what it read — one key's `ModifyIndex`, a prefix's highest with its deletes, the
//! sessions' table index — so that a watcher of one key wakes only when that key changes; a
//! write that changes nothing moves nothing; a TTL session lives twice its TTL, as Consul's.

use crate::common::{options, unique, url_of};
use crate::consul::{call, put, session};
use std::time::Duration;
use tenure::consul::{
    new_session_id, Behavior, Consul, Error, PutMode, Reply, Request, SessionSpec,
};
use tenure::Store;

/// A store of its own on `store`'s database (a fresh table prefix): the Consul indexes are one
/// per database, and the assertions below compare them exactly, so no other test may write.
async fn alone(store: &Store) -> Store {
    let prefix = format!("ci{}_", unique("").trim_start_matches('-').to_lowercase());
    Store::connect_with(&url_of(store), options().table_prefix(&prefix))
        .await
        .expect("a store with a fresh prefix")
}

fn get(key: &str, recurse: bool) -> Request {
    Request::Get {
        key: key.to_string(),
        recurse,
    }
}

fn modify_index(reply: &Reply) -> u64 {
    match reply {
        Reply::Entries(e) if e.len() == 1 => e[0].modify_index,
        other => panic!("one entry: {other:?}"),
    }
}

/// One key's read answers with that key's `ModifyIndex`, however far the store moved since; a
/// missing key with the index of the last change to any key (deletes included); never 0.
pub(crate) async fn consul_a_key_answers_with_its_own_index(store: Store) {
    let store = alone(&store).await;
    let (a, b) = (unique("idx-a"), unique("idx-b"));
    let set = PutMode::Set { cas: None };
    assert!(put(&store, &a, "1", set.clone()).await);
    assert!(put(&store, &b, "1", set.clone()).await);
    assert!(put(&store, &b, "2", set.clone()).await);
    let read = call(&store, get(&a, false)).await;
    assert_eq!(read.index, modify_index(&read.reply), "a's own index");
    assert!(
        read.index < read.store_index,
        "b's writes moved the store ({}) but not a ({})",
        read.store_index,
        read.index
    );
    // The store's index is what the answer's blocking loop waits to pass.
    let b_now = call(&store, get(&b, false)).await;
    assert_eq!(
        b_now.index, read.store_index,
        "b's last write is the store's last"
    );

    let missing = call(&store, get(&unique("idx-none"), false)).await;
    assert_eq!(missing.reply, Reply::Entries(vec![]));
    assert_eq!(missing.index, b_now.index, "the keys' table index");
    let delete = Request::Delete {
        key: a.clone(),
        recurse: false,
        cas: None,
    };
    let deleted = call(&store, delete).await;
    let missing = call(&store, get(&unique("idx-none"), false)).await;
    assert_eq!(
        missing.index, deleted.index,
        "a delete is a change of the keys"
    );
    assert!(missing.index >= 1);
}

/// A write that changes nothing — the holder acquiring its own lock again with the same value,
/// a set to the value the key has — succeeds without moving the key's index or the store's,
/// as Consul's (Patroni re-acquires its leader key every loop; its replicas block on it).
pub(crate) async fn consul_a_write_that_changes_nothing_moves_nothing(store: Store) {
    let store = alone(&store).await;
    let key = unique("idx-same");
    let s = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
    assert!(put(&store, &key, "leader-1", PutMode::Acquire(s.clone())).await);
    let before = call(&store, get(&key, false)).await;
    assert!(put(&store, &key, "leader-1", PutMode::Acquire(s.clone())).await);
    let again = call(&store, get(&key, false)).await;
    assert_eq!(
        again.index, before.index,
        "re-acquiring with the same value"
    );
    assert_eq!(
        again.store_index, before.store_index,
        "the store did not move"
    );
    assert_eq!(again.reply, before.reply);
    // A new value is a change; the same value set again is not.
    assert!(put(&store, &key, "leader-2", PutMode::Acquire(s.clone())).await);
    let changed = call(&store, get(&key, false)).await;
    assert!(changed.index > before.index, "a new value moves the key");
    let plain = unique("idx-plain");
    assert!(put(&store, &plain, "v", PutMode::Set { cas: None }).await);
    let first = call(&store, get(&plain, false)).await;
    assert!(put(&store, &plain, "v", PutMode::Set { cas: None }).await);
    assert_eq!(call(&store, get(&plain, false)).await.index, first.index);
}

/// A prefix answers with the highest index under it, deletes included (Consul's tombstones):
/// deleting a key under it moves its index, and a change elsewhere does not.
pub(crate) async fn consul_a_prefix_answers_with_its_changes_and_deletes(store: Store) {
    let store = alone(&store).await;
    let dir = format!("{}/", unique("idx-dir"));
    let other = format!("{}/", unique("idx-other"));
    let set = PutMode::Set { cas: None };
    assert!(put(&store, &format!("{dir}a"), "1", set.clone()).await);
    assert!(put(&store, &format!("{dir}b"), "1", set.clone()).await);
    let listed = call(&store, get(&dir, true)).await;
    let Reply::Entries(entries) = &listed.reply else {
        panic!("{listed:?}")
    };
    let highest = entries.iter().map(|e| e.modify_index).max().unwrap();
    assert_eq!(listed.index, highest);
    assert!(put(&store, &format!("{other}x"), "1", set.clone()).await);
    assert_eq!(
        call(&store, get(&dir, true)).await.index,
        listed.index,
        "a change elsewhere does not move this prefix"
    );
    let delete = Request::Delete {
        key: format!("{dir}b"),
        recurse: false,
        cas: None,
    };
    let deleted = call(&store, delete).await;
    let after = call(&store, get(&dir, true)).await;
    assert_eq!(
        after.index, deleted.index,
        "the delete is the prefix's last change, though its key is gone"
    );
    let Reply::Entries(left) = &after.reply else {
        panic!("{after:?}")
    };
    assert_eq!(left.len(), 1);
    assert!(after.index > left[0].modify_index);
}

/// Session reads answer with the sessions' table index: creating and ending a session move it,
/// renewing one does not.
pub(crate) async fn consul_session_reads_answer_with_the_sessions_index(store: Store) {
    let store = alone(&store).await;
    let s = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
    let read = call(&store, Request::Session(s.clone())).await;
    let Reply::Session(Some(shown)) = &read.reply else {
        panic!("{read:?}")
    };
    assert!(read.index >= shown.create_index);
    let key = unique("idx-s");
    assert!(put(&store, &key, "v", PutMode::Set { cas: None }).await);
    let later = call(&store, Request::Sessions(None)).await;
    assert_eq!(later.index, read.index, "a key's change is not a session's");
    call(&store, Request::DestroySession(s.clone())).await;
    let ended = call(&store, Request::Sessions(None)).await;
    assert!(ended.index > read.index, "ending a session moves it");
}

/// A TTL session lives twice its TTL after each renewal, as Consul's (SessionTTLMultiplier);
/// the shortest TTL is the handle's minimum, and one below it is refused in Consul's words.
pub(crate) async fn consul_a_ttl_session_lives_twice_its_ttl(store: Store) {
    let consul = Consul::new(store.clone()).session_ttl_min(Duration::from_secs(2));
    let spec = |ttl: u64| SessionSpec {
        name: "ttl".into(),
        node: unique("node"),
        ttl: Some(Duration::from_secs(ttl)),
        lock_delay: Duration::ZERO,
        behavior: Behavior::Delete,
    };
    let create = |ttl| Request::CreateSession {
        id: new_session_id(),
        spec: spec(ttl),
        node_lease: Duration::from_secs(30),
    };
    let made = consul.request(&create(3), "test").await.unwrap();
    let Reply::Session(Some(s)) = &made.reply else {
        panic!("{made:?}")
    };
    assert_eq!(s.ttl, Some(Duration::from_secs(3)));
    assert_eq!(
        s.expires_at.ms_since(made.now),
        6_000,
        "twice the TTL from the database's instant of the create"
    );
    match consul.request(&create(1), "test").await {
        Err(Error::SessionTtl { ttl, min, .. }) => {
            assert_eq!((ttl, min), (Duration::from_secs(1), Duration::from_secs(2)));
        }
        other => panic!("a TTL below the minimum: {other:?}"),
    }
    let err = Consul::new(store.clone())
        .request(&create(5), "test")
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Invalid Session TTL '5000000000', must be between [10s=24h0m0s]"
    );
}
