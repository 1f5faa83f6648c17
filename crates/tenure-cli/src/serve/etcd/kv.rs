//! `KV`: Range, Put, DeleteRange, Txn and Compact, each the layer's call.

use super::call::{Outbound, Rpc};
use super::Room;
use tenure_etcd_proto::etcdserverpb::kv_server::Kv;
use tenure_etcd_proto::etcdserverpb::*;
use tonic::{Request, Response, Status};

type Answer<A> = Result<Response<A>, Status>;

#[tonic::async_trait]
impl Kv for Room {
    async fn range(&self, request: Request<RangeRequest>) -> Answer<RangeResponse> {
        self.unary(Rpc::read("KV.Range"), request, |room, r| async move {
            Ok(room.etcd().range(&r).await?)
        })
        .await
    }

    type RangeStreamStream = Outbound<RangeStreamResponse>;

    /// Newer than etcd 3.4 (which has no such method).
    async fn range_stream(
        &self,
        request: Request<RangeRequest>,
    ) -> Answer<Self::RangeStreamStream> {
        self.unserved(Rpc::read("KV.RangeStream"), &request)
    }

    async fn put(&self, request: Request<PutRequest>) -> Answer<PutResponse> {
        self.unary(Rpc::write("KV.Put"), request, |room, r| async move {
            Ok(room.etcd().put(&r).await?)
        })
        .await
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Answer<DeleteRangeResponse> {
        self.unary(
            Rpc::write("KV.DeleteRange"),
            request,
            |room, r| async move { Ok(room.etcd().delete_range(&r).await?) },
        )
        .await
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Answer<TxnResponse> {
        self.unary(Rpc::write("KV.Txn"), request, |room, r| async move {
            Ok(room.etcd().txn(&r).await?)
        })
        .await
    }

    async fn compact(&self, request: Request<CompactionRequest>) -> Answer<CompactionResponse> {
        self.unary(Rpc::write("KV.Compact"), request, |room, r| async move {
            Ok(room.etcd().compact(&r).await?)
        })
        .await
    }
}
