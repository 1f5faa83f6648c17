//! A member's task: one tick per renew interval (`tick.rs`: one transaction that registers,
//! reads the group, renews the shards still believed, releases the ones given back and takes
//! free ones), again at once when a guard comes back (its shard may go to another member
//! now), and in between the end of every belief whose deadline passes.

use super::guard::Returned;
use super::shards::Shards;
use super::tick::{Farewell, Me, Tick};
use super::view::Cell;
use crate::config::Timing;
use crate::store::Store;
use std::collections::BTreeSet;
use tokio::sync::{mpsc, watch};
use tokio::time::{sleep_until, Instant};
use tokio_util::sync::CancellationToken;

/// How often (in ticks) a member also drops the rows of members that expired; and at its
/// first tick.
const PURGE_EVERY: u64 = 240;

pub(super) struct Task {
    pub(super) store: Store,
    pub(super) me: Me,
    pub(super) timing: Timing,
    pub(super) statements: Cell,
    pub(super) shards: Shards,
    pub(super) send: mpsc::UnboundedSender<super::ShardGuard>,
    pub(super) owned: watch::Sender<BTreeSet<u32>>,
    pub(super) returns: mpsc::UnboundedReceiver<Returned>,
    pub(super) stop: CancellationToken,
    pub(super) ticks: u64,
}

impl Task {
    pub(super) async fn run(mut self) {
        let stop = self.stop.clone();
        'ticks: while !stop.is_cancelled() {
            // Every renew interval from the start of a tick, however long the tick took.
            let next = Instant::now() + self.timing.renew_interval();
            self.tick().await;
            loop {
                let wake = self
                    .shards
                    .earliest_deadline()
                    .map_or(next, |d| d.min(next));
                tokio::select! {
                    () = sleep_until(wake) => {
                        self.shards.expire();
                        self.publish();
                        if Instant::now() >= next {
                            break;
                        }
                    }
                    Some(returned) = self.returns.recv() => {
                        self.shards.returned(returned);
                        while let Ok(more) = self.returns.try_recv() {
                            self.shards.returned(more);
                        }
                        self.publish();
                        break;
                    }
                    () = stop.cancelled() => break 'ticks,
                }
            }
        }
        self.leave().await;
    }

    /// Publishes the shards the work holds and has not been asked to give back.
    fn publish(&self) {
        let owned = self.shards.owned();
        self.owned.send_if_modified(|o| {
            let changed = *o != owned;
            *o = owned;
            changed
        });
    }

    /// One tick: its transaction, then what it committed (guards handed out at once).
    async fn tick(&mut self) {
        self.shards.expire();
        self.publish();
        let local = self.shards.local();
        let mut body = Tick {
            statements: &self.statements,
            me: &self.me,
            local: &local,
            purge: self.ticks.is_multiple_of(PURGE_EVERY),
            done: None,
        };
        self.ticks += 1;
        let sent = Instant::now();
        let result = self.store.transaction(&mut body).await;
        let received = Instant::now();
        match (result, body.done) {
            (Ok(()), Some(ticked)) => {
                for guard in self.shards.ticked(ticked, sent, received) {
                    // If the member's stream is gone (it is leaving), the guard is dropped
                    // here, comes back, and is released like any other.
                    drop(self.send.send(guard));
                }
            }
            (Ok(()), None) => {}
            (Err(e), _) => {
                tracing::warn!(group = self.me.group, error = %e, "spread: a tick failed; its beliefs end at their deadlines unless the next one renews them");
            }
        }
        self.publish();
    }

    /// A clean leave: every shard surrendered, each lease released as its guard comes back
    /// (the work is given until the leases would expire to drop them), then the member's row
    /// dropped with the last releases.
    async fn leave(mut self) {
        self.shards.surrender_all();
        self.publish();
        let give_up = Instant::now() + self.timing.ttl();
        while self.shards.any_out() {
            tokio::select! {
                Some(returned) = self.returns.recv() => {
                    self.shards.returned(returned);
                    while let Ok(more) = self.returns.try_recv() {
                        self.shards.returned(more);
                    }
                    self.farewell(false).await;
                }
                () = sleep_until(give_up) => break,
            }
        }
        self.publish();
        self.farewell(true).await;
    }

    /// Releases every term whose guard came back (and, at the `last`, drops the member's
    /// row), in one transaction.
    async fn farewell(&mut self, last: bool) {
        let local = self.shards.local();
        if local.stale.is_empty() && !last {
            return;
        }
        let mut body = Farewell {
            statements: &self.statements,
            me: &self.me,
            local: &local,
            last,
            done: None,
        };
        let sent = Instant::now();
        let result = self.store.transaction(&mut body).await;
        match (result, body.done) {
            (Ok(()), Some(ticked)) => {
                let guards = self.shards.ticked(ticked, sent, Instant::now());
                debug_assert!(guards.is_empty(), "a farewell takes nothing");
            }
            (Ok(()), None) => {}
            (Err(e), _) => {
                tracing::warn!(group = self.me.group, error = %e, "spread: releasing while leaving failed; the shards and the member's row expire by themselves");
            }
        }
    }
}
