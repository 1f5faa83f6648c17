//! Counts the statements sqlx sends, as it logs them (its `sqlx::query` events, one per
//! statement; `COMMIT` on PostgreSQL and `BEGIN`/`COMMIT` on MariaDB count too), for the
//! tests of what an operation costs. It is the process's global subscriber: a test binary that
//! counts runs one test, so that no other test's statements run meanwhile.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

/// The count so far, and the last statements' summaries (for a failure's message).
#[derive(Clone, Default)]
pub(crate) struct Counted {
    count: Arc<AtomicU64>,
    last: Arc<Mutex<Vec<String>>>,
}

impl Counted {
    /// Installs the counter as the process's subscriber.
    pub(crate) fn install() -> Counted {
        let counted = Counted::default();
        let only_sqlx = tracing_subscriber::filter::Targets::new()
            .with_target("sqlx::query", tracing::Level::TRACE);
        tracing::subscriber::set_global_default(
            tracing_subscriber::registry().with(counted.clone().with_filter(only_sqlx)),
        )
        .expect("the only subscriber of this test binary");
        counted
    }

    /// The statements counted so far.
    pub(crate) fn now(&self) -> u64 {
        self.count.load(Ordering::Relaxed)
    }

    /// Forgets the summaries kept so far.
    pub(crate) fn clear(&self) {
        self.last.lock().unwrap().clear();
    }

    /// The summaries of the last (at most 400) statements.
    pub(crate) fn last(&self) -> Vec<String> {
        self.last.lock().unwrap().clone()
    }
}

struct Summary(String);

impl tracing::field::Visit for Summary {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "summary" {
            self.0 = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for Counted {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() == "sqlx::query" {
            let mut summary = Summary(String::new());
            event.record(&mut summary);
            // A connection the pool opens meanwhile (the pool returns a connection in a task
            // of its own, which the next call may outrun) runs its session's settings: not
            // the operation's.
            if summary.0.to_ascii_uppercase().starts_with("\"SET ") {
                return;
            }
            self.count.fetch_add(1, Ordering::Relaxed);
            let mut last = self.last.lock().unwrap();
            if last.len() >= 400 {
                last.remove(0);
            }
            last.push(summary.0);
        }
    }
}
