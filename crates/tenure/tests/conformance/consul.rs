//! The Consul layer (sessions, keys, acquire/release, lock-delay) on one backend.

use crate::common::{unique, until_db_passes};
use std::time::Duration;
use tenure::consul::{
    new_session_id, Answer, Behavior, Consul, Entry, Error as Refusal, PutMode, Reply, Request,
    Session, SessionSpec,
};
use tenure::{Error, Op, Store};
use tokio::time::sleep;

const ACTOR: &str = "conformance";

pub(crate) async fn call(store: &Store, request: Request) -> Answer {
    consul(store, &request).await.unwrap()
}

/// One request through the Consul layer's handle on `store`.
pub(crate) async fn consul(store: &Store, request: &Request) -> tenure::consul::Result<Answer> {
    Consul::new(store.clone()).request(request, ACTOR).await
}

/// A session of `node` that lives `lease` past each heartbeat (no TTL), so tests need not
/// wait Consul's 10 s minimum TTL.
pub(crate) async fn session(
    store: &Store,
    lock_delay_ms: u64,
    lease: Duration,
    behavior: Behavior,
) -> String {
    session_on(store, &unique("node"), lock_delay_ms, lease, behavior).await
}

/// A session of `node`, which lives `lease` past each heartbeat of its node: each test has
/// nodes of its own, or one test's heartbeats would keep another's sessions alive.
async fn session_on(
    store: &Store,
    node: &str,
    lock_delay_ms: u64,
    lease: Duration,
    behavior: Behavior,
) -> String {
    let id = new_session_id();
    let spec = SessionSpec {
        name: "test".into(),
        node: node.into(),
        ttl: None,
        lock_delay: Duration::from_millis(lock_delay_ms),
        behavior,
    };
    let answer = call(
        store,
        Request::CreateSession {
            id: id.clone(),
            spec,
            node_lease: lease,
        },
    )
    .await;
    assert!(matches!(answer.reply, Reply::Session(Some(ref s)) if s.id == id));
    id
}

pub(crate) async fn put(store: &Store, key: &str, value: &str, mode: PutMode) -> bool {
    let request = Request::Put {
        key: key.into(),
        value: value.as_bytes().to_vec(),
        flags: 7,
        mode,
    };
    match call(store, request).await.reply {
        Reply::Done(done) => done,
        other => panic!("{other:?}"),
    }
}

pub(crate) async fn get(store: &Store, key: &str) -> Option<Entry> {
    let request = Request::Get {
        key: key.into(),
        recurse: false,
    };
    match call(store, request).await.reply {
        Reply::Entries(mut e) => e.pop(),
        other => panic!("{other:?}"),
    }
}

/// The guide's flow: acquire with a body, a rival refused, release, the rival acquires; the
/// lock is the key's lease and `LockIndex` its term.
pub(crate) async fn consul_acquire_release_is_the_lease(store: Store) {
    let key = unique("service/leader");
    let (a, b) = (
        session(&store, 15_000, Duration::from_secs(30), Behavior::Release).await,
        session(&store, 15_000, Duration::from_secs(30), Behavior::Release).await,
    );
    assert!(put(&store, &key, "10.0.0.1", PutMode::Acquire(a.clone())).await);
    assert!(!put(&store, &key, "10.0.0.2", PutMode::Acquire(b.clone())).await);
    let entry = get(&store, &key).await.unwrap();
    assert_eq!(entry.session.as_deref(), Some(a.as_str()));
    assert_eq!(entry.lock_index, 1);
    assert_eq!(entry.value, b"10.0.0.1", "a refused acquire writes nothing");
    assert_eq!(entry.flags, 7);
    let leader = store
        .leader(&key)
        .await
        .unwrap()
        .expect("the lock is a lease");
    assert_eq!((leader.holder.as_str(), leader.term), (a.as_str(), 1));
    assert_eq!(leader.metadata.as_deref(), Some("10.0.0.1"));
    // The holder acquiring again keeps its lock index.
    assert!(put(&store, &key, "10.0.0.1:80", PutMode::Acquire(a.clone())).await);
    assert_eq!(get(&store, &key).await.unwrap().lock_index, 1);
    // Only the holder releases.
    assert!(!put(&store, &key, "x", PutMode::Release(b.clone())).await);
    assert!(put(&store, &key, "", PutMode::Release(a.clone())).await);
    let entry = get(&store, &key).await.unwrap();
    assert_eq!(entry.session, None);
    assert!(store.leader(&key).await.unwrap().is_none());
    // An explicit release has no lock-delay.
    assert!(put(&store, &key, "10.0.0.2", PutMode::Acquire(b.clone())).await);
    let entry = get(&store, &key).await.unwrap();
    assert_eq!(
        (entry.session.as_deref(), entry.lock_index),
        (Some(b.as_str()), 2)
    );
    assert!(entry.modify_index > entry.create_index);
}

