//! `KV`: Range, Put, DeleteRange, Txn and Compact on the layer.

use super::call::{Outbound, Rpc};
use super::Room;
use tenure_etcd_proto::etcdserverpb::kv_server::Kv;
use tenure_etcd_proto::etcdserverpb::*;
use tonic::{Request, Response, Status};

type Answer<A> = Result<Response<A>, Status>;

#[tonic::async_trait]
impl Kv for Room {
    async fn range(&self, request: Request<RangeRequest>) -> Answer<RangeResponse> {
        self.unserved(Rpc::read("KV.Range"), &request)
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
        self.unserved(Rpc::write("KV.Put"), &request)
    }

    async fn delete_range(
        &self,
        request: Request<DeleteRangeRequest>,
    ) -> Answer<DeleteRangeResponse> {
        self.unserved(Rpc::write("KV.DeleteRange"), &request)
    }

    async fn txn(&self, request: Request<TxnRequest>) -> Answer<TxnResponse> {
        self.unserved(Rpc::write("KV.Txn"), &request)
    }

    async fn compact(&self, request: Request<CompactionRequest>) -> Answer<CompactionResponse> {
        self.unserved(Rpc::write("KV.Compact"), &request)
    }
}
