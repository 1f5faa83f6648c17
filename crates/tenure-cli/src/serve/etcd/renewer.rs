//! Keep-alives, renewed in batches: every keep-alive stream of this server hands its lease
//! ids to one task, which renews whatever has queued up in one transaction of the layer
//! (`lease_keep_alive_many`: two statements, however many leases). Under no load a
//! keep-alive goes alone at once; under many, each database round trip serves them all —
//! what keeps thousands of leases alive at a small cost to the database.

use super::status;
use tenure::etcd::Etcd;
use tenure_etcd_proto::etcdserverpb::LeaseKeepAliveResponse;
use tokio::sync::{mpsc, oneshot};
use tonic::Status;

/// The most leases one transaction renews.
const BATCH: usize = 1000;

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

/// Takes what has queued up (at least one), renews it in one call, answers each.
async fn renew(etcd: Etcd, mut asks: mpsc::Receiver<Ask>) {
    let mut batch = Vec::with_capacity(BATCH);
    while asks.recv_many(&mut batch, BATCH).await > 0 {
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