/// A destroyed session's lock stays unavailable for its lock-delay, then goes to the next. The
/// lock-delay (3 s) leaves a loaded machine room for the refused acquire; the next one waits
/// for the database's clock to pass it, not for a fixed time.
pub(crate) async fn consul_destroy_keeps_lock_delay(store: Store) {
    let key = unique("lockdelay");
    let a = session(&store, 3_000, Duration::from_secs(30), Behavior::Release).await;
    let b = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
    assert!(put(&store, &key, "a", PutMode::Acquire(a.clone())).await);
    let destroyed = call(&store, Request::DestroySession(a.clone())).await;
    assert_eq!(destroyed.reply, Reply::Done(true));
    assert_eq!(get(&store, &key).await.unwrap().session, None);
    assert!(
        !put(&store, &key, "b", PutMode::Acquire(b.clone())).await,
        "within the lock-delay"
    );
    let lease = store.get(&key).await.unwrap().leases.pop().unwrap();
    assert!(lease.holder.is_none());
    assert!(lease.expires_at.0 >= destroyed.now.0 + 3_000_000 - 1_000);
    until_db_passes(&store, lease.expires_at).await;
    assert!(put(&store, &key, "b", PutMode::Acquire(b.clone())).await);
    assert_eq!(get(&store, &key).await.unwrap().lock_index, 2);
    // An acquire by a session that has ended is refused, and writes nothing.
    let refused = consul(
        &store,
        &Request::Put {
            key: key.clone(),
            value: b"a".to_vec(),
            flags: 0,
            mode: PutMode::Acquire(a.clone()),
        },
    )
    .await;
    assert!(matches!(refused, Err(Refusal::InvalidSession(ref s)) if *s == a));
    assert_eq!(get(&store, &key).await.unwrap().value, b"b");
}

