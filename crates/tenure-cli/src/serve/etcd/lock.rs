//! `Lock` (etcd's `v3lockpb`): the layer's lock recipe, etcd's `concurrency.Mutex`.

use super::call::Rpc;
use super::Room;
use tenure_etcd_proto::v3lockpb::lock_server::Lock;
use tenure_etcd_proto::v3lockpb::*;
use tonic::{Request, Response, Status};

type Answer<A> = Result<Response<A>, Status>;

#[tonic::async_trait]
impl Lock for Room {
    async fn lock(&self, request: Request<LockRequest>) -> Answer<LockResponse> {
        self.unserved(Rpc::write("Lock.Lock"), &request)
    }

    async fn unlock(&self, request: Request<UnlockRequest>) -> Answer<UnlockResponse> {
        self.unserved(Rpc::write("Lock.Unlock"), &request)
    }
}
