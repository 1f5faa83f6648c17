//! The Election recipe (etcd's `concurrency.Election`, served by `v3election`): a campaigner
//! puts `name/<lease>` with its value if absent and leads once no key of `name/` was created
//! before it; the leader is the key of `name/` with the lowest create revision.

use super::super::error::{Error, Result};
use super::super::proto::etcdserverpb::request_op::Request as Op;
use super::super::proto::etcdserverpb::{PutRequest, RequestOp, ResponseHeader, TxnRequest};
use super::super::proto::mvccpb::event::EventType;
use super::super::proto::v3electionpb::{
    CampaignRequest, CampaignResponse, LeaderKey, LeaderRequest, LeaderResponse, ProclaimRequest,
    ProclaimResponse, ResignRequest, ResignResponse,
};
use super::super::rules::span::prefix_end;
use super::super::Etcd;
use super::cleanup::{created_at, delete_if_created_at, Cleanup};
use super::lock::{get, read};
use super::wait::{prefix_of, waiter_key, Waiting};
use std::collections::VecDeque;

fn put(key: &[u8], value: &[u8], lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest {
            key: key.to_vec(),
            value: value.to_vec(),
            lease,
            ..PutRequest::default()
        })),
    }
}

impl Etcd {
    /// Campaign: waits until this campaigner's key `name/<lease in hex>` (holding `value`) has
    /// the lowest create revision under `name/` (etcd's `Election.Campaign`). The answer's
    /// leader key names the key, its create revision and the lease; its header is the one of
    /// the campaign's put.
    ///
    /// # Errors
    /// [`Error::LeaseNotFound`]; [`Error::NotLeader`] if the key changed hands while it
    /// proclaimed a new value; [`Error::Store`].
    ///
    /// # Cancel safety
    /// Dropped while it waits, it resigns (in a task of its own: best effort, or the key goes
    /// with its lease), as etcd's does when its context is cancelled.
    pub async fn campaign(&self, r: &CampaignRequest) -> Result<CampaignResponse> {
        let lease = self.session(r.lease).await?;
        let prefix = prefix_of(&r.name);
        let key = waiter_key(&prefix, lease);
        let campaign = TxnRequest {
            compare: vec![created_at(&key, 0)],
            success: vec![put(&key, &r.value, lease)],
            failure: vec![RequestOp {
                request: Some(get(&key)),
            }],
        };
        let answer = self.txn(&campaign).await?;
        let mut rev = answer.header.as_ref().map_or(0, |h| h.revision);
        if !answer.succeeded {
            if let Some(kv) = read(&answer, 0).first() {
                rev = kv.create_revision;
                if kv.value != r.value {
                    let leader = LeaderKey {
                        name: r.name.clone(),
                        key: key.clone(),
                        rev,
                        lease,
                    };
                    if let Err(e) = self.proclaim_as(&leader, &r.value).await {
                        self.txn(&delete_if_created_at(&key, rev)).await?;
                        return Err(e);
                    }
                }
            }
        }
        let cleanup = Cleanup::new(self, &key, Some(rev));
        let waited = self.wait_deletes(&prefix, rev - 1).await;
        // An error other than a cancel leaves the key, as etcd's campaign does.
        cleanup.disarm();
        waited?;
        Ok(CampaignResponse {
            header: answer.header,
            leader: Some(LeaderKey {
                name: r.name.clone(),
                key,
                rev,
                lease,
            }),
        })
    }

    /// Proclaim: the leader's new value, if its key still has the create revision it was
    /// elected with.
    ///
    /// # Errors
    /// [`Error::MissingLeaderKey`], [`Error::NotLeader`]; [`Error::Store`].
    pub async fn proclaim(&self, r: &ProclaimRequest) -> Result<ProclaimResponse> {
        let leader = r.leader.as_ref().ok_or(Error::MissingLeaderKey)?;
        let header = self.proclaim_as(leader, &r.value).await?;
        Ok(ProclaimResponse { header })
    }

    async fn proclaim_as(
        &self,
        leader: &LeaderKey,
        value: &[u8],
    ) -> Result<Option<ResponseHeader>> {
        let answer = self
            .txn(&TxnRequest {
                compare: vec![created_at(&leader.key, leader.rev)],
                success: vec![put(&leader.key, value, leader.lease)],
                failure: Vec::new(),
            })
            .await?;
        if !answer.succeeded {
            return Err(Error::NotLeader);
        }
        Ok(answer.header)
    }

    /// Resign: deletes the leader's key if it still has the create revision it was elected
    /// with (a leader that lost it already resigns without error).
    ///
    /// # Errors
    /// [`Error::MissingLeaderKey`]; [`Error::Store`].
    pub async fn resign(&self, r: &ResignRequest) -> Result<ResignResponse> {
        let leader = r.leader.as_ref().ok_or(Error::MissingLeaderKey)?;
        let answer = self
            .txn(&delete_if_created_at(&leader.key, leader.rev))
            .await?;
        Ok(ResignResponse {
            header: answer.header,
        })
    }

