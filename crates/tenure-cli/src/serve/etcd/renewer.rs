//! Keep-alives, renewed in batches: every keep-alive stream of this server hands its lease
//! ids to one task, which renews whatever has queued up in one transaction of the layer
//! (`lease_keep_alive_many`: two statements, however many leases). A keep-alive that finds
//! the task idle for [`GATHER`] goes alone at once; under load the task starts at most one
//! transaction per [`GATHER`], and every keep-alive that arrived meanwhile rides in it — what
//! keeps thousands of leases alive at a small cost to the database.

use super::status;
use std::time::Duration;
use tenure::etcd::Etcd;
use tenure_etcd_proto::etcdserverpb::LeaseKeepAliveResponse;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tonic::Status;

/// The most leases one transaction renews.
const BATCH: usize = 1000;

/// The shortest time from one renewing transaction's start to the next's: the longest a
/// keep-alive waits for company. Small beside any lease's TTL (at least 2 s, kept alive every
/// third of it by etcd's clients).
const GATHER: Duration = Duration::from_millis(50);

/// One keep-alive waiting for its answer.
struct Ask {
    id: i64,
    answer: oneshot::Sender<Result<LeaseKeepAliveResponse, Status>>,
}

/// The handle of the renewing task. Cheap to clone.
#[derive(Clone)]
pub(super) struct Renewer(mpsc::Sender<Ask>);

impl Renewer {
    /// Starts the task on the current runtime (it ends with the last handle).
    pub(super) fn spawn(etcd: Etcd) -> Renewer {
        let (tx, rx) = mpsc::channel(4 * BATCH);
        tokio::spawn(renew(etcd, rx));
        Renewer(tx)
    }

    /// Renews lease `id` (its granted TTL from the database's now); TTL 0 in the answer when
    /// it does not exist or has ended.
    ///
    /// # Errors
    /// The layer's, as etcd answers it (the database failed or did not answer in time).
    pub(super) async fn keep_alive(&self, id: i64) -> Result<LeaseKeepAliveResponse, Status> {
        let (answer, answered) = oneshot::channel();
        if self.0.send(Ask { id, answer }).await.is_err() {
            return Err(status::stopped());
        }
        answered.await.unwrap_or_else(|_| Err(status::stopped()))
    }
}

/// When the next renewing transaction may start: [`GATHER`] after the last one started.
#[derive(Debug, Default)]
struct Pace {
    last: Option<Instant>,
}

impl Pace {
    /// The instant to wait for before a transaction that could start at `now` (`None`: start
    /// at once).
    fn hold_until(&self, now: Instant) -> Option<Instant> {
        self.last.map(|last| last + GATHER).filter(|at| *at > now)
    }

    fn started(&mut self, at: Instant) {
        self.last = Some(at);
    }
}

/// Takes what has queued up (at least one, and what came while it held back for the pace),
/// renews it in one call, answers each.
async fn renew(etcd: Etcd, mut asks: mpsc::Receiver<Ask>) {
    let mut batch = Vec::with_capacity(BATCH);
    let mut pace = Pace::default();
    while asks.recv_many(&mut batch, BATCH).await > 0 {
        if let Some(at) = pace.hold_until(Instant::now()) {
            tokio::time::sleep_until(at).await;
            while batch.len() < BATCH {
                match asks.try_recv() {
                    Ok(ask) => batch.push(ask),
                    Err(_) => break,
                }
            }
        }
        pace.started(Instant::now());
        let ids: Vec<i64> = batch.iter().map(|a| a.id).collect();
        match etcd.lease_keep_alive_many(&ids).await {
            Ok(answers) => {
                for (ask, answer) in batch.drain(..).zip(answers) {
                    let _ = ask.answer.send(Ok(answer));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, leases = batch.len(), "etcd keep-alives failed");
                let failed = status::from_layer(&e);
                for ask in batch.drain(..) {
                    let _ = ask.answer.send(Err(failed.clone()));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_keep_alive_after_a_quiet_spell_goes_at_once() {
        let mut pace = Pace::default();
        let t0 = Instant::now();
        assert_eq!(pace.hold_until(t0), None, "the first goes at once");
        pace.started(t0);
        assert_eq!(
            pace.hold_until(t0 + GATHER),
            None,
            "one GATHER later, at once"
        );
        assert_eq!(pace.hold_until(t0 + 10 * GATHER), None);
    }

    #[test]
    fn under_load_transactions_start_one_gather_apart() {
        let mut pace = Pace::default();
        let first = Instant::now();
        pace.started(first);
        let soon = first + Duration::from_millis(10);
        assert_eq!(pace.hold_until(soon), Some(first + GATHER));
        let second = first + GATHER + Duration::from_millis(3);
        assert_eq!(pace.hold_until(second), None);
        pace.started(second);
        assert_eq!(pace.hold_until(second), Some(second + GATHER));
    }
}
