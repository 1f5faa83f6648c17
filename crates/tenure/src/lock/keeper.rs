//! The keep-alive task: every renew interval (the shortest among the held locks), one batched
//! renewal of every held lock — at most [`GROUP`] per call, larger batches in calls of that many
//! in turn; a lock not renewed, or whose deadline passes, is lost.

use super::{Inner, Table};
use crate::belief::deadline_of;
use crate::telemetry::Ended;
use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

/// The most locks one keep-alive call renews. A call's time grows with its locks, its bound
/// (`db_timeout`, a fifth of the ttl) does not, and a call past its bound renews nothing — nor
/// would the next, as large: every lock would be lost. MariaDB took 1.7 s for 100,000 in one call
/// on the 2-core machine of docs/benchmarks.md, against the 2 s bound of a 10 s ttl (a lock's
/// default is 60 s: 12 s).
/// Each call of a batch has a transaction and a bound of its own, and its locks' deadlines move
/// with its own answer.
const GROUP: usize = 10_000;

pub(super) async fn keep_alive(inner: Weak<Inner>, wake: Arc<Notify>) {
    // When the next batch is due. A lock just taken is fresh: taking one only brings the next
    // batch forward if its renew interval is shorter, it never triggers a batch by itself.
    let mut next_batch: Option<Instant> = None;
    loop {
        let Some(strong) = inner.upgrade() else {
            return;
        };
        let now = Instant::now();
        let (batch, tick, earliest) = {
            let mut table = strong.table();
            expire(&mut table, now);
            let held = &table.held;
            let batch: Vec<(String, u64)> = held
                .iter()
                .filter(|(_, h)| h.keep_alive)
                .map(|(n, h)| (n.clone(), h.belief.term()))
                .collect();
            let tick = held
                .values()
                .filter(|h| h.keep_alive)
                .map(|h| h.timing.renew_interval())
                .min();
            let earliest = held.values().map(|h| h.belief.deadline()).min();
            (batch, tick, earliest)
        };
        next_batch = match (tick, next_batch) {
            (None, _) => None,
            (Some(tick), Some(due)) if now >= due => {
                renew(&strong, &batch).await;
                Some(now + tick)
            }
            (Some(tick), Some(due)) => Some(due.min(now + tick)),
            (Some(tick), None) => Some(now + tick),
        };
        let wake_at = match (next_batch, earliest) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let notified = wake.notified();
        drop(strong);
        match wake_at {
            Some(at) => {
                tokio::select! {
                    () = sleep_until(at) => {}
                    () = notified => {}
                }
            }
            None => {
                // Nothing held: wait for a lock, but let a dropped `Locks` end the task.
                tokio::select! {
                    () = notified => {}
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    }
}

/// Ends the beliefs whose deadline has passed; their terms become stale.
fn expire(table: &mut Table, now: Instant) {
    let expired: Vec<(String, u64)> = table
        .held
        .iter()
        .filter(|(_, h)| h.belief.deadline() <= now)
        .map(|(name, h)| (name.clone(), h.belief.term()))
        .collect();
    for (name, term) in expired {
        tracing::warn!(
            name,
            term,
            "lock lost: its deadline passed without a renewal"
        );
        table.end(&name, term, Ended::Deadline);
    }
    table.kept.retain(|_, (_, until)| *until > now);
}

async fn renew(inner: &Inner, batch: &[(String, u64)]) {
    for group in batch.chunks(GROUP) {
        renew_group(inner, group).await;
    }
}

/// One keep-alive call: renews `batch` (at most [`GROUP`] locks) and moves their deadlines.
async fn renew_group(inner: &Inner, batch: &[(String, u64)]) {
    let sent = Instant::now();
    let timeout = {
        let table = inner.table();
        table
            .held
            .values()
            .map(|h| h.timing.db_timeout())
            .min()
            .unwrap_or(Duration::from_secs(1))
    };
    let result = inner
        .store
        .with_timeout(timeout)
        .renew_many(&inner.holder, batch)
        .await;
    let received = Instant::now();
    let renewed = match result {
        Ok(renewed) => renewed,
        Err(e) => {
            tracing::warn!(error = %e, locks = batch.len(), "keep-alive failed; the deadlines still run");
            return;
        }
    };
    let still: HashMap<&str, &crate::model::Lease> = renewed
        .leases
        .iter()
        .map(|lease| (lease.name.as_str(), lease))
        .collect();
    let mut table = inner.table();
    for (name, term) in batch {
        let Some(h) = table.held.get(name) else {
            continue;
        };
        if h.belief.term() != *term {
            continue;
        }
        let deadline = still
            .get(name.as_str())
            .filter(|lease| lease.term == *term)
            .map(|lease| deadline_of(&h.timing, lease, renewed.now, sent, received));
        let ended = match deadline {
            None => Some(Ended::Replaced),
            Some(None) => Some(Ended::Deadline),
            Some(Some(deadline)) => (!h.belief.extend(deadline, sent)).then_some(Ended::Deadline),
        };
        if let Some(why) = ended {
            tracing::warn!(
                name,
                term,
                "lock lost: not renewed in time (taken, paused, handed over or expired)"
            );
            table.end(name, *term, why);
        }
    }
}
