//! `Lock` (etcd's `v3lockpb`): the layer's lock recipe, etcd's `concurrency.Mutex`. A caller
//! that goes away while it waits leaves no key behind (the recipe deletes it when dropped).

use super::call::Rpc;
use super::{status, Room};
use tenure_etcd_proto::v3lockpb::lock_server::Lock;
use tenure_etcd_proto::v3lockpb::*;
use tonic::{Request, Response, Status};

type Answer<A> = Result<Response<A>, Status>;

#[tonic::async_trait]
impl Lock for Room {
    async fn lock(&self, request: Request<LockRequest>) -> Answer<LockResponse> {
        self.unary(Rpc::write("Lock.Lock"), request, |room, r| async move {
            room.until_stopped(room.etcd().lock(&r))
                .await?
                .map_err(status::from_recipe)
        })
        .await
    }

    async fn unlock(&self, request: Request<UnlockRequest>) -> Answer<UnlockResponse> {
        self.unary(Rpc::write("Lock.Unlock"), request, |room, r| async move {
            room.etcd().unlock(&r).await.map_err(status::from_recipe)
        })
        .await
    }
}
