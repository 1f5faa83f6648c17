//! The log of changes for watchers, and its compaction: every change is a row of the event
//! table at its revision; a compaction to revision `r` drops the rows below `r` and makes `r`
//! the floor, the oldest revision a read or a watch may start from.

use super::error::{Error, Result};
use super::kv::header;
use super::proto::etcdserverpb::CompactionResponse;
use super::proto::mvccpb::Event;
use super::rows::EtcdTx;
use super::rules::span::Span;

/// A run of the log, for a watcher: the events of one span from a revision on, whole
/// revisions only.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Events {
    /// The events, in revision order (the order of their changes within a revision); each
    /// one's revision is its key's `mod_revision`, and `prev_kv` is the key before it (absent
    /// if it did not exist).
    pub events: Vec<Event>,
    /// Every event of the span up to this revision is in `events` (or was in an earlier
    /// run): the next run starts after it.
    pub through: i64,
    /// The current revision.
    pub revision: i64,
    /// The compaction floor.
    pub floor: i64,
}

/// The events of `span` from revision `from` on, at most `limit` of them (more when one
/// revision holds more: revisions are never split).
pub(super) async fn events(
    tx: &mut EtcdTx<'_>,
    span: &Span,
    from: i64,
    limit: usize,
) -> Result<Events> {
    // The revision first: every event at or below it has committed, so none is missing.
    let revision = tx.read_revision().await?;
    let floor = tx.read_floor().await?;
    if from < floor {
        return Err(Error::Compacted { floor });
    }
    let limit = limit.max(1);
    let mut events = tx.events(span, from, revision, Some(limit)).await?;
    let at = |e: &Event| e.kv.as_ref().map_or(0, |kv| kv.mod_revision);
    // A run from after the current revision covers nothing new: it does not go back.
    let mut through = revision.max(from - 1);
    if events.len() == limit {
        let first = events.first().map_or(0, at);
        let last = events.last().map_or(0, at);
        if first == last {
            events = tx.events(span, last, last, None).await?;
            through = last;
        } else {
            events.retain(|e| at(e) < last);
            through = last - 1;
        }
    }
    // A compaction that committed meanwhile may have taken some of them.
    let floor = tx.read_floor().await?;
    if from < floor {
        return Err(Error::Compacted { floor });
    }
    Ok(Events {
        events,
        through,
        revision,
        floor,
    })
}

/// Compacts the log to `revision` (etcd's `Compact`): a revision at or below the floor is
/// compacted already, one above the current revision is in the future. The revision does not
/// move.
pub(super) async fn compact(tx: &mut EtcdTx<'_>, revision: i64) -> Result<CompactionResponse> {
    let floor = tx.lock_floor().await?;
    let current = tx.read_revision().await?;
    if revision <= floor && !(revision == 0 && floor == 0) {
        return Err(Error::Compacted { floor });
    }
    if revision > current {
        return Err(Error::FutureRevision);
    }
    if revision > floor {
        tx.set_floor(revision).await?;
        tx.drop_events_below(revision).await?;
    }
    Ok(CompactionResponse {
        header: header(current),
    })
}

/// Compacts the log to keep the last `revisions` revisions, if that raises the floor; the new
/// floor, if it moved.
pub(super) async fn retain(tx: &mut EtcdTx<'_>, revisions: i64) -> Result<Option<i64>> {
    let floor = tx.lock_floor().await?;
    let current = tx.read_revision().await?;
    let target = current.saturating_sub(revisions.max(0));
    if target <= floor {
        return Ok(None);
    }
    tx.set_floor(target).await?;
    tx.drop_events_below(target).await?;
    Ok(Some(target))
}
