//! `Lease`: Grant, Revoke, the KeepAlive stream, TimeToLive and Leases on the layer.

use super::call::{Outbound, Rpc};
use super::Room;
use tenure_etcd_proto::etcdserverpb::lease_server::Lease;
use tenure_etcd_proto::etcdserverpb::*;
use tonic::{Request, Response, Status, Streaming};

type Answer<A> = Result<Response<A>, Status>;

#[tonic::async_trait]
impl Lease for Room {
    async fn lease_grant(&self, request: Request<LeaseGrantRequest>) -> Answer<LeaseGrantResponse> {
        self.unserved(Rpc::write("Lease.LeaseGrant"), &request)
    }

    async fn lease_revoke(
        &self,
        request: Request<LeaseRevokeRequest>,
    ) -> Answer<LeaseRevokeResponse> {
        self.unserved(Rpc::write("Lease.LeaseRevoke"), &request)
    }

    type LeaseKeepAliveStream = Outbound<LeaseKeepAliveResponse>;

    async fn lease_keep_alive(
        &self,
        request: Request<Streaming<LeaseKeepAliveRequest>>,
    ) -> Answer<Self::LeaseKeepAliveStream> {
        self.unserved(Rpc::read("Lease.LeaseKeepAlive"), &request)
    }

    async fn lease_time_to_live(
        &self,
        request: Request<LeaseTimeToLiveRequest>,
    ) -> Answer<LeaseTimeToLiveResponse> {
        self.unserved(Rpc::read("Lease.LeaseTimeToLive"), &request)
    }

    async fn lease_leases(
        &self,
        request: Request<LeaseLeasesRequest>,
    ) -> Answer<LeaseLeasesResponse> {
        self.unserved(Rpc::read("Lease.LeaseLeases"), &request)
    }
}
