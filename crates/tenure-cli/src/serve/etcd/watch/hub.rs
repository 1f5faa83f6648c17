//! The watch hub: one follower of the log per server. It reads every new revision's events
//! once — woken by the layer's change signals (PostgreSQL's NOTIFY, SQLite's doorbell, a
//! server's own commits) and at least every [`MOST_BETWEEN_READS`] (or the poll interval, if
//! shorter: MySQL pushes nothing, nor does PostgreSQL behind a transaction pooler, so this
//! bounds how late a watcher sees a write made through another server there) — and publishes
//! them, in revision order and whole revisions at a time, to every watcher of this server;
//! each watcher keeps what its range and filters ask for. However many watchers there are,
//! the database sees one read per change, and four a second when nothing changes.
//!
//! The feed is a broadcast of [`Batch`]es, each covering the revisions after the last (every
//! event of every key in them), gapless: batch n+1 starts where batch n ended. A watcher
//! subscribes first and reads [`Hub::position`] after, so that every batch past the position
//! reaches it; what lies before (a watch from the past) it reads from the log itself. One
//! that falls behind the feed's buffer reads from the log too, and joins again.
//!
//! **A history that lost revisions.** An asynchronous failover of the database can lose its
//! last commits: revisions this hub read and published may never have happened on the
//! promoted server, and the next write there begins a new epoch far above them. A watcher
//! that saw them, or waits for an event of a key that only they held (an `etcdctl lock`
//! waiter watching the deletion of a lost key), would wait for ever. The hub notices when the
//! database's revision lies below the position it published, or when new revisions begin
//! past a gap and the log no longer holds that position; it then counts a [`Divergence`] and
//! sends [`Batch::diverged`], on which every watcher ends with etcd's compacted cancel at the
//! first revision of the new history (clients watch again from there, or fail the wait, as
//! after a compaction), and goes on from the database's history. A watcher that fell behind
//! the feed and missed that batch learns it from the count.

use super::watcher::revision_of;
use crate::serve::metrics;
use std::sync::Arc;
use std::time::Duration;
use tenure::etcd::{Error, Etcd, Events, TOPIC};
use tenure::Topic;
use tenure_etcd_proto::mvccpb::Event;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

/// How many events one read of the log takes (more when one revision holds more).
const READ_LIMIT: usize = 1000;

/// The longest time between two reads' starts, whatever `--poll-interval` says (as Consul's
/// index poller): one indexed read of the log's end, four a second, is what a watcher on
/// another server of a MySQL database waits at most for a write (plus that read), where a
/// second made `etcdctl lock`'s handoff between two servers a second long.
pub(crate) const MOST_BETWEEN_READS: Duration = Duration::from_millis(250);

/// Every event of the revisions `from` through `through` (`from` is one past the previous
/// batch's `through`).
#[derive(Debug)]
pub(super) struct Batch {
    pub from: i64,
    pub through: i64,
    pub events: Vec<Event>,
    /// The events of these revisions were compacted before the hub read them: a watcher
    /// that needs them reads the log itself (and learns the floor).
    pub lost: bool,
    /// The database's history no longer holds revisions the hub published (a failover lost
    /// them): every watcher ends, cancelled as compacted at this revision, the first one of
    /// the new history it has not seen.
    pub diverged: Option<i64>,
}

/// The divergences the hub has seen, and the last one's first revision of the new history.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Divergence {
    pub count: u64,
    pub resume: i64,
}

/// The hub's handle. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Hub {
    feed: broadcast::Sender<Arc<Batch>>,
    position: watch::Receiver<i64>,
    divergence: watch::Receiver<Divergence>,
    nudges: watch::Receiver<u64>,
}

impl Hub {
    /// Starts following the log on the current runtime, until `stopping` turns true; the feed
    /// keeps `buffer` batches for a slow watcher.
    pub(crate) fn spawn(
        etcd: Etcd,
        poll: Duration,
        buffer: usize,
        stopping: watch::Receiver<bool>,
    ) -> Hub {
        let (feed, _) = broadcast::channel(buffer.max(1));
        let (published, position) = watch::channel(0);
        let (diverged, divergence) = watch::channel(Divergence::default());
        let (nudge, nudges) = watch::channel(0);
        let outlet = Outlet {
            feed: feed.clone(),
            published,
            diverged,
            nudge,
        };
        tokio::spawn(follow(etcd, poll, outlet, stopping));
        Hub {
            feed,
            position,
            divergence,
            nudges,
        }
    }

