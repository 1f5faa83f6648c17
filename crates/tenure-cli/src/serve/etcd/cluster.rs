//! `Cluster`: every `tenure serve` with `--etcd-listen` on one database is a member of one
//! etcd (the layer's member list: each joins, heartbeats and is listed until its row ends by
//! the database's clock). There is no Raft (the database is the consensus), so members are
//! not added, removed or promoted through the API: a member joins when its `serve` starts
//! and leaves when it stops (or a member TTL after it died).

use super::call::Rpc;
use super::Room;
use std::hash::{BuildHasher, RandomState};
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

    /// As etcd's message.
    pub(super) fn to_proto(&self) -> tenure_etcd_proto::etcdserverpb::Member {
        tenure_etcd_proto::etcdserverpb::Member {
            id: self.id,
            name: self.name.clone(),
            peer_ur_ls: Vec::new(),
            client_ur_ls: self.client_urls.clone(),
            is_learner: false,
        }
    }
}

/// The cluster id of the etcd on tables of `prefix`: the same for every member on them (a
/// 64-bit FNV-1a hash of the prefix: tenure keeps no other identity of a database).
pub(crate) fn cluster_id(prefix: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in b"tenure etcd ".iter().chain(prefix.as_bytes()) {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
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
                let mut members = room.etcd().members().await?;
                // This member, even while its row is not (yet, or again) listed.
                if !members.iter().any(|m| m.id == room.0.member.id) {
                    members.push(room.0.member.to_proto());
                }
                Ok(MemberListResponse {
                    header: None,
                    members,
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

#[cfg(test)]
mod tests {
    #[test]
    fn the_cluster_id_is_the_prefixs() {
        assert_eq!(super::cluster_id("tenure_"), super::cluster_id("tenure_"));
        assert_ne!(super::cluster_id("tenure_"), super::cluster_id("other_"));
    }
}
