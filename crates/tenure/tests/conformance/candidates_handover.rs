//! An operator's handover through the registry (issue 35, item 8): it goes to a live
//! candidate only — a typo or an observer is refused and nothing changes, a process not yet
//! started is accepted when said so — and the tenure it begins stands against priorities. A
//! demoted leader that holds off (longer than its ttl) stays a live candidate meanwhile.

use crate::candidates::{leads, spawn, until_leads, TTL_MS};
use crate::common::unique;
use std::time::Duration;
use tenure::candidates::{Candidates, Handover};
use tenure::{Effect, Elector, Error, Store, Timing};
use tokio::time::{sleep, timeout, Instant};

const OPERATOR: &str = "test-operator";

pub(crate) async fn an_operator_handover_goes_to_a_live_candidate_and_stands(store: Store) {
    let name = unique("chosen");
    let registry = Candidates::new(store.clone());
    let a = spawn(&store, &name, "a", 5);
    let first = until_leads(&[("a", &a)], "a", Duration::from_secs(10)).await;
    let c = spawn(&store, &name, "c", 1);
    let watcher = Elector::builder(store.clone(), &name)
        .candidate("watcher")
        .observe()
        .timing(Timing::from_ttl(Duration::from_millis(TTL_MS)).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while registry.list(&name).await.unwrap().candidates.len() < 3 {
        assert!(start.elapsed() < Duration::from_secs(10));
        sleep(Duration::from_millis(10)).await;
    }
    // A typo, an observer: refused, nothing changed.
    for to in ["typo", "watcher"] {
        for immediate in [false, true] {
            let how = Handover {
                immediate,
                ..Handover::default()
            };
            match registry.handover(&name, to, how, OPERATOR).await {
                Err(Error::Invalid { what, value, .. }) => {
                    assert_eq!((what, value.as_str()), ("handover target", to));
                }
                other => panic!("{to}: {other:?}"),
            }
        }
    }
    let lease = store.get(&name).await.unwrap().leases.remove(0);
    assert_eq!((lease.term, lease.handover_to), (first, None));
    assert_eq!(leads(&a), Some(first));
    // To the live, lower candidate: it leads, and priority does not hand its tenure back.
    let applied = registry
        .handover(&name, "c", Handover::default(), OPERATOR)
        .await
        .unwrap();
    assert_eq!(applied.effect, Effect::HandoverRequested);
    let chosen = until_leads(&[("a", &a), ("c", &c)], "c", Duration::from_secs(10)).await;
    let since = Instant::now();
    while since.elapsed() < Duration::from_millis(2 * TTL_MS) {
        assert_eq!(
            leads(&c),
            Some(chosen),
            "the chosen candidate's tenure was handed back by priority"
        );
        sleep(Duration::from_millis(20)).await;
    }
    // Its next tenure follows priorities: after a demote the better one leads.
    store.demote(&name, false, OPERATOR).await.unwrap();
    until_leads(&[("a", &a), ("c", &c)], "a", Duration::from_secs(15)).await;
    // A process not yet started: accepted when said so.
    let how = Handover {
        unregistered: true,
        ..Handover::default()
    };
    let applied = registry
        .handover(&name, "later", how, OPERATOR)
        .await
        .unwrap();
    assert_eq!(applied.effect, Effect::HandoverRequested);
    let history = store.history(&name, 20).await.unwrap();
    assert_eq!(
        history
            .iter()
            .filter(|h| h.event == "handed_over" && h.actor == OPERATOR)
            .count(),
        2,
        "{history:#?}"
    );
    watcher.shutdown().await;
    a.shutdown().await;
    c.shutdown().await;
}

/// After a demote the old leader holds off for the lease's lock-delay and then its release
/// hold-off — longer than its ttl — while another candidate takes the lead; meanwhile it is a
/// live candidate all the same: an operator may hand the name back to it, and the lease stays
/// reserved for it until its hold-off ends (it shows signs of life, though it does not
/// campaign).
pub(crate) async fn a_demoted_leader_stays_a_live_candidate_while_it_holds_off(store: Store) {
    let name = unique("demoted");
    let registry = Candidates::new(store.clone());
    let a = spawn(&store, &name, "a", 0);
    timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .expect("a leads")
        .unwrap();
    let b = spawn(&store, &name, "b", 0);
    let start = Instant::now();
    while registry.list(&name).await.unwrap().candidates.len() < 2 {
        assert!(start.elapsed() < Duration::from_secs(10));
        sleep(Duration::from_millis(10)).await;
    }
    store.demote(&name, false, OPERATOR).await.unwrap();
    let since = Instant::now();
    until_leads(&[("a", &a), ("b", &b)], "b", Duration::from_secs(10)).await;
    while since.elapsed() < Duration::from_millis(TTL_MS + TTL_MS / 4) {
        let roster = registry.list(&name).await.unwrap();
        let row = roster.candidates.iter().find(|c| c.candidate == "a");
        assert!(
            row.is_some_and(|c| c.is_live(roster.now)),
            "the demoted leader dropped out of the registry after {:?}: {roster:?}",
            since.elapsed()
        );
        sleep(Duration::from_millis(50)).await;
    }
    registry
        .handover(&name, "a", Handover::default(), OPERATOR)
        .await
        .expect("a live candidate");
    until_leads(
        &[("a", &a), ("b", &b)],
        "a",
        Duration::from_millis(3 * TTL_MS),
    )
    .await;
    a.shutdown().await;
    b.shutdown().await;
}