    /// Counts the reads that the clock started (no change signal had woken the hub) and that
    /// found new revisions: the layer's waiting recipes (a `Lock`, a campaign, an observer)
    /// look at the log when it moves ([`Etcd::woken_by`]), so that where the database sends
    /// no signal (MySQL; PostgreSQL behind a pooler) they learn of a release from another
    /// server within the hub's quarter second, not the poll interval.
    pub(crate) fn nudges(&self) -> watch::Receiver<u64> {
        self.nudges.clone()
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

    /// The divergences seen so far (counted before their batch is sent).
    pub(super) fn divergence(&self) -> Divergence {
        *self.divergence.borrow()
    }
}

/// Where the follower publishes.
struct Outlet {
    feed: broadcast::Sender<Arc<Batch>>,
    published: watch::Sender<i64>,
    diverged: watch::Sender<Divergence>,
    /// Counts the timed reads that found new revisions (see [`Hub::nudges`]).
    nudge: watch::Sender<u64>,
}

/// Follows the log: reads what is new, publishes it, waits for a signal or the next read's
/// time.
async fn follow(etcd: Etcd, poll: Duration, outlet: Outlet, mut stopping: watch::Receiver<bool>) {
    let every = poll.min(MOST_BETWEEN_READS);
    let mut changes = etcd.store().changes();
    let mut position = None;
    // Whether the clock, not a change signal, started this read.
    let mut timed = true;
    loop {
        // The next read starts `every` after this one started, not after it ended: a write
        // that this read just missed waits at most `every` and the next read (a read slower
        // than that leaves the database a quarter of it before the next). After a failed
        // read, the next waits the whole poll interval: a database that is down is asked,
        // and warned of, no more often than before.
        let started = Instant::now();
        changes.skip_pending();
        let read = match position {
            None => match etcd.revisions().await {
                Ok(now) => {
                    metrics::etcd_revisions(now.revision, now.floor);
                    outlet.published.send_replace(now.revision);
                    position = Some(now.revision);
                    Read::Done
                }
                Err(e) => {
                    tracing::warn!(error = %e, "etcd watch hub: the first read failed");
                    Read::Failed
                }
            },
            Some(before) => {
                let (through, read) = read_new(&etcd, before, &outlet).await;
                position = Some(through);
                if timed && through > before {
                    outlet.nudge.send_modify(|n| *n += 1);
                }
                read
            }
        };
        let next = match read {
            Read::Done => (started + every).max(Instant::now() + every / 4),
            Read::Failed => Instant::now() + poll.max(every),
        };
        timed = tokio::select! {
            () = tokio::time::sleep_until(next) => true,
            () = changes.changed(|t| t == Topic::Layer(TOPIC)) => false,
            _ = stopping.wait_for(|stopping| *stopping) => return,
        };
    }
}

/// How a read of the log went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Read {
    Done,
    Failed,
}

/// Publishes every revision after `through` that the log holds now; the new position, and
/// whether every read it took succeeded.
async fn read_new(etcd: &Etcd, mut through: i64, outlet: &Outlet) -> (i64, Read) {
    loop {
        let from = through + 1;
        let batch = match etcd.events(from, b"\0", b"\0", READ_LIMIT).await {
            Ok(run) => {
                metrics::etcd_revisions(run.revision, run.floor);
                let first = run.events.first().map(revision_of);
                let resume = match diverged(etcd, through, &run, first).await {
                    Check::Whole => None,
                    Check::Diverged(resume) => Some(resume),
                    // Asked again at the next read.
                    Check::Unknown => return (through, Read::Failed),
                };
                if let Some(resume) = resume {
                    // Every watcher ends (one that fell behind the feed learns it from the
                    // count); the hub follows the database's history from the revision before
                    // the new one on.
                    outlet.diverged.send_modify(|d| {
                        d.count += 1;
                        d.resume = resume;
                    });
                    let _ = outlet.feed.send(Arc::new(Batch {
                        from: through + 1,
                        through: resume - 1,
                        events: Vec::new(),
                        lost: false,
                        diverged: Some(resume),
                    }));
                    outlet.published.send_replace(resume - 1);
                    through = resume - 1;
                    continue;
                }
                if run.through < from {
                    return (through, Read::Done);
                }
                let done = run.through >= run.revision;
                let batch = Batch {
                    from,
                    through: run.through,
                    events: run.events,
                    lost: false,
                    diverged: None,
                };
                (batch, done)
            }
            // Compacted past the hub (a retention shorter than its lag): the lost revisions
            // are announced, and the hub goes on from the floor.
            Err(Error::Compacted { floor }) => (
                Batch {
                    from,
                    through: floor - 1,
                    events: Vec::new(),
                    lost: true,
                    diverged: None,
                },
                false,
            ),
            Err(e) => {
                tracing::warn!(error = %e, "etcd watch hub: reading the log failed");
                return (through, Read::Failed);
            }
        };
        let (batch, done) = batch;
        through = batch.through;
        // Nobody listening is fine: the position still moves.
        let _ = outlet.feed.send(Arc::new(batch));
        outlet.published.send_replace(through);
        if done {
            return (through, Read::Done);
        }
    }
}

