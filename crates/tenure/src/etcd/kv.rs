//! Range, Put and DeleteRange over the rows of one transaction, with etcd's semantics
//! (`server/etcdserver/txn`): a write's changes are at one revision, one more than the
//! revision it locked, in the order it makes them; reads in a writing transaction see its
//! changes so far.

use super::error::{Error, Result};
use super::proto::etcdserverpb::{
    DeleteRangeRequest, DeleteRangeResponse, PutRequest, PutResponse, RangeRequest, RangeResponse,
    ResponseHeader,
};
use super::proto::mvccpb::event::EventType;
use super::proto::mvccpb::{Event, KeyValue};
use super::rows::EtcdTx;
use super::rules::history::state_at;
use super::rules::lease::live;
use super::rules::range::{read_limit, shape};
use super::rules::span::Span;

/// A header with the revision (the room fills in the cluster, member and term).
pub(super) fn header(revision: i64) -> Option<ResponseHeader> {
    Some(ResponseHeader {
        revision,
        ..ResponseHeader::default()
    })
}

/// A writing transaction's revisions: it found (and locked) revision `found`; its changes are
/// at `base + 1` — `found + 1`, or a new epoch's floor — numbered in the order made. A
/// transaction that writes several revisions (a reap of several leases) closes one with
/// [`next`](Writing::next) before the next.
#[derive(Debug)]
pub(super) struct Writing {
    found: i64,
    first: i64,
    base: i64,
    seq: i64,
}

impl Writing {
    /// A transaction that found (and locked, if it writes) revision `found` and writes at
    /// `at`.
    pub(super) fn at(found: i64, at: i64) -> Writing {
        Writing {
            found,
            first: at,
            base: at - 1,
            seq: 0,
        }
    }

    /// A transaction that reads at revision `seen` (a Txn whose branch only reads).
    pub(super) fn reading(seen: i64) -> Writing {
        Writing::at(seen, seen + 1)
    }

    /// The revision its changes are at.
    pub(super) fn revision(&self) -> i64 {
        self.base + 1
    }

    /// The revision a read in it sees: with its changes so far (the one it found, before the
    /// first).
    pub(super) fn seen(&self) -> i64 {
        if self.seq > 0 {
            self.base + 1
        } else if self.base + 1 == self.first {
            self.found
        } else {
            self.base
        }
    }

    /// Applies `event` to its key and logs it as its next change.
    pub(super) async fn log(&mut self, tx: &mut EtcdTx<'_>, event: &Event) -> Result<()> {
        tx.record(event, self.seq).await?;
        self.seq += 1;
        Ok(())
    }

    /// Closes the current revision, if it changed anything: the next change is at the next.
    pub(super) fn next(&mut self) {
        if self.seq > 0 {
            self.base += 1;
            self.seq = 0;
        }
    }
}

