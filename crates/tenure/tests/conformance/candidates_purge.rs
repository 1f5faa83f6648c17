//! A registry full of crashed candidates (issue 35, item 10): a name with 20,000 registrations
//! dead for two days (due for the purge) and 20,000 dead for an hour (kept, for `tenure
//! candidates`). Its elector still leads within one ttl, every campaign within its database
//! timeout; the old rows are purged by the name's own campaigns, at most 1,000 per campaign
//! (counted: rows gone per transaction), until none is left; the recent ones stay.

use crate::common::{raw_count, raw_sql, unique};
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::CountingBackend;
use tenure::{BackendKind, Elector, Store, Timing};
use tokio::time::{sleep, timeout, Instant};

const ROWS: i64 = 20_000;
const PER_STATEMENT: usize = 1_000;
/// The most rows one campaign may purge (the registry's batch).
const BATCH: i64 = 1_000;

/// An instant `ago` (an SQL interval word: `2 days`, `1 hour`) before the database's now, as
/// the engine of `kind` writes it.
fn before_now(kind: BackendKind, ago: &str) -> String {
    match kind {
        BackendKind::Postgres => format!("(now() - interval '{ago}')"),
        BackendKind::MySql => {
            let (n, unit) = ago.split_once(' ').unwrap();
            let unit = unit.trim_end_matches('s').to_uppercase();
            format!("(UTC_TIMESTAMP(6) - INTERVAL {n} {unit})")
        }
        _ => format!("strftime('%Y-%m-%d %H:%M:%f', 'now', '-{ago}')"),
    }
}

/// Inserts `ROWS` registrations of `name`, ids `{prefix}-i`, that expired `ago`.
async fn insert_dead(store: &Store, name: &str, prefix: &str, ago: &str) {
    let at = before_now(store.kind(), ago);
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(PER_STATEMENT) {
        let values: Vec<String> = chunk
            .iter()
            .map(|i| {
                format!("('{name}', '{prefix}-{i}', 5, FALSE, NULL, {at}, {at}, {at}, 2000, 900)")
            })
            .collect();
        let sql = format!(
            "INSERT INTO tenure_candidate (name, candidate, priority, observer, metadata, since, \
             seen_at, expires_at, ttl_ms, renew_ms) VALUES {}",
            values.join(", ")
        );
        raw_sql(store, &sql).await;
    }
}

async fn count(store: &Store, name: &str, prefix: &str) -> i64 {
    let sql = format!(
        "SELECT COUNT(*) AS n FROM tenure_candidate WHERE name = '{name}' AND candidate LIKE \
         '{prefix}-%'"
    );
    raw_count(store, &sql).await
}

pub(crate) async fn a_registry_full_of_crashed_candidates_is_purged_in_bounded_batches(
    store: Store,
) {
    let name = unique("crashed-many");
    insert_dead(&store, &name, "old", "2 days").await;
    insert_dead(&store, &name, "recent", "1 hour").await;
    assert_eq!(count(&store, &name, "old").await, ROWS);
    let counting = Arc::new(CountingBackend::new(store.backend().clone()));
    let counted = Store::from_backend(counting.clone(), Duration::from_secs(10));
    let timing = Timing::from_ttl(Duration::from_secs(2)).unwrap();
    let started = Instant::now();
    let elector = Elector::builder(counted, &name)
        .candidate("alive")
        .timing(timing)
        .spawn()
        .unwrap();
    // Every campaign is bounded by the database timeout (400 ms): the first one leads.
    let guard = timeout(timing.ttl(), elector.wait_until_leader())
        .await
        .expect("the elector led within one ttl beside 40,000 dead registrations")
        .unwrap();
    eprintln!("led after {:?}", started.elapsed());
    // The counter counts a transaction once it returned, a moment after its commit: one
    // campaign may be seen purged and not yet counted.
    let mut transactions;
    let start = Instant::now();
    loop {
        let left = count(&store, &name, "old").await;
        transactions = counting.counts().transactions;
        let purged = ROWS - left;
        let most = BATCH * (i64::try_from(transactions).unwrap() + 1);
        assert!(
            purged <= most,
            "{purged} dead registrations purged by {transactions} transactions: more than \
             {BATCH} per campaign"
        );
        if left == 0 {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "{left} dead registrations left after {transactions} transactions"
        );
        sleep(Duration::from_millis(20)).await;
    }
    eprintln!(
        "purged {ROWS} in {transactions} transactions, {:?}",
        start.elapsed()
    );
    assert!(!guard.is_lost(), "the leader lost its tenure while purging");
    assert_eq!(
        count(&store, &name, "recent").await,
        ROWS,
        "registrations dead for an hour are kept"
    );
    drop(guard);
    elector.shutdown().await;
    raw_sql(
        &store,
        &format!("DELETE FROM tenure_candidate WHERE name = '{name}'"),
    )
    .await;
}
