//! `Election` (etcd's `v3electionpb`): the layer's election recipe, etcd's
//! `concurrency.Election`; `Observe` streams its leaders as they come.

use super::call::{Outbound, Rpc};
use super::{status, Room};
use tenure_etcd_proto::v3electionpb::election_server::Election;
use tenure_etcd_proto::v3electionpb::*;
use tonic::{Request, Response, Status};

type Answer<A> = Result<Response<A>, Status>;

#[tonic::async_trait]
impl Election for Room {
    async fn campaign(&self, request: Request<CampaignRequest>) -> Answer<CampaignResponse> {
        self.unary(
            Rpc::write("Election.Campaign"),
            request,
            |room, r| async move {
                room.until_stopped(room.etcd().campaign(&r))
                    .await?
                    .map_err(status::from_recipe)
            },
        )
        .await
    }

    async fn proclaim(&self, request: Request<ProclaimRequest>) -> Answer<ProclaimResponse> {
        self.unary(
            Rpc::write("Election.Proclaim"),
            request,
            |room, r| async move { room.etcd().proclaim(&r).await.map_err(status::from_recipe) },
        )
        .await
    }

    async fn leader(&self, request: Request<LeaderRequest>) -> Answer<LeaderResponse> {
        self.unary(
            Rpc::read("Election.Leader"),
            request,
            |room, r| async move { room.etcd().leader(&r).await.map_err(status::from_recipe) },
        )
        .await
    }

    type ObserveStream = Outbound<LeaderResponse>;

    async fn observe(&self, request: Request<LeaderRequest>) -> Answer<Self::ObserveStream> {
        self.open(
            Rpc::read("Election.Observe"),
            request,
            |room, r, outbox| async move {
                let mut observer = room.etcd().observe(&r);
                loop {
                    let leader = observer.next().await.map_err(status::from_recipe)?;
                    if !outbox.send(leader).await {
                        return Ok(());
                    }
                }
            },
        )
    }

    async fn resign(&self, request: Request<ResignRequest>) -> Answer<ResignResponse> {
        self.unary(
            Rpc::write("Election.Resign"),
            request,
            |room, r| async move { room.etcd().resign(&r).await.map_err(status::from_recipe) },
        )
        .await
    }
}
