//! An in-memory backend for timing tests: it runs the same model, with a database clock that
//! follows tokio's clock (so paused time moves it), and knobs to delay, hang or stall answers.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure::backend::{Backend, Renewed};
use tenure::model::{decide, DbTime, Lease, Op};
use tenure::{Applied, BackendKind, HistoryEntry, RedactedUrl, Snapshot};
use tenure::{Elector, Store, Timing};
use tokio::sync::broadcast;
use tokio::time::Instant;

/// The ttl of the timing tests' electors and locks.
pub(crate) const TTL: Duration = Duration::from_secs(1);

/// A fresh in-memory backend (with `push`, it notifies subscribers as PostgreSQL does) and a
/// store on it.
pub(crate) fn setup(push: bool) -> (Arc<MemoryBackend>, Store) {
    let backend = Arc::new(MemoryBackend::new(push));
    let store = Store::from_backend(backend.clone(), Duration::from_secs(5));
    (backend, store)
}

/// An elector for the name `job` as candidate `id`, with the timing of [`TTL`].
pub(crate) fn elector(store: &Store, id: &str) -> Elector {
    Elector::builder(store.clone(), "job")
        .candidate(id)
        .timing(Timing::from_ttl(TTL).unwrap())
        .spawn()
        .unwrap()
}

#[derive(Debug)]
pub(crate) struct MemoryBackend {
    rows: Mutex<HashMap<String, Lease>>,
    ticks: Mutex<HashMap<String, i64>>,
    start: Instant,
    url: RedactedUrl,
    notify: Option<broadcast::Sender<String>>,
    /// Each `apply` waits this long (tokio time) before deciding.
    pub delay: Mutex<Duration>,
    /// Every `apply` from now on never answers.
    pub hang: AtomicBool,
    /// The next `apply` blocks its thread this long after deciding, as a stopped process would.
    pub stall_once: Mutex<Option<Duration>>,
    /// How many `apply` calls were made.
    pub calls: AtomicUsize,
    /// The next this many `Op::Release` calls time out without changing anything.
    pub failing_releases: AtomicUsize,
    /// Calls by these actors take this round trip: half before deciding, half after.
    pub round_trips: Mutex<HashMap<String, Duration>>,
    /// Every write that lowered a row's term (P1 says never), as `name: old -> new`.
    pub term_falls: Mutex<Vec<String>>,
    /// What `renew_many` takes per lease it is asked to renew (tokio time, before deciding),
    /// as a database's time grows with a batch's size.
    pub renew_per_lease: Mutex<Duration>,
}

impl MemoryBackend {
    /// Rings `name`'s change signal without any change (a spurious wake-up, as a renewal's or
    /// another process's NOTIFY can be).
    #[allow(dead_code)]
    pub(crate) fn ring(&self, name: &str) {
        if let Some(tx) = &self.notify {
            let _ = tx.send(name.to_string());
        }
    }

    pub(crate) fn new(push_notifications: bool) -> MemoryBackend {
        MemoryBackend {
            rows: Mutex::default(),
            ticks: Mutex::default(),
            start: Instant::now(),
            url: RedactedUrl::new("memory:"),
            notify: push_notifications.then(|| broadcast::channel(64).0),
            delay: Mutex::default(),
            hang: AtomicBool::new(false),
            stall_once: Mutex::default(),
            calls: AtomicUsize::new(0),
            failing_releases: AtomicUsize::new(0),
            round_trips: Mutex::default(),
            term_falls: Mutex::default(),
            renew_per_lease: Mutex::default(),
        }
    }

    /// The database clock: a fixed epoch plus tokio's elapsed time.
    pub(crate) fn now(&self) -> DbTime {
        self.at(Instant::now())
    }

    /// The database time at tokio instant `at`.
    pub(crate) fn at(&self, at: Instant) -> DbTime {
        let since = i64::try_from((at - self.start).as_micros()).expect("a test's span");
        DbTime(1_800_000_000_000_000 + since)
    }

    pub(crate) fn row(&self, name: &str) -> Option<Lease> {
        self.rows.lock().unwrap().get(name).cloned()
    }

    /// Stores `lease` as the row of `name`, recording a write that would lower its term.
    fn write(&self, rows: &mut HashMap<String, Lease>, name: &str, lease: Lease) {
        if let Some(old) = rows.get(name).filter(|old| old.term > lease.term) {
            let fell = format!("{name}: term {} -> {}", old.term, lease.term);
            self.term_falls.lock().unwrap().push(fell);
        }
        rows.insert(name.to_string(), lease);
    }
}