/// A session that is not renewed ends exactly when its time runs out (the database's clock):
/// its lock is free for nobody until then plus the lock-delay; a reap ends it for good.
///
/// Decided by the database's clock, not the test's: the checks of the expired session start once
/// the database has passed its expiry, and its lock is taken once the database has passed the
/// end of the lock-delay. The windows leave a loaded machine room: the session (3 s, created
/// last) acquires well within its time, and the lock-delay (10 s) covers the checks in between
/// (with fixed sleeps of 1.3 s and 1.2 s around a 1 s lock-delay, a slow check landed after the
/// lock-delay and took the lock it must not get).
pub(crate) async fn consul_expired_session_loses_its_lock(store: Store) {
    let key = unique("expiry");
    let lock_delay_ms = 10_000;
    let b = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
    let a = session(
        &store,
        lock_delay_ms,
        Duration::from_secs(3),
        Behavior::Release,
    )
    .await;
    assert!(put(&store, &key, "a", PutMode::Acquire(a.clone())).await);
    let session_expiry = match call(&store, Request::Session(a.clone())).await.reply {
        Reply::Session(Some(s)) => s.expires_at,
        other => panic!("{other:?}"),
    };
    let lease = store.get(&key).await.unwrap().leases.pop().unwrap();
    assert!(
        lease.expires_at <= session_expiry,
        "the lock never outlives its session"
    );
    until_db_passes(&store, session_expiry).await;
    // Expired: shown without a session, and not yet acquirable (lock-delay from the expiry).
    let shown = get(&store, &key).await.unwrap();
    assert_eq!(
        shown.session,
        None,
        "session expiry {session_expiry:?}, lease then {lease:?}, lease now {:?}, {shown:?}",
        store.get(&key).await.unwrap()
    );
    assert_eq!(
        call(&store, Request::Session(a.clone())).await.reply,
        Reply::Session(None)
    );
    assert!(!put(&store, &key, "b", PutMode::Acquire(b.clone())).await);
    let renewed = call(&store, Request::RenewSession(a.clone())).await;
    assert_eq!(
        renewed.reply,
        Reply::Session(None),
        "an ended session is not renewed"
    );
    until_db_passes(&store, session_expiry.plus_ms(lock_delay_ms)).await;
    assert!(put(&store, &key, "b", PutMode::Acquire(b.clone())).await);
    // Ended for good: the first read that saw it ended reaped it (a read settles what changed
    // without a write before answering), and a reap finds nothing left of it.
    call(&store, Request::Reap { limit: 1_000 }).await;
    let Reply::Sessions(live) = call(&store, Request::Sessions(None)).await.reply else {
        panic!("sessions")
    };
    assert!(live.iter().all(|s| s.id != a), "{a} still listed");
    let entry = get(&store, &key).await.unwrap();
    assert_eq!(
        (entry.session.as_deref(), entry.lock_index),
        (Some(b.as_str()), 2)
    );
}

/// A heartbeat renews the session and its locks to the same instant, so heartbeats keep a lock
/// past its session's first lease; a lock demoted through tenure is no longer the session's.
///
/// Decided by the database's clock, not the test's: the heartbeats go on until the database's
/// instant of one has passed the session's first expiry. Each must land before the expiry it
/// renews, which the lease (3 s, for heartbeats every 300 ms) leaves to a loaded machine.
pub(crate) async fn consul_heartbeat_and_demote(store: Store) {
    let key = unique("heartbeat");
    let node = unique("node");
    let lease = Duration::from_secs(3);
    let a = session_on(&store, &node, 0, lease, Behavior::Release).await;
    assert!(put(&store, &key, "a", PutMode::Acquire(a.clone())).await);
    let first_expiry = live_session(&store, &a).await.expires_at;
    let mut expiry = first_expiry;
    let mut heartbeats = 0;
    loop {
        sleep(Duration::from_millis(300)).await;
        let beat = call(
            &store,
            Request::Heartbeat {
                node: node.clone(),
                lease,
            },
        )
        .await;
        heartbeats += 1;
        assert!(
            beat.now < expiry,
            "heartbeat {heartbeats} landed {} ms after the session's expiry: the machine \
             stalled for more than the 3 s lease",
            beat.now.ms_since(expiry)
        );
        let renewed = live_session(&store, &a).await.expires_at;
        assert!(
            renewed > expiry,
            "heartbeat {heartbeats} renewed the session"
        );
        expiry = renewed;
        if beat.now > first_expiry {
            break;
        }
        assert!(
            heartbeats < 200,
            "the database's clock did not pass the first lease in 200 heartbeats"
        );
    }
    let entry = get(&store, &key).await.unwrap();
    assert_eq!(
        entry.session.as_deref(),
        Some(a.as_str()),
        "kept alive past its first lease by {heartbeats} heartbeats"
    );
    let session_expiry = live_session(&store, &a).await.expires_at;
    let held = store.get(&key).await.unwrap().leases.pop().unwrap();
    assert_eq!(held.expires_at, session_expiry);
    store.demote(&key, false, "admin").await.unwrap();
    assert_eq!(get(&store, &key).await.unwrap().session, None);
    call(&store, Request::Heartbeat { node, lease }).await;
    let after = store.get(&key).await.unwrap().leases.pop().unwrap();
    assert!(
        after.holder.is_none(),
        "a renewal never takes a demoted lock back"
    );
}

