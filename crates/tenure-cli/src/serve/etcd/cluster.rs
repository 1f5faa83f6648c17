//! `Cluster`: every `tenure serve` with `--etcd-listen` on one database is a member of one
//! etcd. There is no Raft (the database is the consensus), so members are not added,
//! removed or promoted through the API: a member joins when its `serve` starts and leaves
//! when it stops.

use super::call::Rpc;
use super::Room;
use std::hash::{BuildHasher, RandomState};
use tenure::Store;
use tenure_etcd_proto::etcdserverpb::cluster_server::Cluster;
use tenure_etcd_proto::etcdserverpb::*;
use tonic::{Request, Response, Status};

type Answer<A> = Result<Response<A>, Status>;

/// The `raft_term` of every header: there is no Raft, so no election ever moves it.
pub(super) const RAFT_TERM: u64 = 1;

/// This `tenure serve` as an etcd member.
#[derive(Clone, Debug)]
pub(crate) struct Member {
    /// Random, fresh for every start of the process (as a new etcd member's).
    pub id: u64,
    /// `--etcd-name`.
    pub name: String,
    /// Where clients reach it (`--etcd-advertise-client-urls`).
    pub client_urls: Vec<String>,
}

impl Member {
    /// A member with a fresh random id.
    pub(crate) fn new(name: String, client_urls: Vec<String>) -> Member {
        let id = RandomState::new()
            .hash_one((std::process::id(), &name))
            .max(1);
        Member {
            id,
            name,
            client_urls,
        }
    }

    fn to_proto(&self) -> tenure_etcd_proto::etcdserverpb::Member {
        tenure_etcd_proto::etcdserverpb::Member {
            id: self.id,
            name: self.name.clone(),
            peer_ur_ls: Vec::new(),
            client_ur_ls: self.client_urls.clone(),
            is_learner: false,
        }
    }
}

/// The cluster id of the database behind `store`: the same for every member on it.
pub(super) fn cluster_id(store: &Store) -> u64 {
    let _ = store;
    0
}

#[tonic::async_trait]
impl Cluster for Room {
    async fn member_add(&self, request: Request<MemberAddRequest>) -> Answer<MemberAddResponse> {
        self.unserved(Rpc::read("Cluster.MemberAdd"), &request)
    }

    async fn member_remove(
        &self,
        request: Request<MemberRemoveRequest>,
    ) -> Answer<MemberRemoveResponse> {
        self.unserved(Rpc::read("Cluster.MemberRemove"), &request)
    }

    async fn member_update(
        &self,
        request: Request<MemberUpdateRequest>,
    ) -> Answer<MemberUpdateResponse> {
        self.unserved(Rpc::read("Cluster.MemberUpdate"), &request)
    }

    async fn member_list(&self, request: Request<MemberListRequest>) -> Answer<MemberListResponse> {
        self.unary(
            Rpc::open("Cluster.MemberList"),
            request,
            |room, _| async move {
                Ok(MemberListResponse {
                    header: room.header(0),
                    members: vec![room.0.member.to_proto()],
                })
            },
        )
        .await
    }

    async fn member_promote(
        &self,
        request: Request<MemberPromoteRequest>,
    ) -> Answer<MemberPromoteResponse> {
        self.unserved(Rpc::read("Cluster.MemberPromote"), &request)
    }
}