/// A Range read at `seen` (the revision the transaction sees) with compaction floor `floor`.
pub(super) async fn range(
    tx: &mut EtcdTx<'_>,
    r: &RangeRequest,
    seen: i64,
    floor: i64,
) -> Result<RangeResponse> {
    let span = Span::new(&r.key, &r.range_end);
    if r.revision > seen {
        return Err(Error::FutureRevision);
    }
    let (kvs, total) = if r.revision > 0 && r.revision < seen {
        if r.revision < floor {
            return Err(Error::Compacted { floor });
        }
        let after = tx.events_after(&span, r.revision).await?;
        let mut kvs = state_at(tx.kvs(&span, None).await?, &after);
        // A compaction that committed meanwhile may have taken events this read needed.
        let floor = tx.read_floor().await?;
        if r.revision < floor {
            return Err(Error::Compacted { floor });
        }
        let total = count(kvs.len());
        if let Some(limit) = read_limit(r) {
            kvs.truncate(limit);
        }
        (kvs, total)
    } else if r.count_only {
        (Vec::new(), tx.count(&span).await?)
    } else if let Some(limit) = read_limit(r) {
        let kvs = tx.kvs(&span, Some(limit)).await?;
        let total = if kvs.len() < limit {
            count(kvs.len())
        } else {
            tx.count(&span).await?
        };
        (kvs, total)
    } else {
        let kvs = tx.kvs(&span, None).await?;
        let total = count(kvs.len());
        (kvs, total)
    };
    let shaped = shape(r, kvs, total);
    Ok(RangeResponse {
        header: header(seen),
        kvs: shaped.kvs,
        more: shaped.more,
        count: shaped.count,
    })
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// What a Put needs before it runs (etcd's `checkPut`): a live lease, if it names one, and an
/// existing key, if it keeps the key's value or lease.
pub(super) async fn check_put(tx: &mut EtcdTx<'_>, p: &PutRequest) -> Result<()> {
    if (p.ignore_value || p.ignore_lease) && tx.kv(&p.key).await?.is_none() {
        return Err(Error::KeyNotFound);
    }
    if p.lease != 0 {
        check_lease(tx, p.lease).await?;
    }
    Ok(())
}

/// Refuses a lease that does not exist or has ended by the transaction's clock (read as last
/// committed: a keep-alive does not take the revision).
pub(super) async fn check_lease(tx: &mut EtcdTx<'_>, lease: i64) -> Result<()> {
    let now = tx.now().await?;
    match tx.lease(lease, true).await? {
        Some(row) if live(row.expires_at, now) => Ok(()),
        _ => Err(Error::LeaseNotFound),
    }
}

/// A Put, checked ([`check_put`]), in a writing transaction.
pub(super) async fn put(
    tx: &mut EtcdTx<'_>,
    w: &mut Writing,
    p: &PutRequest,
) -> Result<PutResponse> {
    let prev = tx.kv(&p.key).await?;
    // A key that keeps its value or lease must exist (checked before; an earlier delete "from
    // a key on" in the same Txn, which etcd's duplicate rule lets through, may have taken it).
    let kept = match (&prev, p.ignore_value || p.ignore_lease) {
        (None, true) => return Err(Error::KeyNotFound),
        (prev, _) => prev.clone().unwrap_or_default(),
    };
    let value = if p.ignore_value {
        kept.value
    } else {
        p.value.clone()
    };
    let lease = if p.ignore_lease { kept.lease } else { p.lease };
    let revision = w.revision();
    let kv = KeyValue {
        key: p.key.clone(),
        value,
        create_revision: prev.as_ref().map_or(revision, |kv| kv.create_revision),
        mod_revision: revision,
        version: prev.as_ref().map_or(0, |kv| kv.version) + 1,
        lease,
    };
    let event = Event {
        r#type: EventType::Put as i32,
        kv: Some(kv),
        prev_kv: prev,
    };
    w.log(tx, &event).await?;
    Ok(PutResponse {
        header: header(revision),
        prev_kv: event.prev_kv.filter(|_| p.prev_kv),
    })
}

/// A DeleteRange in a writing transaction.
pub(super) async fn delete(
    tx: &mut EtcdTx<'_>,
    w: &mut Writing,
    d: &DeleteRangeRequest,
) -> Result<DeleteRangeResponse> {
    let kvs = tx.kvs(&Span::new(&d.key, &d.range_end), None).await?;
    let gone = delete_keys(tx, w, kvs).await?;
    Ok(DeleteRangeResponse {
        header: header(w.seen()),
        deleted: count(gone.len()),
        prev_kvs: if d.prev_kv { gone } else { Vec::new() },
    })
}

/// Deletes `kvs` (in key order) at the transaction's revision; what they were.
pub(super) async fn delete_keys(
    tx: &mut EtcdTx<'_>,
    w: &mut Writing,
    kvs: Vec<KeyValue>,
) -> Result<Vec<KeyValue>> {
    let revision = w.revision();
    for kv in &kvs {
        let event = Event {
            r#type: EventType::Delete as i32,
            kv: Some(KeyValue {
                key: kv.key.clone(),
                mod_revision: revision,
                ..KeyValue::default()
            }),
            prev_kv: Some(kv.clone()),
        };
        w.log(tx, &event).await?;
    }
    Ok(kvs)
}
