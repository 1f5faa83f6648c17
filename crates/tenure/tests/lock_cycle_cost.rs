//! What a lock's uncontested cycle costs, counted: `try_lock` + `release` of a free name is two
//! statements on every backend (the one-statement paths: PostgreSQL's CTEs, MariaDB's two
//! `CALL`s, SQLite's `UPDATE … RETURNING`s) — no read of the epoch, no registry, no second
//! statement per operation — and a batch of many locks is a fixed number of statements per
//! thousand names. Counted as sqlx logs them (its `sqlx::query` events, one per statement it
//! sends; `COMMIT` on PostgreSQL and `BEGIN`/`COMMIT` on MariaDB count too), in one test so
//! that no other test's statements run in this process meanwhile.

mod common;

use tenure::{BackendKind, LockOptions, Locks};

const CYCLES: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_cycle_is_two_statements_and_a_batch_a_few_per_thousand() {
    let count = common::statements::Counted::install();
    for kind in [
        BackendKind::Sqlite,
        BackendKind::Postgres,
        BackendKind::MySql,
    ] {
        let Some(store) = common::store(kind).await else {
            continue;
        };
        let locks = Locks::with_holder(store.clone(), "cost").unwrap();
        let name = common::unique("cost");
        let cycle = || async {
            let guard = locks
                .try_lock(&name, LockOptions::default())
                .await
                .unwrap()
                .expect("free");
            guard.release().await.unwrap();
        };
        // The first cycle creates the row (and reads the epoch, once).
        for _ in 0..3 {
            cycle().await;
        }
        let before = count.now();
        count.clear();
        for _ in 0..CYCLES {
            cycle().await;
        }
        let per_cycle = (count.now() - before) as f64 / CYCLES as f64;
        eprintln!("{kind}: {per_cycle:.2} statements per lock cycle");
        assert!(
            per_cycle <= 2.0,
            "{kind}: {per_cycle} statements per uncontested lock cycle, not 2: {:#?}",
            count.last()
        );

        // 2,500 new names in one batch: three chunks, each a handful of statements.
        let names: Vec<String> = (0..2500)
            .map(|i| format!("{}-{i}", common::unique("batch")))
            .collect();
        let before = count.now();
        let guards = locks
            .try_lock_many(&names, LockOptions::default())
            .await
            .unwrap();
        let spent = count.now() - before;
        eprintln!("{kind}: {spent} statements for a batch of 2,500 new names");
        assert_eq!(guards.len(), 2500);
        assert!(
            spent <= 3 * 8,
            "{kind}: {spent} statements for 3 chunks of a batch"
        );
        for g in guards {
            g.forget();
        }

        // The keep-alive of 12,000 locks, more than one renewal statement's chunk of pairs
        // elsewhere: on PostgreSQL one statement however many (the pairs as arrays), since 20
        // statements of 5,000 row values each took 3.7 s for 100,000 locks, close to the bound
        // that loses them all; the others send a statement per chunk.
        let names: Vec<String> = (0..12_000)
            .map(|i| format!("{}-{i}", common::unique("kept")))
            .collect();
        let guards = locks
            .try_lock_many(&names, LockOptions::default())
            .await
            .unwrap();
        assert_eq!(guards.len(), names.len());
        let pairs: Vec<(String, u64)> = guards
            .iter()
            .map(|g| (g.name().to_string(), g.term()))
            .collect();
        let before = count.now();
        let renewed = store.backend().renew_many("cost", &pairs).await.unwrap();
        let spent = count.now() - before;
        eprintln!("{kind}: {spent} statements to renew 12,000 locks");
        assert_eq!(
            renewed.leases.len(),
            pairs.len(),
            "{kind}: every lock renewed"
        );
        // As sqlx logs them: the clock, the renewal, COMMIT on PostgreSQL; BEGIN, the clock,
        // three chunks with a read-back each, COMMIT on MariaDB; the clock and three chunks on
        // SQLite.
        let most = match kind {
            BackendKind::Postgres => 3,
            BackendKind::MySql => 3 + 2 * 3,
            _ => 1 + 3,
        };
        assert!(
            spent <= most,
            "{kind}: {spent} statements to renew 12,000 locks, not {most}: {:#?}",
            count.last()
        );
        for g in guards {
            g.forget();
        }
    }
}