    /// Leader: the key of `name/` with the lowest create revision.
    ///
    /// # Errors
    /// [`Error::NoLeader`]; [`Error::Store`].
    pub async fn leader(&self, r: &LeaderRequest) -> Result<LeaderResponse> {
        let found = self.edge(&prefix_of(&r.name), false, 0).await?;
        let kv = found.kvs.into_iter().next().ok_or(Error::NoLeader)?;
        Ok(LeaderResponse {
            header: found.header,
            kv: Some(kv),
        })
    }

    /// Observe: the leaders of `name` as they come and the values they proclaim (etcd's
    /// `Election.Observe`): not necessarily every one, but always the latest.
    pub fn observe(&self, r: &LeaderRequest) -> Observer {
        Observer {
            etcd: self.clone(),
            prefix: prefix_of(&r.name),
            state: State::Looking,
            pending: VecDeque::new(),
            waiting: self.waiting(),
        }
    }
}

/// Where an observer is.
#[derive(Debug)]
enum State {
    /// Reads the leader.
    Looking,
    /// No leader at the last read: waits for the first put under the prefix from `from`.
    Waiting { from: i64 },
    /// Follows the leader's key from `from` until it is deleted.
    Following { key: Vec<u8>, from: i64 },
}

/// The leaders of one election as they come: [`Observer::next`] answers each (see
/// [`Etcd::observe`]).
#[derive(Debug)]
pub struct Observer {
    etcd: Etcd,
    prefix: Vec<u8>,
    state: State,
    pending: VecDeque<LeaderResponse>,
    waiting: Waiting,
}

/// How many events one read of the log takes at most.
const EVENTS_BATCH: usize = 256;

impl Observer {
    /// The next leader, or the leader's next value: waits until there is one.
    ///
    /// # Errors
    /// [`Error::Store`] (the observer may go on after it).
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is lost when the future is dropped.
    pub async fn next(&mut self) -> Result<LeaderResponse> {
        loop {
            if let Some(answer) = self.pending.pop_front() {
                return Ok(answer);
            }
            match &self.state {
                State::Looking => {
                    let found = self.etcd.edge(&self.prefix, false, 0).await?;
                    let revision = found.header.as_ref().map_or(0, |h| h.revision);
                    match found.kvs.into_iter().next() {
                        Some(kv) => {
                            self.state = State::Following {
                                key: kv.key.clone(),
                                from: revision + 1,
                            };
                            self.pending.push_back(LeaderResponse {
                                header: found.header,
                                kv: Some(kv),
                            });
                        }
                        None => self.state = State::Waiting { from: revision },
                    }
                }
                State::Waiting { from } => {
                    let end = prefix_end(&self.prefix);
                    let run = match self
                        .etcd
                        .events(*from, &self.prefix, &end, EVENTS_BATCH)
                        .await
                    {
                        Err(Error::Compacted { .. }) => {
                            self.state = State::Looking;
                            continue;
                        }
                        run => run?,
                    };
                    let put = run
                        .events
                        .into_iter()
                        .filter_map(|e| e.kv.filter(|_| e.r#type == EventType::Put as i32))
                        .next();
                    if let Some(kv) = put {
                        self.state = State::Following {
                            key: kv.key.clone(),
                            from: kv.mod_revision + 1,
                        };
                        self.pending.push_back(LeaderResponse {
                            header: Some(ResponseHeader {
                                revision: kv.mod_revision,
                                ..ResponseHeader::default()
                            }),
                            kv: Some(kv),
                        });
                    } else {
                        self.state = State::Waiting {
                            from: run.through + 1,
                        };
                        self.etcd.pause(&mut self.waiting).await?;
                    }
                }
                State::Following { key, from } => {
                    let run = match self.etcd.events(*from, key, b"", EVENTS_BATCH).await {
                        Err(Error::Compacted { .. }) => {
                            self.state = State::Looking;
                            continue;
                        }
                        run => run?,
                    };
                    let key = key.clone();
                    let header = Some(ResponseHeader {
                        revision: run.revision,
                        ..ResponseHeader::default()
                    });
                    let mut deleted = false;
                    for event in run.events {
                        if event.r#type == EventType::Delete as i32 {
                            deleted = true;
                            break;
                        }
                        self.pending.push_back(LeaderResponse {
                            header,
                            kv: event.kv,
                        });
                    }
                    if deleted {
                        self.state = State::Looking;
                    } else {
                        self.state = State::Following {
                            key,
                            from: run.through + 1,
                        };
                        if self.pending.is_empty() {
                            self.etcd.pause(&mut self.waiting).await?;
                        }
                    }
                }
            }
        }
    }
}
