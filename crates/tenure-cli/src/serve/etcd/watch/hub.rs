//! The watch hub: one follower of the log per server. It reads every new revision's events
//! once — woken by the layer's change signals (PostgreSQL's NOTIFY, SQLite's doorbell) or
//! every poll interval (MySQL has none) — and publishes them, in revision order and whole
//! revisions at a time, to every watcher of this server; each watcher keeps what its range
//! and filters ask for. However many watchers there are, the database sees one read per
//! change.
//!
//! The feed is a broadcast of [`Batch`]es, each covering the revisions after the last (every
//! event of every key in them), gapless: batch n+1 starts where batch n ended. A watcher
//! subscribes first and reads [`Hub::position`] after, so that every batch past the position
//! reaches it; what lies before (a watch from the past) it reads from the log itself. One
//! that falls behind the feed's buffer reads from the log too, and joins again.

use crate::serve::metrics;
use std::sync::Arc;
use std::time::Duration;
use tenure::etcd::{Error, Etcd, TOPIC};
use tenure::Topic;
use tenure_etcd_proto::mvccpb::Event;
use tokio::sync::{broadcast, watch};

/// How many events one read of the log takes (more when one revision holds more).
const READ_LIMIT: usize = 1000;
/// How many batches the feed keeps for a slow watcher before it must read the log itself.
const FEED_BUFFER: usize = 1024;

/// Every event of the revisions after the previous batch's, through `through`.
#[derive(Debug)]
pub(super) struct Batch {
    pub through: i64,
    pub events: Vec<Event>,
    /// The events of these revisions were compacted before the hub read them: a watcher
    /// that needs them reads the log itself (and learns the floor).
    pub lost: bool,
}

/// The hub's handle. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Hub {
    feed: broadcast::Sender<Arc<Batch>>,
    position: watch::Receiver<i64>,
}

impl Hub {
    /// Starts following the log on the current runtime, until `stopping` turns true.
    pub(crate) fn spawn(etcd: Etcd, poll: Duration, stopping: watch::Receiver<bool>) -> Hub {
        let (feed, _) = broadcast::channel(FEED_BUFFER);
        let (published, position) = watch::channel(0);
        tokio::spawn(follow(etcd, poll, feed.clone(), published, stopping));
        Hub { feed, position }
    }

    /// The feed, and then the revision it has published through: every batch after that
    /// position reaches the receiver.
    pub(super) fn subscribe(&self) -> (broadcast::Receiver<Arc<Batch>>, i64) {
        let feed = self.feed.subscribe();
        (feed, self.position())
    }

    /// The revision the feed has published through (0 until the first read).
    pub(super) fn position(&self) -> i64 {
        *self.position.borrow()
    }
}

/// Follows the log: reads what is new, publishes it, waits for a signal or the poll.
async fn follow(
    etcd: Etcd,
    poll: Duration,
    feed: broadcast::Sender<Arc<Batch>>,
    published: watch::Sender<i64>,
    mut stopping: watch::Receiver<bool>,
) {
    let mut changes = etcd.store().changes();
    let mut position = None;
    loop {
        changes.skip_pending();
        match position {
            None => match etcd.revisions().await {
                Ok(now) => {
                    metrics::etcd_revisions(now.revision, now.floor);
                    published.send_replace(now.revision);
                    position = Some(now.revision);
                }
                Err(e) => tracing::warn!(error = %e, "etcd watch hub: the first read failed"),
            },
            Some(through) => position = Some(read_new(&etcd, through, &feed, &published).await),
        }
        tokio::select! {
            () = tokio::time::sleep(poll) => {}
            () = changes.changed(|t| t == Topic::Layer(TOPIC)) => {}
            _ = stopping.wait_for(|stopping| *stopping) => return,
        }
    }
}

/// Publishes every revision after `through` that the log holds now; the new position.
async fn read_new(
    etcd: &Etcd,
    mut through: i64,
    feed: &broadcast::Sender<Arc<Batch>>,
    published: &watch::Sender<i64>,
) -> i64 {
    loop {
        let from = through + 1;
        let batch = match etcd.events(from, b"\0", b"\0", READ_LIMIT).await {
            Ok(run) => {
                metrics::etcd_revisions(run.revision, run.floor);
                if run.through < from {
                    return through;
                }
                let done = run.through >= run.revision;
                let batch = Batch {
                    through: run.through,
                    events: run.events,
                    lost: false,
                };
                (batch, done)
            }
            // Compacted past the hub (a retention shorter than its lag): the lost revisions
            // are announced, and the hub goes on from the floor.
            Err(Error::Compacted { floor }) => (
                Batch {
                    through: floor - 1,
                    events: Vec::new(),
                    lost: true,
                },
                false,
            ),
            Err(e) => {
                tracing::warn!(error = %e, "etcd watch hub: reading the log failed");
                return through;
            }
        };
        let (batch, done) = batch;
        through = batch.through;
        // Nobody listening is fine: the position still moves.
        let _ = feed.send(Arc::new(batch));
        published.send_replace(through);
        if done {
            return through;
        }
    }
}