#[async_trait]
impl Backend for MemoryBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Memory
    }

    fn url(&self) -> &RedactedUrl {
        &self.url
    }

    async fn apply(&self, name: &str, op: &Op, actor: &str) -> tenure::Result<Applied> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.hang.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
        let delay = *self.delay.lock().unwrap();
        tokio::time::sleep(delay).await;
        let leg = self
            .round_trips
            .lock()
            .unwrap()
            .get(actor)
            .map(|rtt| *rtt / 2);
        if let Some(leg) = leg {
            tokio::time::sleep(leg).await;
        }
        if matches!(op, Op::Release { .. })
            && self
                .failing_releases
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            return Err(tenure::Error::Timeout(Duration::from_millis(1)));
        }
        let now = self.now();
        let decision = {
            let mut rows = self.rows.lock().unwrap();
            let decision = decide(now, name, rows.get(name), op);
            if let (true, Some(lease)) = (decision.write, &decision.lease) {
                self.write(&mut rows, name, lease.clone());
            }
            decision
        };
        if let (Some(_), Some(tx)) = (&decision.event, &self.notify) {
            let _ = tx.send(name.to_string());
        }
        if let Some(stall) = self.stall_once.lock().unwrap().take() {
            std::thread::sleep(stall);
        }
        if let Some(leg) = leg {
            tokio::time::sleep(leg).await;
        }
        Ok(Applied {
            now,
            epoch: Default::default(),
            lease: decision.lease,
            effect: decision.effect,
        })
    }

    async fn renew_many(&self, holder: &str, leases: &[(String, u64)]) -> tenure::Result<Renewed> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let per_lease = *self.renew_per_lease.lock().unwrap();
        tokio::time::sleep(per_lease * u32::try_from(leases.len()).unwrap_or(u32::MAX)).await;
        let now = self.now();
        let mut rows = self.rows.lock().unwrap();
        let mut renewed = vec![];
        for (name, term) in leases {
            let op = Op::Renew {
                candidate: holder.to_string(),
                term: *term,
            };
            let decision = decide(now, name, rows.get(name), &op);
            if let (true, Some(lease)) = (decision.write, decision.lease) {
                self.write(&mut rows, name, lease.clone());
                renewed.push(lease);
            }
        }
        Ok(Renewed {
            now,
            leases: renewed,
        })
    }

    async fn last_tick(&self, name: &str) -> tenure::Result<(Option<i64>, DbTime)> {
        Ok((self.ticks.lock().unwrap().get(name).copied(), self.now()))
    }

    async fn complete_tick(
        &self,
        name: &str,
        holder: &str,
        term: u64,
        tick_ms: i64,
    ) -> tenure::Result<bool> {
        let now = self.now();
        let held = self
            .row(name)
            .is_some_and(|l| l.live_holder(now) == Some(holder) && l.term == term);
        if !held {
            return Err(tenure::Error::LeaseLost {
                name: name.to_string(),
                candidate: holder.to_string(),
                term,
            });
        }
        let mut ticks = self.ticks.lock().unwrap();
        if ticks.get(name).is_some_and(|&last| last >= tick_ms) {
            return Ok(false);
        }
        ticks.insert(name.to_string(), tick_ms);
        Ok(true)
    }

    async fn get(&self, name: &str) -> tenure::Result<Snapshot> {
        Ok(Snapshot {
            now: self.now(),
            leases: self.row(name).into_iter().collect(),
        })
    }

    async fn list(&self) -> tenure::Result<Snapshot> {
        let mut leases: Vec<_> = self.rows.lock().unwrap().values().cloned().collect();
        leases.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Snapshot {
            now: self.now(),
            leases,
        })
    }

    async fn history(&self, _name: &str, _limit: u32) -> tenure::Result<Vec<HistoryEntry>> {
        Ok(vec![])
    }

    async fn migrate(&self) -> tenure::Result<()> {
        Ok(())
    }

    async fn check_schema(&self) -> tenure::Result<()> {
        Ok(())
    }

    fn schema_sql(&self) -> String {
        String::new()
    }

    fn subscribe(&self) -> Option<broadcast::Receiver<String>> {
        self.notify.as_ref().map(|tx| tx.subscribe())
    }
}
