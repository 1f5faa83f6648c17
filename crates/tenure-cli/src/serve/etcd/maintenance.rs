//! `Maintenance`: `Status` (its `dbSize` the bytes the etcd tables take) and the alarm list.
//! The database does its own storage upkeep, so defragmentation, hashes, snapshots, leader
//! moves and downgrades are not served.

use super::call::{Outbound, Rpc};
use super::{cluster, Room};
use tenure_etcd_proto::etcdserverpb::maintenance_server::Maintenance;
use tenure_etcd_proto::etcdserverpb::*;
use tonic::{Request, Response, Status};

type Answer<A> = Result<Response<A>, Status>;

/// The etcd version `Status` reports: the API this room speaks.
pub(super) const VERSION: &str = "3.4.0";

#[tonic::async_trait]
impl Maintenance for Room {
    /// Listing the alarms answers none (there is no space quota to exceed); raising or
    /// clearing one is not served.
    async fn alarm(&self, request: Request<AlarmRequest>) -> Answer<AlarmResponse> {
        if request.get_ref().action() != alarm_request::AlarmAction::Get {
            return self.unserved(Rpc::read("Maintenance.Alarm"), &request);
        }
        self.unary(
            Rpc::read("Maintenance.Alarm"),
            request,
            |room, _| async move {
                Ok(AlarmResponse {
                    header: Room::header(room.etcd().revisions().await?.revision),
                    alarms: Vec::new(),
                })
            },
        )
        .await
    }

    async fn status(&self, request: Request<StatusRequest>) -> Answer<StatusResponse> {
        self.unary(
            Rpc::open("Maintenance.Status"),
            request,
            |room, _| async move {
                let revision = room.etcd().revisions().await?.revision;
                let size = i64::try_from(room.etcd().size().await?).unwrap_or(i64::MAX);
                let index = u64::try_from(revision).unwrap_or(0);
                // No member leads (there is no Raft): the one with the lowest id, so that
                // every member names the same one.
                let members = room.etcd().members().await?;
                let leader = members
                    .iter()
                    .map(|m| m.id)
                    .min()
                    .unwrap_or(room.0.member.id);
                Ok(StatusResponse {
                    header: Room::header(revision),
                    version: VERSION.into(),
                    leader,
                    raft_index: index,
                    raft_term: cluster::RAFT_TERM,
                    raft_applied_index: index,
                    db_size: size,
                    db_size_in_use: size,
                    ..StatusResponse::default()
                })
            },
        )
        .await
    }

    async fn defragment(&self, request: Request<DefragmentRequest>) -> Answer<DefragmentResponse> {
        self.unserved(Rpc::read("Maintenance.Defragment"), &request)
    }

    async fn hash(&self, request: Request<HashRequest>) -> Answer<HashResponse> {
        self.unserved(Rpc::read("Maintenance.Hash"), &request)
    }

    async fn hash_kv(&self, request: Request<HashKvRequest>) -> Answer<HashKvResponse> {
        self.unserved(Rpc::read("Maintenance.HashKV"), &request)
    }

    type SnapshotStream = Outbound<SnapshotResponse>;

    async fn snapshot(&self, request: Request<SnapshotRequest>) -> Answer<Self::SnapshotStream> {
        self.unserved(Rpc::read("Maintenance.Snapshot"), &request)
    }

    async fn move_leader(&self, request: Request<MoveLeaderRequest>) -> Answer<MoveLeaderResponse> {
        self.unserved(Rpc::read("Maintenance.MoveLeader"), &request)
    }

    async fn downgrade(&self, request: Request<DowngradeRequest>) -> Answer<DowngradeResponse> {
        self.unserved(Rpc::read("Maintenance.Downgrade"), &request)
    }
}
