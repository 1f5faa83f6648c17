//! A flapping better candidate does not pull the lead (issue 35, item 2): a restarted
//! candidate settles again, whether it keeps its id (a new incarnation) or takes a new one; and
//! a better candidate whose tenures keep ending by expiry backs off for longer each time, while
//! a healthy lower-priority candidate leads.

use crate::candidates::{leads, until_leads, TTL_MS};
use crate::common::unique;
use std::time::Duration;
use tenure::candidates::Candidates;
use tenure::{Elector, Store, Timing};
use tokio::time::{sleep, timeout, Instant};

fn timing() -> Timing {
    Timing::from_ttl(Duration::from_millis(TTL_MS)).unwrap()
}

fn spawn(store: &Store, name: &str, id: &str, priority: i32, settle: Duration) -> Elector {
    Elector::builder(store.clone(), name)
        .candidate(id)
        .priority(priority)
        .settle(settle)
        .timing(timing())
        .spawn()
        .unwrap()
}

/// A healthy leader (settle 1.5 s) and a better candidate that lives 1 s per run and is
/// restarted at once, with `id(run)`: the leader keeps its tenure throughout.
async fn restarts_never_settle(store: Store, what: &str, id: fn(u32) -> String) {
    let name = unique("flapping");
    let a = spawn(&store, &name, "a", 1, Duration::from_millis(1_500));
    let guard = timeout(Duration::from_secs(10), a.wait_until_leader())
        .await
        .expect("a leads")
        .unwrap();
    let until = Instant::now() + Duration::from_millis(4 * TTL_MS);
    let mut run = 0;
    while Instant::now() < until {
        run += 1;
        let b = spawn(&store, &name, &id(run), 5, Duration::from_millis(500));
        sleep(Duration::from_millis(1_000)).await;
        b.abort();
        assert!(
            !guard.is_lost(),
            "{what}: the healthy leader handed over to a candidate that lives 1 s per run \
             (run {run}): {:#?}",
            store.history(&name, 10).await.unwrap()
        );
    }
    assert_eq!(leads(&a), Some(guard.term()));
    drop(guard);
    a.shutdown().await;
}

pub(crate) async fn a_restarted_better_candidate_settles_again(store: Store) {
    restarts_never_settle(store, "the same id", |_| "b".to_string()).await;
}

pub(crate) async fn a_better_candidate_with_a_new_id_each_run_settles_each_time(store: Store) {
    restarts_never_settle(store, "a new id per run", |run| format!("b-{run}")).await;
}

/// The better candidate `b` (same id every run) leads, crashes; the healthy `a` takes over.
/// `b` restarts at once, but its tenures ended by expiry: it backs off for its ttl after the
/// first such end, twice that after the second, while `a` leads; then it leads again by a
/// handover.
pub(crate) async fn a_better_candidate_whose_tenures_end_by_expiry_backs_off(store: Store) {
    let name = unique("backs-off");
    let settle = Duration::from_millis(200);
    let a = spawn(&store, &name, "a", 1, settle);
    let registry = Candidates::new(store.clone());
    let mut b = spawn(&store, &name, "b", 5, settle);
    until_leads(&[("a", &a), ("b", &b)], "b", Duration::from_secs(15)).await;
    for (round, backoff_ms) in [(1, TTL_MS), (2, 2 * TTL_MS)] {
        b.abort();
        let term = until_leads(&[("a", &a)], "a", Duration::from_millis(3 * TTL_MS)).await;
        b = spawn(&store, &name, "b", 5, settle);
        // While it backs off (counted from `a`'s takeover, by the database's clock: this
        // test's own wake-ups may come late on a busy machine; less a margin), the lease stays
        // `a`'s.
        let quiet_us = i64::try_from((backoff_ms - 500) * 1000).unwrap();
        loop {
            let roster = registry.list(&name).await.unwrap();
            let lease = roster.lease.as_ref().expect("a lease row");
            assert_eq!(
                (lease.holder.as_deref(), lease.term),
                (Some("a"), term),
                "round {round}: the crashed candidate took the lead back before its back-off \
                 ({backoff_ms} ms after the takeover) ended: {roster:?}"
            );
            if roster.now.0 - lease.acquired_at.0 >= quiet_us {
                eprintln!("round {round}: {roster:?}");
                break;
            }
            sleep(Duration::from_millis(20)).await;
        }
        // Then it leads again, by a handover.
        until_leads(
            &[("a", &a), ("b", &b)],
            "b",
            Duration::from_millis(backoff_ms + 3 * TTL_MS),
        )
        .await;
    }
    a.shutdown().await;
    b.shutdown().await;
}