/// What [`diverged`] found.
enum Check {
    /// The database's history holds every revision the hub published.
    Whole,
    /// It lost some: the first revision of the new history after the ones both share, where
    /// watchers may watch again.
    Diverged(i64),
    /// The log could not be read to tell.
    Unknown,
}

/// Whether the database's history lost revisions the hub published through `through`: its
/// revision lies below it, or the new revisions begin past a gap (`first`, a new epoch) and
/// the log no longer holds `through`.
async fn diverged(etcd: &Etcd, through: i64, run: &Events, first: Option<i64>) -> Check {
    if through <= 0 {
        return Check::Whole;
    }
    if run.revision < through {
        tracing::warn!(
            published = through,
            revision = run.revision,
            "etcd watch hub: the database's revision went back below what this server published \
             (a failover lost commits): every watch is cancelled as compacted"
        );
        return Check::Diverged(run.revision + 1);
    }
    let Some(first) = first.filter(|&first| first > through + 1) else {
        return Check::Whole;
    };
    // A gap: a new epoch began. The history is whole if the log still holds `through`.
    match etcd.events(through, b"\0", b"\0", 1).await {
        Ok(at) if at.events.first().map(revision_of) == Some(through) => Check::Whole,
        // Compacted past it meanwhile: nothing to compare, and nothing lost that a compacted
        // watcher would not learn anyway.
        Err(Error::Compacted { .. }) => Check::Whole,
        Ok(_) => {
            tracing::warn!(
                published = through,
                next = first,
                "etcd watch hub: the database's log no longer holds a revision this server \
                 published (a failover lost commits): every watch is cancelled as compacted"
            );
            Check::Diverged(first)
        }
        Err(e) => {
            tracing::warn!(error = %e, "etcd watch hub: reading the log failed");
            Check::Unknown
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant as StdInstant;
    use tenure::backend::FailingBackend;

    /// While the database fails every read, the hub asks it once per poll interval, as before
    /// it read every quarter second when reads succeed (each failed read logs a warning): a
    /// database that is down is not asked, nor warned of, four times as often.
    #[tokio::test]
    async fn a_failing_database_is_read_once_per_poll_interval() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("hub.db").display());
        let store = tenure::Store::connect(&url).await.expect("connect");
        let failing = Arc::new(FailingBackend::new(store.backend().clone()));
        let flaky = tenure::Store::from_backend(failing.clone(), Duration::from_secs(5));
        failing.fail_at("etcd_events", Some(1));
        let (stop, stopping) = watch::channel(false);
        let poll = Duration::from_millis(800);
        let _hub = Hub::spawn(Etcd::new(flaky), poll, 16, stopping);
        let started = StdInstant::now();
        // The first read comes at once; wait for it, then for 2 more poll intervals.
        while failing.failed() == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no read failed"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let first = StdInstant::now();
        tokio::time::sleep(2 * poll + poll / 2).await;
        let reads = failing.failed();
        let spent = first.elapsed();
        stop.send_replace(true);
        // At most one read per poll interval after the first (fewer on a slow machine); at
        // a quarter second's pace it would be 10 or more.
        let most = 1 + u64::try_from(spent.as_millis() / poll.as_millis()).expect("small");
        assert!(
            (2..=most).contains(&reads),
            "{reads} failed reads in {spent:?}, poll interval {poll:?}"
        );
    }
}
