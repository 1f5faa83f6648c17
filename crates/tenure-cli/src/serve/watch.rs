//! The shared watcher behind blocking queries.
//!
//! One task reads every lease (`Store::list`) each poll interval, and at once when the backend
//! announces a change (PostgreSQL's LISTEN/NOTIFY, the doorbells, through `Backend::subscribe`)
//! other than an etcd write's. Each read that changes what matters (a [`ChangeKey`] of a lease
//! differs, or the set of names changes) raises the [`View::index`]; the countdown of the time
//! left does not. A blocking query only watches the published [`View`]: a thousand
//! waiting clients cost no more database reads than one. Each read also feeds the
//! metrics of what the watcher sees: the leader and term of every name, and how long a name
//! stood vacant before its next tenure (`tenure::telemetry::Vacancies`), and each name's
//! renewals for the status page's charts ([`Renewals`]).

// Its blocking queries and renewals serve the HTTP API; `/health` and `/metrics` read its view
// in every build.
#![cfg_attr(not(feature = "http-api"), allow(dead_code))]

use super::renewals::{Renewals, RenewalsJson};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure::{ChangeKey, Changes, Lease, Snapshot, Store};
use tokio::sync::watch;
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// What the last reads showed.
#[derive(Clone, Debug, Default)]
pub(crate) struct View {
    /// Raised by one for every read that changed something that matters; 0 before the first.
    pub index: u64,
    /// The last successful read, with the database's clock.
    pub snapshot: Option<Snapshot>,
    /// When the last successful read was taken (local, monotonic).
    pub read_at: Option<Instant>,
    /// Per name, the index at which it last changed.
    pub modified: HashMap<String, u64>,
    /// Why the latest read failed, if it did.
    pub error: Option<String>,
    /// What makes a change worth waking the waiting clients, per name.
    keys: HashMap<String, ChangeKey>,
}

impl View {
    /// The lease of `name` in the last read.
    pub(crate) fn lease(&self, name: &str) -> Option<&Lease> {
        self.snapshot
            .as_ref()?
            .leases
            .iter()
            .find(|l| l.name == name)
    }

    /// Takes a read in; returns whether anything that matters changed.
    fn absorb(&mut self, result: tenure::Result<Snapshot>) -> bool {
        let snapshot = match result {
            Ok(snapshot) => snapshot,
            Err(e) => {
                self.error = Some(e.to_string());
                return false;
            }
        };
        self.error = None;
        self.read_at = Some(Instant::now());
        let keys: HashMap<String, ChangeKey> = snapshot
            .leases
            .iter()
            .map(|l| (l.name.clone(), l.change_key(snapshot.now)))
            .collect();
        let changed: Vec<&String> = keys
            .iter()
            .filter(|(name, key)| self.keys.get(*name) != Some(key))
            .map(|(name, _)| name)
            .collect();
        let gone = self.keys.keys().any(|name| !keys.contains_key(name));
        let first = self.snapshot.is_none();
        let moved = first || gone || !changed.is_empty();
        if moved {
            self.index += 1;
            for name in changed {
                self.modified.insert(name.clone(), self.index);
            }
            self.modified.retain(|name, _| keys.contains_key(name));
        }
        self.keys = keys;
        self.snapshot = Some(snapshot);
        moved
    }

    fn record_metrics(&self) {
        let Some(snapshot) = &self.snapshot else {
            return;
        };
        for lease in &snapshot.leases {
            let name = lease.name.clone();
            let led = lease.live_holder(snapshot.now).is_some();
            metrics::gauge!("tenure_observed_leader", "name" => name.clone()).set(if led {
                1.0
            } else {
                0.0
            });
            metrics::gauge!("tenure_observed_term", "name" => name).set(lease.term as f64);
        }
    }
}

/// A handle on the shared watcher. Cheap to clone; [`stop`](Watcher::stop) ends it for all.
#[derive(Clone, Debug)]
pub(crate) struct Watcher {
    view: watch::Receiver<Arc<View>>,
    waiting: Arc<AtomicUsize>,
    renewals: Arc<Mutex<Renewals>>,
    task: AbortHandle,
}

impl Watcher {
    /// Starts the watcher on the current runtime: a read now, then every `interval` and on
    /// every notification of the backend but the etcd layer's ([`super::beyond_etcd`]).
    pub(crate) fn spawn(store: Store, interval: Duration) -> Watcher {
        let (tx, view) = watch::channel(Arc::new(View::default()));
        let changes = store.changes();
        let renewals = Arc::new(Mutex::new(Renewals::default()));
        let task = tokio::spawn(poll(store, tx, interval, changes, renewals.clone()));
        Watcher {
            view,
            waiting: Arc::new(AtomicUsize::new(0)),
            renewals,
            task: task.abort_handle(),
        }
    }

    /// The renewals seen so far, per name (`GET /v1/renewals`).
    pub(crate) fn renewals(&self) -> RenewalsJson {
        self.renewals
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .json()
    }

    /// The latest view.
    pub(crate) fn current(&self) -> Arc<View> {
        self.view.borrow().clone()
    }