/// Session `id`, which must be live.
async fn live_session(store: &Store, id: &str) -> Session {
    match call(store, Request::Session(id.to_string())).await.reply {
        Reply::Session(Some(s)) => s,
        other => panic!("session {id} is not live: {other:?}"),
    }
}

/// Check-and-set, flags, recursive reads and deletes, and `Behavior::Delete`.
pub(crate) async fn consul_cas_delete_and_behavior(store: Store) {
    let dir = unique("dir");
    let k = |s: &str| format!("{dir}/{s}");
    let set = |cas| PutMode::Set { cas };
    assert!(put(&store, &k("a"), "1", set(Some(0))).await);
    assert!(
        !put(&store, &k("a"), "2", set(Some(0))).await,
        "cas 0: only if absent"
    );
    let index = get(&store, &k("a")).await.unwrap().modify_index;
    assert!(!put(&store, &k("a"), "2", set(Some(index + 100))).await);
    assert!(put(&store, &k("a"), "2", set(Some(index))).await);
    assert!(
        !put(&store, &k("zz"), "2", set(Some(5))).await,
        "cas on a missing key"
    );
    assert!(put(&store, &k("b"), "3", set(None)).await);
    let d = session(&store, 0, Duration::from_secs(30), Behavior::Delete).await;
    assert!(put(&store, &k("c"), "eph", PutMode::Acquire(d.clone())).await);
    let all = match call(
        &store,
        Request::Get {
            key: format!("{dir}/"),
            recurse: true,
        },
    )
    .await
    .reply
    {
        Reply::Entries(e) => e.into_iter().map(|e| e.key).collect::<Vec<_>>(),
        other => panic!("{other:?}"),
    };
    assert_eq!(all, vec![k("a"), k("b"), k("c")]);
    call(&store, Request::DestroySession(d)).await;
    assert!(get(&store, &k("c")).await.is_none(), "Behavior::Delete");
    let index = get(&store, &k("a")).await.unwrap().modify_index;
    let del = |key: String, recurse, cas| Request::Delete { key, recurse, cas };
    assert_eq!(
        call(&store, del(k("a"), false, Some(index + 1)))
            .await
            .reply,
        Reply::Done(false)
    );
    assert_eq!(
        call(&store, del(k("a"), false, Some(0))).await.reply,
        Reply::Done(false)
    );
    assert_eq!(
        call(&store, del(k("a"), false, Some(index))).await.reply,
        Reply::Done(true)
    );
    assert!(get(&store, &k("a")).await.is_none());
    call(&store, del(format!("{dir}/"), true, None)).await;
    assert!(get(&store, &k("b")).await.is_none());
    // Bad keys and values are refused before anything is written.
    for bad in ["", "/a", "a/../b", "a\0b"] {
        let r = consul(
            &store,
            &Request::Put {
                key: bad.into(),
                value: vec![],
                flags: 0,
                mode: set(None),
            },
        )
        .await;
        assert!(
            matches!(r, Err(Refusal::Store(Error::Invalid { what: "key", .. }))),
            "{bad:?}: {r:?}"
        );
    }
    let big = Request::Put {
        key: k("big"),
        value: vec![0; 512 * 1024 + 1],
        flags: 0,
        mode: set(None),
    };
    assert!(matches!(
        consul(&store, &big).await,
        Err(Refusal::Store(Error::Invalid { what: "value", .. }))
    ));
    assert!(get(&store, &k("big")).await.is_none());
}

