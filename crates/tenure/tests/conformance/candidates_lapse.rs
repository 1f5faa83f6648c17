//! A better candidate that crashes right after it registered costs the leader its cadence at
//! most (issue 35, item 1): the leader hands over to it once, the lease reserved for it lapses
//! once it has not campaigned within its renew interval plus its database timeout, the leader
//! leads again, and it does not hand over to the dead candidate again — although that one's
//! registration stays live for its (longer) ttl.

use crate::candidates::until_leads;
use crate::common::{unique, until_db_passes};
use std::time::Duration;
use tenure::candidates::Candidates;
use tenure::{Elector, Store, Timing};
use tokio::time::{sleep, timeout, Instant};

fn timing(ttl_ms: u64, renew_ms: u64, db_timeout_ms: u64) -> Timing {
    Timing::builder()
        .ttl(Duration::from_millis(ttl_ms))
        .renew_interval(Duration::from_millis(renew_ms))
        .db_timeout(Duration::from_millis(db_timeout_ms))
        .build()
        .unwrap()
}

/// The leader: a 30 s lease, renewed every 500 ms. A reservation that did not lapse with its
/// target's cadence would last the lease's ttl: 30 s, far beyond the bound below even with a
/// loaded machine's slack, so a kept reservation cannot pass for slowness.
const LEADER: (u64, u64, u64) = (30_000, 500, 400);
/// What the bound allows beyond the two cadences, for a machine busy with other tests (the
/// leader's statements time out after 400 ms and are tried again a renew interval later). A
/// whole-suite run once saw the leader lead again 8.5 s after b was last seen, when the lease
/// and so a kept reservation were 6 s long (cause not found); alone it takes about 2 s.
const SLACK: Duration = Duration::from_secs(10);
/// The better candidate: a 20 s registration, campaigning every 1 s at most (cadence 1.8 s).
const BETTER: (u64, u64, u64) = (20_000, 1_000, 800);

pub(crate) async fn a_crashed_better_candidate_costs_the_leader_its_cadence_at_most(store: Store) {
    let name = unique("dead-better");
    let (ttl, renew, db) = LEADER;
    let a = Elector::builder(store.clone(), &name)
        .candidate("a")
        .priority(1)
        .settle(Duration::ZERO)
        .timing(timing(ttl, renew, db))
        .spawn()
        .unwrap();
    let first = timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .expect("a leads")
        .unwrap();
    let (better_ttl, better_renew, better_db) = BETTER;
    let b = Elector::builder(store.clone(), &name)
        .candidate("b")
        .priority(5)
        .timing(timing(better_ttl, better_renew, better_db))
        .spawn()
        .unwrap();
    // b crashes right after its first campaign registered it.
    let registry = Candidates::new(store.clone());
    let start = Instant::now();
    // b's row as the read that first saw it had it (a second read after the abort may find it
    // already lapsed on a loaded machine).
    let b_row = loop {
        let seen = registry
            .list(&name)
            .await
            .unwrap()
            .candidates
            .into_iter()
            .find(|c| c.candidate == "b");
        if let Some(row) = seen {
            break row;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "b never registered"
        );
        sleep(Duration::from_millis(10)).await;
    };
    b.abort();
    let cadence = b_row.campaigns_within;
    // The leader hands over to it at its next renewal (b is better and was seen a moment ago).
    timeout(Duration::from_secs(5), first.lost())
        .await
        .expect("the leader hands over to the better candidate");
    // Its work stops: the lease is released.
    let first_term = first.term();
    drop(first);
    // ... and leads again once b has not campaigned within its cadence (a reservation kept
    // for the leader's whole ttl, 30 s, fails here).
    let again = until_leads(&[("a", &a)], "a", Duration::from_secs(25)).await;
    assert!(again > first_term, "a new tenure: {again}");
    let history = store.history(&name, 20).await.unwrap();
    let back = history
        .iter()
        .filter(|h| h.term == again && h.holder.as_deref() == Some("a"))
        .map(|h| h.at)
        .min()
        .expect("a's new tenure is in the history");
    let took = Duration::from_micros(
        u64::try_from(back.0 - b_row.seen_at.0).expect("led again after b was last seen"),
    );
    let bound = cadence + Duration::from_millis(renew + db) + SLACK;
    eprintln!(
        "the leader led again {took:?} after the dead candidate was last seen (bound {bound:?})"
    );
    assert!(
        took <= bound,
        "the leader led again {took:?} after the dead candidate was last seen: more than its \
         cadence ({cadence:?}) plus the leader's own (renew interval and database timeout) \
         and {SLACK:?} ({bound:?}); the lease stayed reserved for a dead candidate: \
         {history:#?}"
    );
    // b's registration stays live for 20 s: the leader must not hand over to it again.
    until_db_passes(&store, b_row.seen_at.plus_ms(8_000)).await;
    assert_eq!(
        crate::candidates::leads(&a),
        Some(again),
        "the leader handed over to the dead candidate again"
    );
    let history = store.history(&name, 50).await.unwrap();
    let handovers = history
        .iter()
        .filter(|h| h.event == "handed_over" && h.detail.contains("priority"))
        .count();
    assert_eq!(handovers, 1, "{history:#?}");
    a.shutdown().await;
}