    /// How many requests are waiting in [`wait`](Watcher::wait) now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// Waits (at most `wait`) until the view has been read once and the resource's index —
    /// `resource(view)`, `None` if the view does not have it — differs from `index`, and returns
    /// the view of that moment. An `index` above the view's own (from an earlier run of the
    /// server) or an absent resource answers at once, as does a stopped watcher.
    ///
    /// # Cancel safety
    /// Cancel safe: it only watches.
    pub(crate) async fn wait(
        &self,
        index: u64,
        wait: Duration,
        resource: impl Fn(&View) -> Option<u64>,
    ) -> Arc<View> {
        let _waiting = Waiting::enter(&self.waiting);
        let mut view = self.view.clone();
        let deadline = tokio::time::sleep(wait);
        tokio::pin!(deadline);
        loop {
            let current = view.borrow_and_update().clone();
            let blocks = current.snapshot.is_none()
                || resource(&current).is_some_and(|r| index >= r && index <= current.index);
            if !blocks {
                return current;
            }
            tokio::select! {
                changed = view.changed() => if changed.is_err() {
                    return view.borrow().clone();
                },
                () = &mut deadline => return current,
            }
        }
    }

    /// Stops reading: every waiting request answers now with the last view.
    pub(crate) fn stop(&self) {
        self.task.abort();
    }

    /// Waits (at most `within`) for the first read; returns whether it succeeded.
    pub(crate) async fn first_read(&self, within: Duration) -> bool {
        let mut view = self.view.clone();
        let read = view.wait_for(|v| v.snapshot.is_some() || v.error.is_some());
        let read = match tokio::time::timeout(within, read).await {
            Ok(Ok(v)) => v.snapshot.is_some(),
            _ => false,
        };
        read
    }
}

/// Counts a waiting request for as long as it waits, even if it is dropped half way (its
/// client went away).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Waiting<'a> {
        count.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!("tenure_serve_waiting_requests").increment(1.0);
        Waiting(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!("tenure_serve_waiting_requests").decrement(1.0);
    }
}

async fn poll(
    store: Store,
    tx: watch::Sender<Arc<View>>,
    interval: Duration,
    mut changes: Changes,
    renewals: Arc<Mutex<Renewals>>,
) {
    let mut view = View::default();
    let mut vacancies = tenure::telemetry::Vacancies::new();
    loop {
        // What was announced before this read is in it; only later notes need another.
        changes.skip_pending();
        let result = store.list().await;
        metrics::counter!("tenure_serve_polls_total").increment(1);
        match &result {
            Ok(snapshot) => {
                vacancies.observe(snapshot);
                renewals
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .observe(snapshot);
            }
            Err(e) => {
                metrics::counter!("tenure_serve_poll_errors_total").increment(1);
                if view.error.is_none() {
                    tracing::warn!(error = %e, "cannot read the leases; retrying");
                }
            }
        }
        let moved = view.absorb(result);
        view.record_metrics();
        let published = Arc::new(view.clone());
        // Every read is published, so plain reads of the view are fresh; only a change wakes
        // the waiting requests.
        tx.send_if_modified(|current| {
            *current = published;
            moved
        });
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = changes.changed(super::beyond_etcd) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure::DbTime;

    fn lease(name: &str, holder: Option<&str>, term: u64, expires: i64) -> Lease {
        Lease {
            name: name.into(),
            holder: holder.map(str::to_string),
            term,
            acquired_at: DbTime(0),
            renewed_at: DbTime(0),
            expires_at: DbTime(expires),
            ttl_ms: 10_000,
            metadata: None,
            handover_to: None,
            paused: false,
        }
    }

    fn snapshot(now: i64, leases: Vec<Lease>) -> tenure::Result<Snapshot> {
        Ok(Snapshot {
            now: DbTime(now),
            leases,
        })
    }

    /// An etcd write (its layer's signal) wakes neither the lease view nor Consul's index;
    /// a lease's, Consul's, or "anything may have changed" does.
    #[test]
    fn etcd_writes_wake_neither_the_lease_view_nor_consuls_index() {
        use tenure::Topic;
        #[cfg(feature = "etcd")]
        assert!(!crate::serve::beyond_etcd(Topic::Layer(
            tenure::etcd::TOPIC
        )));
        assert!(!crate::serve::beyond_etcd(Topic::Layer("etcd")));
        assert!(crate::serve::beyond_etcd(Topic::Lease("etcd")));
        assert!(crate::serve::beyond_etcd(Topic::Layer("consul")));
        assert!(crate::serve::beyond_etcd(Topic::Any));
    }

    #[test]
    fn only_changes_that_matter_raise_the_index() {
        let mut view = View::default();
        assert!(view.absorb(snapshot(0, vec![lease("a", Some("x"), 1, 100)])));
        assert_eq!((view.index, view.modified["a"]), (1, 1));
        // A renewal (later expiry, same holder and term) is not a change.
        assert!(!view.absorb(snapshot(50, vec![lease("a", Some("x"), 1, 150)])));
        assert_eq!(view.index, 1);
        // A second name appears: only it is marked.
        assert!(view.absorb(snapshot(
            60,
            vec![lease("a", Some("x"), 1, 150), lease("b", None, 0, 0)]
        )));
        assert_eq!(
            (view.index, view.modified["a"], view.modified["b"]),
            (2, 1, 2)
        );
        // The holder's lease runs out by the database's clock: nobody leads any more.
        assert!(view.absorb(snapshot(
            200,
            vec![lease("a", Some("x"), 1, 150), lease("b", None, 0, 0)]
        )));
        assert_eq!(
            (view.index, view.modified["a"], view.modified["b"]),
            (3, 3, 2)
        );
        // A failed read changes nothing but the error.
        assert!(!view.absorb(Err(tenure::Error::Timeout(Duration::from_secs(1)))));
        assert_eq!(view.index, 3);
        assert!(view.error.is_some());
        assert!(!view.absorb(snapshot(
            210,
            vec![lease("a", Some("x"), 1, 150), lease("b", None, 0, 0)]
        )));
        assert!(view.error.is_none());
    }
}
