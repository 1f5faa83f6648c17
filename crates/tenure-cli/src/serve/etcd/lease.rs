//! `Lease`: Grant, Revoke, the KeepAlive stream, TimeToLive and Leases on the layer.
//!
//! A KeepAlive stream answers each request in order with the lease's granted TTL (renewed
//! from the database's now), or TTL 0 for a lease that does not exist or has ended — the
//! stream stays open — and ends when the client closes its side, as etcd's does. Its
//! renewals go through the server's [`Renewer`](super::renewer::Renewer), in batches: a
//! stream reads on while its earlier requests are renewed, so that a client keeping many
//! leases alive (Go's lessor sends every due lease's request at once) has them renewed in a
//! few transactions, not one each.

use super::call::{Outbound, Rpc};
use super::Room;
use futures_util::stream::{FuturesOrdered, StreamExt};
use tenure_etcd_proto::etcdserverpb::lease_server::Lease;
use tenure_etcd_proto::etcdserverpb::*;
use tonic::{Request, Response, Status, Streaming};

type Answer<A> = Result<Response<A>, Status>;

/// The most keep-alives of one stream being renewed at once; the stream reads no further
/// request until an answer has gone.
const IN_FLIGHT: usize = 1000;

#[tonic::async_trait]
impl Lease for Room {
    async fn lease_grant(&self, request: Request<LeaseGrantRequest>) -> Answer<LeaseGrantResponse> {
        self.unary(
            Rpc::write("Lease.LeaseGrant"),
            request,
            |room, r| async move { Ok(room.etcd().lease_grant(&r).await?) },
        )
        .await
    }

    async fn lease_revoke(
        &self,
        request: Request<LeaseRevokeRequest>,
    ) -> Answer<LeaseRevokeResponse> {
        self.unary(
            Rpc::write("Lease.LeaseRevoke"),
            request,
            |room, r| async move { Ok(room.etcd().lease_revoke(&r).await?) },
        )
        .await
    }

    type LeaseKeepAliveStream = Outbound<LeaseKeepAliveResponse>;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Answer<Self::LeaseKeepAliveStream> {
        self.open(
            Rpc::read("Lease.LeaseKeepAlive"),
            request,
            |room, mut inbound, outbox| async move {
                // Requests are read while earlier ones are renewed (up to IN_FLIGHT), so that
                // the keep-alives a client sends together share the renewer's transactions;
                // the answers go back in the order asked. A request that cannot be read, or
                // the client's side closed, ends the stream once the answers asked are sent.
                let mut renewing = FuturesOrdered::new();
                let mut reading = true;
                loop {
                    tokio::select! {
                        asked = inbound.message(), if reading && renewing.len() < IN_FLIGHT => {
                            match asked {
                                Ok(Some(asked)) => {
                                    let renewer = room.0.renewer.clone();
                                    renewing.push_back(async move {
                                        renewer.keep_alive(asked.id).await
                                    });
                                }
                                Ok(None) | Err(_) => reading = false,
                            }
                        }
                        Some(answer) = renewing.next() => {
                            if !outbox.send(answer?).await {
                                break;
                            }
                        }
                        else => break,
                    }
                }
                Ok(())
            },
        )
    }

    async fn lease_time_to_live(
        &self,
        request: Request<LeaseTimeToLiveRequest>,
    ) -> Answer<LeaseTimeToLiveResponse> {
        self.unary(
            Rpc::read("Lease.LeaseTimeToLive"),
            request,
            |room, r| async move { Ok(room.etcd().lease_time_to_live(&r).await?) },
        )
        .await
    }

    async fn lease_leases(
        &self,
        request: Request<LeaseLeasesRequest>,
    ) -> Answer<LeaseLeasesResponse> {
        self.unary(
            Rpc::read("Lease.LeaseLeases"),
            request,
            |room, r| async move {
                let _ = r;
                Ok(room.etcd().lease_leases().await?)
            },
        )
        .await
    }
}
