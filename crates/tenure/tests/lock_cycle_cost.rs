//! What a lock's uncontested cycle costs, counted: `try_lock` + `release` of a free name is two
//! statements on every backend (the one-statement paths: PostgreSQL's CTEs, MariaDB's two
//! `CALL`s, SQLite's `UPDATE … RETURNING`s) — no read of the epoch, no registry, no second
//! statement per operation — and a batch of many locks is a fixed number of statements per
//! thousand names. Counted as sqlx logs them (its `sqlx::query` events, one per statement it
//! sends; `COMMIT` on PostgreSQL and `BEGIN`/`COMMIT` on MariaDB count too), in one test so
//! that no other test's statements run in this process meanwhile.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tenure::{BackendKind, LockOptions, Locks};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

/// Counts sqlx's statements, and keeps the last ones' summaries (for a failure's message).
struct Statements(Arc<AtomicU64>, Arc<Mutex<Vec<String>>>);

struct Summary(String);

impl tracing::field::Visit for Summary {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Statements {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() == "sqlx::query" {
            let mut summary = Summary(String::new());
            event.record(&mut summary);
            // A connection the pool opens meanwhile (the pool returns a connection in a task
            // of its own, which the next call may outrun) runs its session's settings: not
            // the cycle's.
            if summary.0.to_ascii_uppercase().starts_with("\"SET ") {
                return;
            }
            self.0.fetch_add(1, Ordering::Relaxed);
            let mut last = self.1.lock().unwrap();
            if last.len() >= 400 {
                last.remove(0);
            }
            last.push(summary.0);
        }
    }
}

const CYCLES: u64 = 40;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_cycle_is_two_statements_and_a_batch_a_few_per_thousand() {
    let count = Arc::new(AtomicU64::new(0));
    let last = Arc::new(Mutex::new(Vec::new()));
    let only_sqlx = tracing_subscriber::filter::Targets::new()
        .with_target("sqlx::query", tracing::Level::TRACE);
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(Statements(count.clone(), last.clone()).with_filter(only_sqlx)),
    )
    .expect("the only subscriber of this test binary");
    for kind in [
        BackendKind::Sqlite,
        BackendKind::Postgres,
        BackendKind::MySql,
    ] {
        let Some(store) = common::store(kind).await else {
            continue;
        };
        let locks = Locks::with_holder(store, "cost").unwrap();
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
        let before = count.load(Ordering::Relaxed);
        last.lock().unwrap().clear();
        for _ in 0..CYCLES {
            cycle().await;
        }
        let per_cycle = (count.load(Ordering::Relaxed) - before) as f64 / CYCLES as f64;
        eprintln!("{kind}: {per_cycle:.2} statements per lock cycle");
        assert!(
            per_cycle <= 2.0,
            "{kind}: {per_cycle} statements per uncontested lock cycle, not 2: {:#?}",
            last.lock().unwrap()
        );

        // 2,500 new names in one batch: three chunks, each a handful of statements.
        let names: Vec<String> = (0..2500)
            .map(|i| format!("{}-{i}", common::unique("batch")))
            .collect();
        let before = count.load(Ordering::Relaxed);
        let guards = locks
            .try_lock_many(&names, LockOptions::default())
            .await
            .unwrap();
        let spent = count.load(Ordering::Relaxed) - before;
        eprintln!("{kind}: {spent} statements for a batch of 2,500 new names");
        assert_eq!(guards.len(), 2500);
        assert!(
            spent <= 3 * 8,
            "{kind}: {spent} statements for 3 chunks of a batch"
        );
        for g in guards {
            g.forget();
        }
    }
}
