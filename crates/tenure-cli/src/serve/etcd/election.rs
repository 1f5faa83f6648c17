//! `Election` (etcd's `v3electionpb`): the layer's election recipe, etcd's
//! `concurrency.Election`.

use super::call::{Outbound, Rpc};
use super::Room;
use tenure_etcd_proto::v3electionpb::election_server::Election;
use tenure_etcd_proto::v3electionpb::*;
use tonic::{Request, Response, Status};

type Answer<A> = Result<Response<A>, Status>;

#[tonic::async_trait]
impl Election for Room {
    async fn campaign(&self, request: Request<CampaignRequest>) -> Answer<CampaignResponse> {
        self.unserved(Rpc::write("Election.Campaign"), &request)
    }

    async fn proclaim(&self, request: Request<ProclaimRequest>) -> Answer<ProclaimResponse> {
        self.unserved(Rpc::write("Election.Proclaim"), &request)
    }

    async fn leader(&self, request: Request<LeaderRequest>) -> Answer<LeaderResponse> {
        self.unserved(Rpc::read("Election.Leader"), &request)
    }

    type ObserveStream = Outbound<LeaderResponse>;

    async fn observe(&self, request: Request<LeaderRequest>) -> Answer<Self::ObserveStream> {
        self.unserved(Rpc::read("Election.Observe"), &request)
    }

    async fn resign(&self, request: Request<ResignRequest>) -> Answer<ResignResponse> {
        self.unserved(Rpc::write("Election.Resign"), &request)
    }
}