/// Every acquisition raises the lock index by one, and so the lease's term: a fencing token.
pub(crate) async fn consul_lock_index_is_the_term(store: Store) {
    let key = unique("term");
    let mut last = 0;
    for _ in 0..3 {
        let s = session(&store, 0, Duration::from_secs(30), Behavior::Release).await;
        assert!(put(&store, &key, "", PutMode::Acquire(s.clone())).await);
        let entry = get(&store, &key).await.unwrap();
        assert_eq!(entry.lock_index, last + 1);
        last = entry.lock_index;
        // A stale release of the old term by tenure's own release never touches it.
        let stale = Op::Release {
            candidate: s.clone(),
            term: last - 1,
            at_least_ms: 0,
            reason: None,
            purpose: tenure::Purpose::Election,
        };
        store.apply(&key, &stale, ACTOR).await.ok();
        assert_eq!(store.leader(&key).await.unwrap().unwrap().term, last);
        call(&store, Request::DestroySession(s)).await;
    }
}

/// Eight sessions race for one key, three rounds: exactly one acquire answers `true` each
/// round, the key names that session, and `LockIndex` rises by one. Then a check-and-set race
/// on one `ModifyIndex` has exactly one winner, and a destroy racing the rivals' acquires
/// (lock-delay 0) hands the key to at most one of them, with the next `LockIndex`.
pub(crate) async fn consul_racing_writers_have_one_winner(store: Store) {
    let key = unique("race/leader");
    let mut sessions = Vec::new();
    for _ in 0..8 {
        sessions.push(session(&store, 0, Duration::from_secs(30), Behavior::Release).await);
    }
    let race = |racers: &[String], mode: fn(&str) -> PutMode| {
        let handles: Vec<_> = racers
            .iter()
            .map(|s| {
                let (store, key, s) = (store.clone(), key.clone(), s.clone());
                tokio::spawn(async move {
                    let won = put(&store, &key, &s, mode(&s)).await;
                    (s, won)
                })
            })
            .collect();
        async move {
            let mut winners = Vec::new();
            for h in handles {
                let (s, won) = h.await.unwrap();
                if won {
                    winners.push(s);
                }
            }
            winners
        }
    };
    for round in 1..=3u64 {
        let winners = race(&sessions, |s| PutMode::Acquire(s.to_string())).await;
        assert_eq!(winners.len(), 1, "round {round}: {winners:?}");
        let entry = get(&store, &key).await.unwrap();
        assert_eq!(entry.session.as_deref(), Some(winners[0].as_str()));
        assert_eq!(entry.lock_index, round);
        assert_eq!(String::from_utf8(entry.value).unwrap(), winners[0]);
        assert!(put(&store, &key, "", PutMode::Release(winners[0].clone())).await);
    }

    let seen = get(&store, &key).await.unwrap().modify_index;
    let handles: Vec<_> = sessions
        .iter()
        .map(|s| {
            let (store, key, s) = (store.clone(), key.clone(), s.clone());
            tokio::spawn(
                async move { put(&store, &key, &s, PutMode::Set { cas: Some(seen) }).await },
            )
        })
        .collect();
    let mut cas_winners = 0;
    for h in handles {
        cas_winners += usize::from(h.await.unwrap());
    }
    assert_eq!(cas_winners, 1, "one check-and-set on index {seen} wins");

    let holder = sessions[0].clone();
    assert!(put(&store, &key, &holder, PutMode::Acquire(holder.clone())).await);
    let destroy = {
        let (store, holder) = (store.clone(), holder.clone());
        tokio::spawn(async move { call(&store, Request::DestroySession(holder)).await })
    };
    let winners = race(&sessions[1..], |s| PutMode::Acquire(s.to_string())).await;
    destroy.await.unwrap();
    assert!(winners.len() <= 1, "{winners:?}");
    let entry = get(&store, &key).await.unwrap();
    assert_eq!(entry.session, winners.first().cloned());
    let expected = if winners.is_empty() { 4 } else { 5 };
    assert_eq!(entry.lock_index, expected);
}
