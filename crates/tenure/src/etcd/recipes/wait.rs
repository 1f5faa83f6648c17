//! How the recipes wait for a key to go (etcd's `waitDelete` and `waitDeletes`): they follow
//! the log from a revision on, woken by the layer's change signals (PostgreSQL's NOTIFY,
//! SQLite's doorbell) or, where there are none (MySQL, a pooler without a notify URL), by the
//! handle's poll interval (or a nudge, `Etcd::woken_by`: `tenure serve`'s watch hub reads the
//! log four times a second); and as they wait they reap leases that have ended (when a poll
//! interval passes without a signal, and at most once per interval otherwise), so that a
//! holder whose lease ran out lets the next one in even where no server reaps.

use super::super::error::{Error, Result};
use super::super::proto::etcdserverpb::range_request::{SortOrder, SortTarget};
use super::super::proto::etcdserverpb::{RangeRequest, RangeResponse};
use super::super::proto::mvccpb::event::EventType;
use super::super::rules::span::prefix_end;
use super::super::{Etcd, TOPIC};
use crate::changes::{Changes, Topic};
use tokio::time::Instant;

/// How many ended leases one wake-up reaps at most.
const REAP_BATCH: u32 = 100;
/// How many events one read of the log takes at most.
const EVENTS_BATCH: usize = 256;

impl Etcd {
    /// The key of `prefix` (`name/`) with the lowest create revision (etcd's
    /// `WithFirstCreate`), or with `last`, the highest (`WithLastCreate`) at or below
    /// `max_create` (0: any).
    pub(super) async fn edge(
        &self,
        prefix: &[u8],
        last: bool,
        max_create: i64,
    ) -> Result<RangeResponse> {
        let order = if last {
            SortOrder::Descend
        } else {
            SortOrder::Ascend
        };
        self.range(&RangeRequest {
            key: prefix.to_vec(),
            range_end: prefix_end(prefix),
            limit: 1,
            sort_order: order as i32,
            sort_target: SortTarget::Create as i32,
            max_create_revision: max_create,
            ..RangeRequest::default()
        })
        .await
    }

    /// Waits until every key of `prefix` created at or below `max_create` is gone (etcd's
    /// `waitDeletes`).
    pub(super) async fn wait_deletes(&self, prefix: &[u8], max_create: i64) -> Result<()> {
        loop {
            let found = self.edge(prefix, true, max_create).await?;
            let Some(last) = found.kvs.first() else {
                return Ok(());
            };
            let from = found.header.map_or(0, |h| h.revision);
            self.wait_delete(&last.key, from).await?;
        }
    }

    /// Waits until `key` is deleted at revision `from` or later (etcd's `waitDelete`). If the
    /// log was compacted past `from` meanwhile it returns, and the caller looks again.
    async fn wait_delete(&self, key: &[u8], mut from: i64) -> Result<()> {
        let mut waiting = self.waiting();
        loop {
            match self.events(from, key, b"", EVENTS_BATCH).await {
                Ok(run) => {
                    let deleted = run
                        .events
                        .iter()
                        .any(|e| e.r#type == EventType::Delete as i32);
                    if deleted {
                        return Ok(());
                    }
                    from = run.through + 1;
                }
                Err(Error::Compacted { .. }) => return Ok(()),
                Err(e) => return Err(e),
            }
            self.pause(&mut waiting).await?;
        }
    }

    /// What a recipe keeps between its pauses, from now on.
    pub(super) fn waiting(&self) -> Waiting {
        let mut nudges = self.nudges.clone();
        if let Some(nudges) = nudges.as_mut() {
            nudges.mark_unchanged();
        }
        Waiting {
            changes: self.store.changes(),
            nudges,
            reaped: Instant::now(),
        }
    }

    /// Waits for a change signal of the layer, a nudge ([`Etcd::woken_by`]), or the poll
    /// interval. Leases that have ended are reaped when the poll interval passed without a
    /// signal or nudge, and at most once per poll interval under a stream of them: a signal
    /// (the handoff's, a deleted key) is answered without a reap before it.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(super) async fn pause(&self, waiting: &mut Waiting) -> Result<()> {
        let nudges = waiting.nudges.as_mut();
        let nudged = async move {
            if let Some(nudges) = nudges {
                if nudges.changed().await.is_ok() {
                    return;
                }
            }
            // No nudges, or their sender gone: only the signals and the poll interval wake.
            std::future::pending::<()>().await;
        };
        let signalled = tokio::select! {
            () = waiting.changes.changed(|t| t == Topic::Layer(TOPIC)) => true,
            () = nudged => true,
            () = tokio::time::sleep(self.poll) => false,
        };
        if !signalled || waiting.reaped.elapsed() >= self.poll {
            self.reap(REAP_BATCH).await?;
            waiting.reaped = Instant::now();
        }
        Ok(())
    }
}

/// A waiting recipe's change signals, and when it last reaped ended leases.
#[derive(Debug)]
pub(super) struct Waiting {
    changes: Changes,
    nudges: Option<tokio::sync::watch::Receiver<u64>>,
    reaped: Instant,
}

/// `prefix` followed by the lease's id in hex, as etcd's recipes name a waiter's key (Go's
/// `%x` of an `int64`).
pub(super) fn waiter_key(prefix: &[u8], lease: i64) -> Vec<u8> {
    let id = if lease < 0 {
        format!("-{:x}", lease.unsigned_abs())
    } else {
        format!("{lease:x}")
    };
    let mut key = prefix.to_vec();
    key.extend_from_slice(id.as_bytes());
    key
}

/// `name` with etcd's separator: the recipes' keys are `name/<lease>`.
pub(super) fn prefix_of(name: &[u8]) -> Vec<u8> {
    let mut prefix = name.to_vec();
    prefix.push(b'/');
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A nudge wakes a waiting recipe at once, where the poll interval would have it wait a
    /// minute; a nudge sent before it began to wait does not.
    #[tokio::test]
    async fn a_nudge_wakes_a_waiting_recipe() {
        let dir = tempfile::tempdir().expect("tempdir");
        let url = format!("sqlite://{}", dir.path().join("nudge.db").display());
        let store = crate::Store::connect(&url).await.expect("connect");
        let (nudge, nudges) = tokio::sync::watch::channel(0);
        let etcd = Etcd::new(store)
            .poll_interval(std::time::Duration::from_secs(60))
            .woken_by(nudges);
        nudge.send_replace(1);
        // The process's first subscriber to SQLite's doorbell is woken once (a release may
        // have come unrung before it held its waiting mark): that one is not the test's.
        let _first = etcd.waiting();
        let mut waiting = etcd.waiting();
        let pause = etcd.pause(&mut waiting);
        tokio::pin!(pause);
        let early = tokio::time::timeout(std::time::Duration::from_millis(200), &mut pause).await;
        assert!(early.is_err(), "an old nudge woke it");
        nudge.send_replace(2);
        tokio::time::timeout(std::time::Duration::from_secs(20), pause)
            .await
            .expect("the nudge woke it")
            .expect("paused");
    }

    #[test]
    fn keys_are_etcds() {
        assert_eq!(waiter_key(b"lock/", 0x694d_7b3c), b"lock/694d7b3c");
        assert_eq!(waiter_key(b"l/", -31), b"l/-1f");
        assert_eq!(prefix_of(b"job"), b"job/");
    }
}
