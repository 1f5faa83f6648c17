//! `Watch`: the watch streams, fed by one hub per `serve`.

use super::call::{Outbound, Rpc};
use super::Room;
use tenure_etcd_proto::etcdserverpb::watch_server::Watch;
use tenure_etcd_proto::etcdserverpb::*;
use tonic::{Request, Response, Status, Streaming};

type Answer<A> = Result<Response<A>, Status>;

#[tonic::async_trait]
impl Watch for Room {
    type WatchStream = Outbound<WatchResponse>;

    async fn watch(&self, request: Request<Streaming<WatchRequest>>) -> Answer<Self::WatchStream> {
        self.unserved(Rpc::read("Watch.Watch"), &request)
    }
}
