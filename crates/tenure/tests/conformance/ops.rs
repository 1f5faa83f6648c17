//! The operations of the operations table (`docs/design-notes.md`), through `Store`, on one
//! backend.

use crate::common::unique;
use std::time::Duration;
use tenure::{Effect, Error, StepDownReason, Store};

const LONG: u64 = 60_000;

pub(crate) async fn campaign(store: &Store, name: &str, who: &str, ttl_ms: u64) -> tenure::Applied {
    let op = tenure::Op::Campaign {
        candidate: who.to_string(),
        term: None,
        ttl_ms,
        metadata: Some(format!("addr of {who}")),
        purpose: tenure::Purpose::Election,
    };
    store.apply(name, &op, who).await.expect("campaign")
}

/// The campaign of a holder that believes it holds `term`: the only kind that renews.
pub(crate) async fn renew(
    store: &Store,
    name: &str,
    who: &str,
    term: u64,
    ttl_ms: u64,
) -> tenure::Applied {
    let op = tenure::Op::Campaign {
        candidate: who.to_string(),
        term: Some(term),
        ttl_ms,
        metadata: Some(format!("addr of {who}")),
        purpose: tenure::Purpose::Election,
    };
    store.apply(name, &op, who).await.expect("campaign")
}

fn term(applied: &tenure::Applied) -> u64 {
    applied.lease.as_ref().expect("row").term
}

