//! `Lease`: Grant, Revoke, the KeepAlive stream, TimeToLive and Leases on the layer.
//!
//! A KeepAlive stream answers each request in order with the lease's granted TTL (renewed
//! from the database's now), or TTL 0 for a lease that does not exist or has ended — the
//! stream stays open — and ends when the client closes its side, as etcd's does. Its
//! renewals go through the server's [`Renewer`](super::renewer::Renewer), in batches.

use super::call::{Outbound, Rpc};
use super::Room;
use tenure_etcd_proto::etcdserverpb::lease_server::Lease;
use tenure_etcd_proto::etcdserverpb::*;
use tonic::{Request, Response, Status, Streaming};

type Answer<A> = Result<Response<A>, Status>;

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
                // A request that cannot be read (or a client gone) ends the stream.
                while let Ok(Some(asked)) = inbound.message().await {
                    let answer = room.0.renewer.keep_alive(asked.id).await?;
                    if !outbox.send(answer).await {
                        break;
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
