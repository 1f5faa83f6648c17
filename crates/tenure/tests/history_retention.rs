//! History older than the retention is pruned, lazily: at every 64th tenure of a name (and at
//! every administrative event), so that a lock taken and released in a loop does not pay a
//! `DELETE` each time. Every backend.

mod common;

use std::time::Duration;
use tenure::{BackendKind, Op};

async fn prunes_at_every_64th_tenure(kind: BackendKind) {
    let options = common::options().history_retention(Some(Duration::from_millis(1)));
    let Some(store) = common::connect(kind, &common::url_for(kind), options).await else {
        return;
    };
    let name = common::unique("retention");
    let campaign = Op::Campaign {
        candidate: "a".into(),
        term: None,
        ttl_ms: 60_000,
        metadata: None,
        purpose: tenure::Purpose::Election,
    };
    for term in 1..=64u64 {
        if term == 64 {
            // Every earlier event is now older than the 1 ms retention.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let applied = store.apply(&name, &campaign, "a").await.unwrap();
        assert_eq!(applied.lease.unwrap().term, term);
        if term < 64 {
            store
                .release(&name, "a", term, Duration::ZERO)
                .await
                .unwrap();
        }
        if term == 63 {
            let kept = store.history(&name, 1000).await.unwrap();
            assert_eq!(kept.len(), 2 * 63, "nothing pruned before the 64th tenure");
        }
    }
    let kept = store.history(&name, 1000).await.unwrap();
    let kept: Vec<_> = kept.iter().map(|h| (h.event.as_str(), h.term)).collect();
    assert_eq!(
        kept,
        vec![("acquired", 64)],
        "the 64th tenure pruned every older event"
    );
}

#[tokio::test]
async fn prunes_at_every_64th_tenure_sqlite() {
    prunes_at_every_64th_tenure(BackendKind::Sqlite).await;
}

#[tokio::test]
async fn prunes_at_every_64th_tenure_postgres() {
    prunes_at_every_64th_tenure(BackendKind::Postgres).await;
}

#[tokio::test]
async fn prunes_at_every_64th_tenure_mysql() {
    prunes_at_every_64th_tenure(BackendKind::MySql).await;
}