pub(crate) async fn acquire_renew_and_leader(store: Store) {
    let name = unique("acq");
    let a = campaign(&store, &name, "a", LONG).await;
    assert_eq!(
        a.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(term(&a), 1);
    let lease = a.lease.clone().unwrap();
    assert_eq!(lease.holder.as_deref(), Some("a"));
    assert_eq!(lease.expires_at, a.now.plus_ms(LONG));

    // SQLite's clock counts milliseconds: let one pass, so the renewal must move the expiry.
    tokio::time::sleep(Duration::from_millis(2)).await;
    let renewed = renew(&store, &name, "a", 1, LONG).await;
    assert_eq!(renewed.effect, Effect::Renewed);
    assert_eq!(term(&renewed), 1);
    assert!(renewed.lease.as_ref().unwrap().expires_at > lease.expires_at);
    // The holder id alone renews nothing: a second process or task with the same id, or a
    // stale term, finds the lease held.
    for named in [None, Some(0)] {
        let op = tenure::Op::Campaign {
            candidate: "a".to_string(),
            term: named,
            ttl_ms: 1,
            metadata: None,
            purpose: tenure::Purpose::Election,
        };
        let same_id = store.apply(&name, &op, "a").await.unwrap();
        assert_eq!(same_id.effect, Effect::Unavailable, "{named:?}");
        assert_eq!(same_id.lease, renewed.lease, "nothing written");
    }

    let b = campaign(&store, &name, "b", LONG).await;
    assert_eq!(b.effect, Effect::Unavailable);
    assert_eq!(b.lease.as_ref().unwrap().holder.as_deref(), Some("a"));

    let leader = store.leader(&name).await.unwrap().expect("a leads");
    assert_eq!((leader.holder.as_str(), leader.term), ("a", 1));
    assert_eq!(leader.metadata.as_deref(), Some("addr of a"));
    assert!(leader.remaining > Duration::from_secs(50));
    assert!(store.leader(&unique("none")).await.unwrap().is_none());
}

pub(crate) async fn release_and_stale_release(store: Store) {
    let name = unique("rel");
    let a = campaign(&store, &name, "a", LONG).await;
    // P5: a release by someone else, or with another term, changes nothing.
    for (who, t) in [("b", 1), ("a", 0), ("a", 2)] {
        let stale = store.release(&name, who, t, Duration::ZERO).await.unwrap();
        assert_eq!(stale.effect, Effect::NotHolder, "{who} term {t}");
        assert_eq!(stale.lease, a.lease);
    }
    let released = store.release(&name, "a", 1, Duration::ZERO).await.unwrap();
    assert_eq!(released.effect, Effect::Released);
    assert_eq!(released.lease.as_ref().unwrap().holder, None);
    assert!(store.leader(&name).await.unwrap().is_none());
    let b = campaign(&store, &name, "b", LONG).await;
    assert_eq!(
        b.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(term(&b), 2);
    // A release of the old term after the successor began leaves the successor untouched.
    let late = store.release(&name, "a", 1, Duration::ZERO).await.unwrap();
    assert_eq!(late.effect, Effect::NotHolder);
    assert_eq!(late.lease, b.lease);
}

pub(crate) async fn release_at_least(store: Store) {
    let name = unique("atleast");
    let a = campaign(&store, &name, "a", LONG).await;
    let acquired = a.lease.unwrap().acquired_at;
    let released = store
        .release(&name, "a", 1, Duration::from_millis(600))
        .await
        .unwrap();
    assert_eq!(
        released.lease.as_ref().unwrap().expires_at,
        acquired.plus_ms(600).max(released.now)
    );
    let early = campaign(&store, &name, "b", LONG).await;
    assert_eq!(
        early.effect,
        Effect::Unavailable,
        "at_least must hold the name"
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let later = campaign(&store, &name, "b", LONG).await;
    assert_eq!(
        later.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(term(&later), 2);
}

pub(crate) async fn stale_renew_leaves_successor(store: Store) {
    let name = unique("stale");
    campaign(&store, &name, "a", 50).await;
    tokio::time::sleep(Duration::from_millis(80)).await;
    let b = campaign(&store, &name, "b", LONG).await;
    assert_eq!(
        b.effect,
        Effect::Acquired {
            took_over_from: Some("a".to_string())
        }
    );
    assert_eq!(term(&b), 2);
    let a_again = campaign(&store, &name, "a", LONG).await;
    assert_eq!(a_again.effect, Effect::Unavailable);
    assert_eq!(
        a_again.lease, b.lease,
        "a stale renew must not touch the successor"
    );
    let history = store.history(&name, 10).await.unwrap();
    assert_eq!(history[0].event, "taken_over_expired");
    assert_eq!(history[0].holder.as_deref(), Some("b"));
}

pub(crate) async fn demote_keeps_lock_delay(store: Store) {
    let name = unique("demote");
    let a = campaign(&store, &name, "a", 700).await;
    let demoted = store.demote(&name, false, "op").await.unwrap();
    assert_eq!(demoted.effect, Effect::Demoted);
    let row = demoted.lease.unwrap();
    assert_eq!(row.holder, None);
    assert_eq!(
        row.expires_at,
        a.lease.unwrap().expires_at,
        "lock-delay kept"
    );
    assert_eq!(
        campaign(&store, &name, "b", LONG).await.effect,
        Effect::Unavailable
    );
    // The old holder learns at its next renew and cannot renew.
    assert_eq!(
        campaign(&store, &name, "a", LONG).await.effect,
        Effect::Unavailable
    );
    tokio::time::sleep(Duration::from_millis(750)).await;
    let b = campaign(&store, &name, "b", LONG).await;
    assert_eq!(
        b.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(term(&b), 2);

    let now = store.demote(&name, true, "op").await.unwrap();
    assert_eq!(now.effect, Effect::Demoted);
    assert!(now.lease.as_ref().unwrap().expires_at <= now.now);
    let c = campaign(&store, &name, "c", LONG).await;
    assert_eq!(term(&c), 3);
    let events: Vec<_> = store
        .history(&name, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|h| h.event)
        .collect();
    assert_eq!(
        events,
        ["acquired", "demoted", "acquired", "demoted", "acquired"]
    );
}

pub(crate) async fn graceful_handover(store: Store) {
    let name = unique("handover");
    campaign(&store, &name, "a", LONG).await;
    let asked = store.handover(&name, "c", false, "op").await.unwrap();
    assert_eq!(asked.effect, Effect::HandoverRequested);
    assert_eq!(asked.lease.as_ref().unwrap().holder.as_deref(), Some("a"));
    let stepped = renew(&store, &name, "a", 1, LONG).await;
    assert_eq!(
        stepped.effect,
        Effect::SteppedDown(StepDownReason::HandoverTo("c".to_string()))
    );
    assert_eq!(stepped.lease, asked.lease, "a step-down writes nothing");
    // Nobody, not even the target, starts before the holder has stopped and released.
    for who in ["b", "c"] {
        assert_eq!(
            campaign(&store, &name, who, LONG).await.effect,
            Effect::Unavailable
        );
    }
    store.release(&name, "a", 1, Duration::ZERO).await.unwrap();
    assert_eq!(
        campaign(&store, &name, "b", LONG).await.effect,
        Effect::Unavailable
    );
    let c = campaign(&store, &name, "c", LONG).await;
    assert_eq!(
        c.effect,
        Effect::Acquired {
            took_over_from: None
        }
    );
    assert_eq!(term(&c), 2);
    assert_eq!(c.lease.as_ref().unwrap().handover_to, None);
    let history = store.history(&name, 10).await.unwrap();
    let events: Vec<_> = history.iter().map(|h| h.event.as_str()).collect();
    assert_eq!(events, ["acquired", "released", "handed_over", "acquired"]);
    assert_eq!(history[2].actor, "op");
    assert_eq!(history[0].detail, "by handover");
}

pub(crate) async fn handover_reservation_lapses(store: Store) {
    let name = unique("lapse");
    campaign(&store, &name, "a", 300).await;
    store.release(&name, "a", 1, Duration::ZERO).await.unwrap();
    store.handover(&name, "absent", false, "op").await.unwrap();
    assert_eq!(
        campaign(&store, &name, "b", 300).await.effect,
        Effect::Unavailable
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let b = campaign(&store, &name, "b", 300).await;
    assert_eq!(
        b.effect,
        Effect::Acquired {
            took_over_from: None
        },
        "reservation lapses after one ttl"
    );
}

pub(crate) async fn immediate_handover(store: Store) {
    let name = unique("force");
    campaign(&store, &name, "a", LONG).await;
    let forced = store.handover(&name, "c", true, "op").await.unwrap();
    assert_eq!(forced.effect, Effect::Forced);
    let row = forced.lease.unwrap();
    assert_eq!((row.holder.as_deref(), row.term), (Some("c"), 2));
    assert_eq!(
        campaign(&store, &name, "a", LONG).await.effect,
        Effect::Unavailable
    );
    let c = campaign(&store, &name, "c", LONG).await;
    assert_eq!(
        c.effect,
        Effect::Acquired {
            took_over_from: None
        },
        "the target adopts the forced term"
    );
    assert_eq!(term(&c), 2);
    assert_eq!(c.lease.as_ref().unwrap().handover_to, None);
    // Once: a second campaign naming no term finds it held; the adopter renews by its term.
    assert_eq!(
        campaign(&store, &name, "c", LONG).await.effect,
        Effect::Unavailable
    );
    assert_eq!(
        renew(&store, &name, "c", 2, LONG).await.effect,
        Effect::Renewed
    );
    assert_eq!(store.history(&name, 1).await.unwrap()[0].event, "forced");
}

/// A forced grant released by its target before adopting it (a lock's release, which takes
/// the one-statement path where the engine has one) leaves no reservation behind: the mark
/// (`handover_to` = the holder) goes with the holder, and anyone may take the lease at once.
pub(crate) async fn unadopted_forced_grant_released(store: Store) {
    let name = unique("forcedrel");
    campaign(&store, &name, "a", LONG).await;
    let forced = store.handover(&name, "c", true, "op").await.unwrap();
    assert_eq!(forced.effect, Effect::Forced);
    let release = tenure::Op::Release {
        candidate: "c".to_string(),
        term: 2,
        at_least_ms: 0,
        reason: None,
        purpose: tenure::Purpose::Lock {
            record_every_cycle: false,
        },
    };
    let released = store.apply(&name, &release, "c").await.unwrap();
    assert_eq!(released.effect, Effect::Released);
    let row = released.lease.unwrap();
    assert_eq!(
        (row.holder.as_deref(), row.handover_to.as_deref()),
        (None, None)
    );
    let b = campaign(&store, &name, "b", LONG).await;
    assert_eq!(
        b.effect,
        Effect::Acquired {
            took_over_from: None
        },
        "no reservation for c is left"
    );
    assert_eq!(term(&b), 3);
}

pub(crate) async fn pause_and_resume(store: Store) {
    let name = unique("pause");
    campaign(&store, &name, "a", LONG).await;
    assert_eq!(
        store.pause(&name, "op").await.unwrap().effect,
        Effect::Paused
    );
    assert_eq!(
        store.pause(&name, "op").await.unwrap().effect,
        Effect::NoChange
    );
    assert_eq!(
        renew(&store, &name, "a", 1, LONG).await.effect,
        Effect::SteppedDown(StepDownReason::Paused)
    );
    store.release(&name, "a", 1, Duration::ZERO).await.unwrap();
    assert_eq!(
        campaign(&store, &name, "b", LONG).await.effect,
        Effect::Unavailable
    );
    assert_eq!(
        store.resume(&name, "op").await.unwrap().effect,
        Effect::Resumed
    );
    let b = campaign(&store, &name, "b", LONG).await;
    assert_eq!(term(&b), 2);

    // A name can be paused before anyone campaigned.
    let fresh = unique("prepaused");
    let paused = store.pause(&fresh, "op").await.unwrap();
    assert_eq!(
        (
            paused.lease.as_ref().unwrap().term,
            paused.lease.as_ref().unwrap().paused
        ),
        (0, true)
    );
    assert_eq!(
        campaign(&store, &fresh, "a", LONG).await.effect,
        Effect::Unavailable
    );
    store.resume(&fresh, "op").await.unwrap();
    assert_eq!(term(&campaign(&store, &fresh, "a", LONG).await), 1);
}

pub(crate) async fn list_history_and_errors(store: Store) {
    let (n1, n2) = (unique("list"), unique("list"));
    campaign(&store, &n1, "a", LONG).await;
    campaign(&store, &n2, "b", LONG).await;
    let snapshot = store.list().await.unwrap();
    let names: Vec<_> = snapshot.leases.iter().map(|l| l.name.as_str()).collect();
    assert!(names.contains(&n1.as_str()) && names.contains(&n2.as_str()));
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "list is ordered by name");

    let history = store.history(&n1, 5).await.unwrap();
    assert_eq!(history.len(), 1);
    assert_eq!(
        (
            history[0].event.as_str(),
            history[0].actor.as_str(),
            history[0].term
        ),
        ("acquired", "a", 1)
    );

    let unknown = unique("unknown");
    for result in [
        store.demote(&unknown, false, "op").await,
        store.handover(&unknown, "x", false, "op").await,
        store.resume(&unknown, "op").await,
    ] {
        assert!(
            matches!(result, Err(Error::UnknownName(ref n)) if *n == unknown),
            "{result:?}"
        );
    }
    let bad = store.leader("").await.unwrap_err().to_string();
    assert!(bad.contains("invalid name"), "{bad}");
    let bad = store
        .apply(
            &n1,
            &tenure::Op::Campaign {
                candidate: "x\u{7}".into(),
                term: None,
                ttl_ms: 1,
                metadata: None,
                purpose: tenure::Purpose::Election,
            },
            "t",
        )
        .await;
    assert!(
        matches!(
            bad,
            Err(Error::Invalid {
                what: "candidate id",
                ..
            })
        ),
        "{bad:?}"
    );
}

/// P1 through every kind of transition, including concurrent campaigners.
pub(crate) async fn terms_strictly_increase(store: Store) {
    let name = unique("p1");
    let mut terms = vec![];
    terms.push(term(&campaign(&store, &name, "a", LONG).await));
    store
        .release(&name, "a", terms[0], Duration::ZERO)
        .await
        .unwrap();
    terms.push(term(&campaign(&store, &name, "b", LONG).await));
    store.demote(&name, true, "op").await.unwrap();
    terms.push(term(&campaign(&store, &name, "c", LONG).await));
    terms.push(term(&store.handover(&name, "a", true, "op").await.unwrap()));
    let adopted = campaign(&store, &name, "a", LONG).await;
    assert_eq!(
        term(&adopted),
        terms[3],
        "adopting a forced grant raises nothing"
    );
    store.pause(&name, "op").await.unwrap();
    let stepped = renew(&store, &name, "a", terms[3], LONG).await;
    assert_eq!(stepped.effect, Effect::SteppedDown(StepDownReason::Paused));
    store
        .release(&name, "a", terms[3], Duration::ZERO)
        .await
        .unwrap();
    store.resume(&name, "op").await.unwrap();
    terms.push(term(&campaign(&store, &name, "b", LONG).await));
    assert_eq!(terms, [1, 2, 3, 4, 5]);

    // Concurrent campaigners on a fresh name: exactly one acquires, term 1.
    let race = unique("p1race");
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (store, race) = (store.clone(), race.clone());
            tokio::spawn(async move { campaign(&store, &race, &format!("c{i}"), LONG).await })
        })
        .collect();
    let mut winners = 0;
    for t in tasks {
        if matches!(t.await.unwrap().effect, Effect::Acquired { .. }) {
            winners += 1;
        }
    }
    assert_eq!(winners, 1);
    let acquired: Vec<u64> = store
        .history(&race, 100)
        .await
        .unwrap()
        .iter()
        .filter(|h| h.event == "acquired")
        .map(|h| h.term)
        .collect();
    assert_eq!(acquired, [1]);
}

/// With auto-creation off, missing tables are a clear error saying how to create them; a bad
/// prefix is refused before anything is written; passwords never show in errors.
pub(crate) async fn schema_switch_and_bad_connections(store: Store) {
    use tenure::{BackendKind, StoreOptions};
    let kind = store.backend().kind();
    let url = crate::common::url_of(&store);
    let prefix = format!("t{}_", unique("p").replace('-', "_").to_lowercase());
    let manual = StoreOptions::default()
        .table_prefix(&prefix)
        .auto_create(false);
    let err = Store::connect_with(&url, manual.clone()).await.unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::SchemaMissing { .. }), "{err:?}");
    assert!(
        text.contains(&format!("{prefix}schema")) && text.contains("tenure migrate"),
        "{text}"
    );

    // A DBA applies the printed DDL; then the same options work.
    let creator = Store::connect_with(&url, manual.clone().auto_create(true))
        .await
        .unwrap();
    let ddl = creator.backend().schema_sql();
    assert!(
        ddl.contains(&format!("CREATE TABLE IF NOT EXISTS {prefix}lease")),
        "{ddl}"
    );
    let manual_store = Store::connect_with(&url, manual).await.unwrap();
    assert_eq!(
        campaign(&manual_store, "n", "a", LONG)
            .await
            .lease
            .unwrap()
            .term,
        1
    );

    let bad = Store::connect_with(
        &url,
        StoreOptions::default().table_prefix("x; DROP TABLE y"),
    )
    .await;
    assert!(
        matches!(
            bad,
            Err(Error::Invalid {
                what: "table prefix",
                ..
            })
        ),
        "{bad:?}"
    );

    let secret = "hunter2-secret";
    let unreachable = match kind {
        BackendKind::Postgres => format!("postgres://app:{secret}@127.0.0.1:1/test"),
        BackendKind::MySql => format!("mysql://root:{secret}@127.0.0.1:3306/test"),
        _ => format!("sqlite:///nonexistent-dir-{secret}/x/y.db"),
    };
    let options = StoreOptions::default().timeout(Duration::from_secs(3));
    let err = Store::connect_with(&unreachable, options)
        .await
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    if kind != BackendKind::Sqlite {
        assert!(!shown.contains(secret), "password leaked: {shown}");
        assert!(shown.contains("***"), "{shown}");
    }
    assert!(matches!(err, Error::Connect { .. }), "{err:?}");
    let scheme = Store::connect("redis://localhost")
        .await
        .unwrap_err()
        .to_string();
    assert!(
        scheme.contains("postgres://, mysql://, mariadb:// or sqlite://"),
        "{scheme}"
    );
}
