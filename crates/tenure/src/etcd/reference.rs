//! An in-memory etcd, as plain as it can be, to test the layer against (the model-based test in
//! `tests/conformance/etcd_model.rs`): it keeps a full copy of the keys at every revision
//! rather than a log, and runs Range, Put, DeleteRange, Txn, Compact and leases (without time)
//! as etcd does, sharing with the layer only the request checks and the IO-free rules of a
//! compare and of a Range's shape. Only with the `testing` feature.

use super::error::{Error, Result};
use super::proto::etcdserverpb::request_op::Request as Op;
use super::proto::etcdserverpb::response_op::Response;
use super::proto::etcdserverpb::{
    DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse,
    ResponseHeader, ResponseOp, TxnRequest, TxnResponse,
};
use super::proto::mvccpb::event::EventType;
use super::proto::mvccpb::{Event, KeyValue};
use super::rules::{compare::holds, range::read_limit, range::shape, span::Span};
use super::validate;
use std::collections::{BTreeMap, BTreeSet};

type Keys = BTreeMap<Vec<u8>, KeyValue>;

/// The reference etcd.
#[derive(Clone, Debug, Default)]
pub struct Reference {
    /// The keys at each revision (`history[r - 1]`), from revision 1 (no key) on.
    history: Vec<Keys>,
    /// Every event, in order.
    events: Vec<Event>,
    floor: i64,
    leases: BTreeSet<i64>,
}

fn header(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        revision,
        ..ResponseHeader::default()
    })
}

fn span_of(keys: &Keys, span: &Span) -> Vec<KeyValue> {
    keys.values()
        .filter(|kv| span.contains(&kv.key))
        .cloned()
        .collect()
}

/// One write in progress: the keys as it changes them, and its events.
struct Stage {
    base: i64,
    keys: Keys,
    events: Vec<Event>,
}

impl Stage {
    fn seen(&self) -> i64 {
        self.base + i64::from(!self.events.is_empty())
    }
}

impl Reference {
    /// An empty etcd at revision 1, as a new etcd.
    pub fn new() -> Reference {
        Reference {
            history: vec![Keys::new()],
            ..Reference::default()
        }
    }

    /// The current revision.
    pub fn revision(&self) -> i64 {
        i64::try_from(self.history.len()).unwrap_or(i64::MAX)
    }

    fn keys(&self) -> &Keys {
        self.history
            .last()
            .unwrap_or_else(|| unreachable!("revision 1 is always there"))
    }

    /// Every event from revision `from` on.
    ///
    /// # Errors
    /// [`Error::Compacted`] below the floor.
    pub fn events(&self, from: i64) -> Result<Vec<Event>> {
        if from < self.floor {
            return Err(Error::Compacted { floor: self.floor });
        }
        let at = |e: &Event| e.kv.as_ref().map_or(0, |kv| kv.mod_revision);
        Ok(self
            .events
            .iter()
            .filter(|e| at(e) >= from)
            .cloned()
            .collect())
    }

    /// Grants lease `id` (it never ends here).
    ///
    /// # Errors
    /// [`Error::LeaseExists`].
    pub fn grant(&mut self, id: i64) -> Result<()> {
        if !self.leases.insert(id) {
            return Err(Error::LeaseExists);
        }
        Ok(())
    }

    fn read(&self, keys: &Keys, seen: i64, r: &RangeRequest) -> Result<RangeResponse> {
        let span = Span::new(&r.key, &r.range_end);
        let at = if r.revision > 0 && r.revision < seen {
            if r.revision < self.floor {
                return Err(Error::Compacted { floor: self.floor });
            }
            span_of(
                &self.history[usize::try_from(r.revision - 1).unwrap_or(0)],
                &span,
            )
        } else if r.revision > seen {
            return Err(Error::FutureRevision);
        } else {
            span_of(keys, &span)
        };
        let total = i64::try_from(at.len()).unwrap_or(i64::MAX);
        // etcd reads only the first keys when the Range has a limit and reads in key order.
        let at = match read_limit(r) {
            Some(n) => at.into_iter().take(n).collect(),
            None => at,
        };
        let shaped = shape(r, at, total);
        Ok(RangeResponse {
            header: header(seen),
            kvs: shaped.kvs,
            more: shaped.more,
            count: shaped.count,
        })
    }

