//! Every answer's header: the layer fills in the revision, the room the rest (the cluster,
//! this member, the Raft term) through [`Headed`], in the one call helper.

use tenure_etcd_proto::etcdserverpb::*;
use tenure_etcd_proto::v3electionpb::{
    CampaignResponse, LeaderResponse, ProclaimResponse, ResignResponse,
};
use tenure_etcd_proto::v3lockpb::{LockResponse, UnlockResponse};

/// An answer with etcd's header.
pub(super) trait Headed {
    /// Its header.
    fn header(&mut self) -> &mut Option<ResponseHeader>;
}

impl Headed for RangeResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for PutResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for DeleteRangeResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for TxnResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for CompactionResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for LeaseGrantResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for LeaseRevokeResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for LeaseKeepAliveResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for LeaseTimeToLiveResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for LeaseLeasesResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for WatchResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for MemberListResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for StatusResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for AlarmResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for AuthStatusResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for AuthenticateResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for LockResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for UnlockResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for CampaignResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for ProclaimResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for LeaderResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}

impl Headed for ResignResponse {
    fn header(&mut self) -> &mut Option<ResponseHeader> {
        &mut self.header
    }
}
