//! 10,000 held locks are kept alive with one batched renewal per renew interval, on every
//! backend: the number of database calls is counted, and every lease is seen renewed.

mod common;

use std::sync::Arc;
use std::time::Duration;
use tenure::backend::CountingBackend;
use tenure::{BackendKind, LockOptions, Locks, Store, StoreOptions};
use tokio::time::Instant;

const LOCKS: usize = 10_000;
/// Of each worker's 1,250 names, taken one by one; the rest in batches of [`BATCH`].
const ONE_BY_ONE: usize = 250;
const BATCH: usize = 250;
/// Renewed every ttl/4 = 5 s. Each keep-alive batch of 10,000 rows must land within its
/// budget while eight workers are still taking locks: with an 8 s ttl (a 1.6 s budget) a loaded
/// 2-core machine missed it (seen twice beside other builds). What this test checks is the
/// count of calls and that every lease was renewed, not how fast.
const TTL: Duration = Duration::from_secs(20);

/// One backend takes its locks at a time: three backends taking 10,000 locks at once on two
/// cores starved one another's keep-alive past its 1.6 s budget when the ttl was 8 s (seen in
/// CI: locks lost while being taken), and what this test measures is the keep-alive, not the
/// machine's contention. A backend that holds its locks watches its renewals while the next
/// one takes its own: one taker beside a 10,000-row batch with a 4 s budget.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

async fn ten_thousand_locks(kind: BackendKind) {
    let taking = ONE_AT_A_TIME.lock().await;
    // SQLite's file goes to memory-backed storage where there is one: taking 2,000 locks one
    // by one is 2,000 commits, each an fsync with `synchronous=FULL`, and what this test
    // measures is the renewal, not the disk.
    let url = match kind {
        BackendKind::Sqlite if std::path::Path::new("/dev/shm").is_dir() => {
            format!("sqlite:///dev/shm/{}.db", common::unique("tenure-scale"))
        }
        _ => common::url_for(kind),
    };
    let prefix = format!("s{}_", common::unique("p").replace('-', "_").to_lowercase());
    let options = StoreOptions::default()
        .table_prefix(&prefix)
        .timeout(Duration::from_secs(20));
    let Some(store) = common::connect(kind, &url, options).await else {
        return;
    };
    let counting = Arc::new(CountingBackend::new(store.backend().clone()));
    let store = Store::from_backend(counting.clone(), Duration::from_secs(20));
    let locks = Locks::with_holder(store.clone(), "scale").unwrap();
    let options = LockOptions::default().ttl(TTL);

    let started = Instant::now();
    let names: Vec<String> = (0..LOCKS).map(|i| format!("lock-{i:05}")).collect();
    // Eight workers, one per pooled connection. Each takes its first names one by one
    // (`try_lock`) and the rest in batches of [`BATCH`] (`try_lock_many`, one transaction
    // each), so the keep-alive carries guards of both kinds; taking all 10,000 one by one took
    // most of this test's time (14–34 s per backend, quiet) and is the benchmark's business
    // (docs/benchmarks.md), not this test's.
    let workers: Vec<_> = names
        .chunks(LOCKS / 8)
        .map(|chunk| {
            let (locks, chunk) = (locks.clone(), chunk.to_vec());
            tokio::spawn(async move {
                let (single, batched) = chunk.split_at(ONE_BY_ONE);
                let mut guards = Vec::with_capacity(chunk.len());
                for name in single {
                    guards.push(
                        locks
                            .try_lock(name, options)
                            .await
                            .unwrap()
                            .expect("free lock"),
                    );
                }
                for batch in batched.chunks(BATCH) {
                    let taken = locks.try_lock_many(batch, options).await.unwrap();
                    assert_eq!(taken.len(), batch.len(), "every name of a batch was free");
                    guards.extend(taken);
                }
                guards
            })
        })
        .collect();
    let mut guards = Vec::with_capacity(LOCKS);
    for w in workers {
        guards.extend(w.await.unwrap());
    }
    eprintln!("{kind}: took {LOCKS} locks in {:?}", started.elapsed());
    assert_eq!(
        locks.held(),
        LOCKS,
        "locks lost while being taken: a keep-alive batch missed its budget"
    );
    drop(taking);

    // Watch three renew intervals.
    let before = counting.counts();
    let window_start = store.list().await.unwrap().now;
    tokio::time::sleep(TTL / 4 * 3 + Duration::from_millis(500)).await;
    let spent = counting.counts().since(before);
    let (applies, batches) = (spent.applies, spent.batches);
    eprintln!(
        "{kind}: {batches} keep-alive calls and {applies} single-lock calls in 3.5 renew intervals for {LOCKS} locks"
    );
    assert_eq!(applies, 0, "no per-lock statements");
    assert!(
        (3..=4).contains(&batches),
        "one batch per renew interval, got {batches}"
    );
    assert!(guards.iter().all(|g| !g.is_lost()), "every lock still held");
    let snapshot = store.list().await.unwrap();
    let renewed = snapshot
        .leases
        .iter()
        .filter(|l| l.holder.as_deref() == Some("scale") && l.renewed_at > window_start)
        .count();
    assert_eq!(renewed, LOCKS, "every lease renewed in the window");
    drop(guards);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_locks_sqlite() {
    ten_thousand_locks(BackendKind::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_locks_postgres() {
    ten_thousand_locks(BackendKind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_locks_mysql() {
    ten_thousand_locks(BackendKind::MySql).await;
}