    /// Range.
    ///
    /// # Errors
    /// As etcd's.
    pub fn range(&self, r: &RangeRequest) -> Result<RangeResponse> {
        validate::range(r)?;
        self.read(self.keys(), self.revision(), r)
    }

    fn stage(&self) -> Stage {
        Stage {
            base: self.revision(),
            keys: self.keys().clone(),
            events: Vec::new(),
        }
    }

    fn commit(&mut self, stage: Stage) {
        if !stage.events.is_empty() {
            self.history.push(stage.keys);
            self.events.extend(stage.events);
        }
    }

    fn check_put(&self, keys: &Keys, p: &PutRequest) -> Result<()> {
        if (p.ignore_value || p.ignore_lease) && !keys.contains_key(&p.key) {
            return Err(Error::KeyNotFound);
        }
        if p.lease != 0 && !self.leases.contains(&p.lease) {
            return Err(Error::LeaseNotFound);
        }
        Ok(())
    }

    fn put_in(stage: &mut Stage, p: &PutRequest) -> Result<PutResponse> {
        let prev = stage.keys.get(&p.key).cloned();
        if (p.ignore_value || p.ignore_lease) && prev.is_none() {
            return Err(Error::KeyNotFound);
        }
        let old = prev.clone().unwrap_or_default();
        let rev = stage.base + 1;
        let kv = KeyValue {
            key: p.key.clone(),
            value: if p.ignore_value {
                old.value
            } else {
                p.value.clone()
            },
            create_revision: if prev.is_some() {
                old.create_revision
            } else {
                rev
            },
            mod_revision: rev,
            version: old.version + 1,
            lease: if p.ignore_lease { old.lease } else { p.lease },
        };
        stage.keys.insert(kv.key.clone(), kv.clone());
        stage.events.push(Event {
            r#type: EventType::Put as i32,
            kv: Some(kv),
            prev_kv: prev.clone(),
        });
        Ok(PutResponse {
            header: header(rev),
            prev_kv: prev.filter(|_| p.prev_kv),
        })
    }

    fn delete_in(stage: &mut Stage, d: &DeleteRangeRequest) -> DeleteRangeResponse {
        let gone = span_of(&stage.keys, &Span::new(&d.key, &d.range_end));
        for kv in &gone {
            stage.keys.remove(&kv.key);
            stage.events.push(Event {
                r#type: EventType::Delete as i32,
                kv: Some(KeyValue {
                    key: kv.key.clone(),
                    mod_revision: stage.base + 1,
                    ..KeyValue::default()
                }),
                prev_kv: Some(kv.clone()),
            });
        }
        DeleteRangeResponse {
            header: header(stage.seen()),
            deleted: i64::try_from(gone.len()).unwrap_or(i64::MAX),
            prev_kvs: if d.prev_kv { gone } else { Vec::new() },
        }
    }

    /// Put.
    ///
    /// # Errors
    /// As etcd's.
    pub fn put(&mut self, p: &PutRequest) -> Result<PutResponse> {
        validate::put(p)?;
        self.check_put(self.keys(), p)?;
        let mut stage = self.stage();
        let answer = Self::put_in(&mut stage, p)?;
        self.commit(stage);
        Ok(answer)
    }

    /// DeleteRange.
    ///
    /// # Errors
    /// As etcd's.
    pub fn delete_range(&mut self, d: &DeleteRangeRequest) -> Result<DeleteRangeResponse> {
        validate::delete(d)?;
        let mut stage = self.stage();
        let answer = Self::delete_in(&mut stage, d);
        self.commit(stage);
        Ok(answer)
    }

    /// Revokes a lease: its keys go at one revision; the revision after it.
    ///
    /// # Errors
    /// [`Error::LeaseNotFound`].
    pub fn revoke(&mut self, id: i64) -> Result<i64> {
        if !self.leases.remove(&id) {
            return Err(Error::LeaseNotFound);
        }
        let mut stage = self.stage();
        let keys: Vec<Vec<u8>> = stage
            .keys
            .values()
            .filter(|kv| kv.lease == id)
            .map(|kv| kv.key.clone())
            .collect();
        for key in keys {
            let d = DeleteRangeRequest {
                key,
                range_end: Vec::new(),
                prev_kv: false,
            };
            Self::delete_in(&mut stage, &d);
        }
        let seen = stage.seen();
        self.commit(stage);
        Ok(seen)
    }

    /// Compact; the revision.
    ///
    /// # Errors
    /// As etcd's.
    pub fn compact(&mut self, revision: i64) -> Result<i64> {
        if revision <= self.floor && !(revision == 0 && self.floor == 0) {
            return Err(Error::Compacted { floor: self.floor });
        }
        if revision > self.revision() {
            return Err(Error::FutureRevision);
        }
        self.floor = self.floor.max(revision);
        Ok(self.revision())
    }

    /// Txn.
    ///
    /// # Errors
    /// As etcd's.
    pub fn txn(&mut self, r: &TxnRequest) -> Result<TxnResponse> {
        validate::txn(r)?;
        // Every compare of the branches taken first, on the keys before any write.
        let mut path = Vec::new();
        self.path(r, &mut path);
        let keys = self.keys().clone();
        let mut at = 0;
        self.check(&keys, r, &path, &mut at)?;
        let mut stage = self.stage();
        let mut at = 0;
        let mut answer = self.run(&mut stage, r, &path, &mut at)?;
        answer.header = header(stage.seen());
        self.commit(stage);
        Ok(answer)
    }

    fn path(&self, r: &TxnRequest, path: &mut Vec<bool>) {
        let ok = r
            .compare
            .iter()
            .all(|c| holds(c, &span_of(self.keys(), &Span::new(&c.key, &c.range_end))));
        path.push(ok);
        for op in if ok { &r.success } else { &r.failure } {
            if let Some(Op::RequestTxn(t)) = &op.request {
                self.path(t, path);
            }
        }
    }

    fn check(&self, keys: &Keys, r: &TxnRequest, path: &[bool], at: &mut usize) -> Result<()> {
        let ok = path[*at];
        *at += 1;
        for op in if ok { &r.success } else { &r.failure } {
            match &op.request {
                Some(Op::RequestRange(rr)) if rr.revision > self.revision() => {
                    return Err(Error::FutureRevision)
                }
                Some(Op::RequestRange(rr)) if rr.revision > 0 && rr.revision < self.floor => {
                    return Err(Error::Compacted { floor: self.floor })
                }
                Some(Op::RequestPut(p)) => self.check_put(keys, p)?,
                Some(Op::RequestTxn(t)) => self.check(keys, t, path, at)?,
                _ => {}
            }
        }
        Ok(())
    }

    fn run(
        &self,
        stage: &mut Stage,
        r: &TxnRequest,
        path: &[bool],
        at: &mut usize,
    ) -> Result<TxnResponse> {
        let ok = path[*at];
        *at += 1;
        let mut responses = Vec::new();
        for op in if ok { &r.success } else { &r.failure } {
            let response = match &op.request {
                Some(Op::RequestRange(rr)) => {
                    let keys = stage.keys.clone();
                    Response::ResponseRange(self.read(&keys, stage.seen(), rr)?)
                }
                Some(Op::RequestPut(p)) => Response::ResponsePut(Self::put_in(stage, p)?),
                Some(Op::RequestDeleteRange(d)) => {
                    Response::ResponseDeleteRange(Self::delete_in(stage, d))
                }
                Some(Op::RequestTxn(t)) => {
                    let mut nested = self.run(stage, t, path, at)?;
                    nested.header = Some(ResponseHeader::default());
                    Response::ResponseTxn(nested)
                }
                None => return Err(Error::KeyNotFound),
            };
            responses.push(ResponseOp {
                response: Some(response),
            });
        }
        Ok(TxnResponse {
            header: None,
            succeeded: ok,
            responses,
        })
    }
}
