//! One watcher: what it watches, and its task, which sends its events in revision order from
//! its start revision on, with no gap and no duplicate.
//!
//! It runs in two phases. **Catching up**: while its next revision is at or below the hub's
//! position and the feed lacks it (a watch from the past, the hub's first read, a watcher
//! that fell behind the feed's buffer), it reads its own range from the log and sends what it
//! finds, up to [`REPLAY_REVISIONS`] revisions a response as etcd does for a watcher that is
//! not synced — but one revision a response for a watcher that is synced: one whose start lay
//! past the revision it was created at (its task may start after the hub published what it
//! needs), or that caught up before. **Live**: it takes the hub's batches, skips what it has
//! sent, keeps its keys, and sends one response per revision, as etcd does for a synced
//! watcher. Every event of one revision is in one response. A watcher a batch or more behind
//! takes what waits in the feed: only the hub reads the log for watchers that keep within the
//! feed's buffer.
//!
//! A start below the compaction floor ends it with etcd's compacted cancel.

use super::hub::{Batch, Hub};
use crate::serve::etcd::call::Outbox;
use crate::serve::etcd::Room;
use crate::serve::metrics;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tenure::etcd::{Error, Span};
use tenure_etcd_proto::etcdserverpb::watch_create_request::FilterType;
use tenure_etcd_proto::etcdserverpb::{WatchCreateRequest, WatchResponse};
use tenure_etcd_proto::mvccpb::event::EventType;
use tenure_etcd_proto::mvccpb::Event;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

/// How many revisions one response carries at most while a watcher catches up (etcd's
/// `watchBatchMaxRevs`).
const REPLAY_REVISIONS: usize = 1000;
/// How many events one read of the log takes while catching up.
const READ_LIMIT: usize = 1000;
/// How long an idle watcher with `progress_notify` waits before it says how far it is
/// (etcd's default progress interval).
const PROGRESS_EVERY: Duration = Duration::from_secs(600);
/// How long a watcher waits before it reads the log again after the database failed.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// What one watcher watches.
#[derive(Clone, Debug)]
pub(super) struct Watch {
    pub id: i64,
    key: Vec<u8>,
    range_end: Vec<u8>,
    span: Span,
    no_put: bool,
    no_delete: bool,
    prev_kv: bool,
    progress_notify: bool,
    /// The revision every event up to which it has sent (its stream's progress answers).
    sent: Arc<AtomicI64>,
}

impl Watch {
    /// The watch a create request asks for, with id `id` (an empty key is `"\0"`, the
    /// smallest, as etcd reads it).
    pub(super) fn new(id: i64, create: &WatchCreateRequest) -> Watch {
        let key = if create.key.is_empty() {
            vec![0]
        } else {
            create.key.clone()
        };
        let filters = create.filters();
        let (mut no_put, mut no_delete) = (false, false);
        for filter in filters {
            match filter {
                FilterType::Noput => no_put = true,
                FilterType::Nodelete => no_delete = true,
            }
        }
        Watch {
            id,
            span: Span::new(&key, &create.range_end),
            key,
            range_end: create.range_end.clone(),
            no_put,
            no_delete,
            prev_kv: create.prev_kv,
            progress_notify: create.progress_notify,
            sent: Arc::new(AtomicI64::new(0)),
        }
    }

    /// The revision every event up to which this watcher has sent.
    pub(super) fn progress(&self) -> Arc<AtomicI64> {
        self.sent.clone()
    }

    /// Whether the range is empty (`range_end` at or below `key`): etcd refuses to watch it.
    pub(super) fn is_empty(&self) -> bool {
        matches!(self.span, Span::Empty)
    }

    /// `event` as this watcher sends it, if it sends it.
    fn keep(&self, event: &Event) -> Option<Event> {
        let kv = event.kv.as_ref()?;
        if !self.span.contains(&kv.key) {
            return None;
        }
        let put = event.r#type() == EventType::Put;
        if (put && self.no_put) || (!put && self.no_delete) {
            return None;
        }
        let mut event = event.clone();
        if !self.prev_kv {
            event.prev_kv = None;
        }
        Some(event)
    }

    fn response(&self, revision: i64, events: Vec<Event>) -> WatchResponse {
        WatchResponse {
            header: Room::header(revision),
            watch_id: self.id,
            events,
            ..WatchResponse::default()
        }
    }
}

/// The revision an event happened at.
pub(super) fn revision_of(event: &Event) -> i64 {
    event.kv.as_ref().map_or(0, |kv| kv.mod_revision)
}

/// Runs `watch` from revision `next` on, sending to `outbox` until the client goes or the
/// watch ends (compacted: its cancel is sent); `created` is the revision it was created at.
pub(super) async fn run(
    room: Room,
    watch: Watch,
    mut next: i64,
    created: i64,
    outbox: Outbox<WatchResponse>,
) {
    let hub: &Hub = &room.0.hub;
    watch.sent.store(next - 1, Ordering::Relaxed);
    let (mut feed, _) = hub.subscribe();
    // Read after subscribing: a later divergence reaches this watcher as a batch, or, if it
    // falls behind the feed, as a new count.
    let divergences = hub.divergence().count;
    let mut idle = tokio::time::Instant::now() + PROGRESS_EVERY;
    // Whether the feed may lack revisions this watcher needs next: after it fell behind the
    // feed, learned of revisions compacted before the hub read them, or found the feed empty
    // below the hub's position (a watch from the past, the hub's first read). Otherwise the
    // feed holds, in order, every batch the hub published since this watcher last looked.
    let mut behind = false;
    // Synced, as etcd calls a watcher whose start lies past the revision it was created at,
    // or that caught up: one response a revision, even for what it reads from the log (its
    // task may start after the hub published the first revisions it needs). Until then, and
    // again after it fell behind the feed, what it reads from the log goes many revisions a
    // response, as etcd catches an unsynced watcher up.
    let mut synced = next > created;
    loop {
        // What lies at or below the hub's position comes from the feed where it waits there
        // (a watcher one batch behind), else from the log.
        let mut waiting = None;
        while next <= hub.position() {
            if !behind {
                match feed.try_recv() {
                    Ok(batch) => {
                        waiting = Some(batch);
                        break;
                    }
                    Err(TryRecvError::Lagged(missed)) => {
                        if let Some(resume) = fell_behind(hub, &watch, missed, divergences) {
                            let _ = outbox.send(compacted(watch.id, resume)).await;
                            return;
                        }
                        synced = false;
                    }
                    Err(TryRecvError::Closed) => return,
                    Err(TryRecvError::Empty) => {}
                }
                behind = true;
            }
            if let Some(resume) = diverged_since(hub, divergences) {
                let _ = outbox.send(compacted(watch.id, resume)).await;
                return;
            }
            metrics::etcd_watch_log_read();
            match room
                .etcd()
                .events(next, &watch.key, &watch.range_end, READ_LIMIT)
                .await
            {
                Ok(run) => {
                    let events: Vec<Event> =
                        run.events.iter().filter_map(|e| watch.keep(e)).collect();
                    for answer in replay(&watch, events, run.revision, synced) {
                        if !outbox.send(answer).await {
                            return;
                        }
                        idle = tokio::time::Instant::now() + PROGRESS_EVERY;
                    }
                    next = next.max(run.through + 1);
                    watch.sent.store(next - 1, Ordering::Relaxed);
                }
                Err(Error::Compacted { floor }) => {
                    let _ = outbox.send(compacted(watch.id, floor)).await;
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, watch = watch.id, "etcd watcher: reading the log failed");
                    tokio::time::sleep(RETRY_AFTER).await;
                }
            }
        }
        if waiting.is_none() {
            // Caught up with the hub's position: every later batch reaches the feed.
            behind = false;
            synced = true;
        }
        // Live: the hub's batches.
        let batch: Arc<Batch> = match waiting {
            Some(batch) => batch,
            None => tokio::select! {
                received = feed.recv() => match received {
                    Ok(batch) => batch,
                    Err(RecvError::Lagged(missed)) => {
                        if let Some(resume) = fell_behind(hub, &watch, missed, divergences) {
                            let _ = outbox.send(compacted(watch.id, resume)).await;
                            return;
                        }
                        behind = true;
                        synced = false;
                        continue;
                    }
                    Err(RecvError::Closed) => return,
                },
                () = tokio::time::sleep_until(idle), if watch.progress_notify => {
                    if !outbox.send(watch.response(next - 1, Vec::new())).await {
                        return;
                    }
                    idle = tokio::time::Instant::now() + PROGRESS_EVERY;
                    continue;
                }
            },
        };
        if let Some(resume) = batch.diverged {
            // The database lost revisions this server published (see the hub): what this
            // watcher sent or waits for may never have happened there.
            let _ = outbox.send(compacted(watch.id, resume)).await;
            return;
        }
        if batch.through < next {
            continue;
        }
        if batch.lost || batch.from > next {
            // Revisions the hub never saw (the log says whether they are gone), or revisions
            // published before this watcher subscribed (a watch from the past, the hub's
            // first read): the log has them.
            behind = true;
            continue;
        }
        let kept: Vec<Event> = batch
            .events
            .iter()
            .filter(|e| revision_of(e) >= next)
            .filter_map(|e| watch.keep(e))
            .collect();
        for same in by_revision(kept) {
            let revision = same.first().map_or(next, revision_of);
            if !outbox.send(watch.response(revision, same)).await {
                return;
            }
            idle = tokio::time::Instant::now() + PROGRESS_EVERY;
        }
        next = batch.through + 1;
        watch.sent.store(batch.through, Ordering::Relaxed);
    }
}

/// Logs that `watch` fell behind the feed by `missed` batches (a slow client): it reads what
/// it missed from the log. The first revision of the new history if the hub saw revisions
/// lost meanwhile (checked here too: a divergence may have set the hub's position below this
/// watcher's next revision, where no catching up begins).
fn fell_behind(hub: &Hub, watch: &Watch, missed: u64, divergences: u64) -> Option<i64> {
    tracing::info!(
        watch = watch.id,
        missed,
        "etcd watcher: fell behind the watch feed (a slow client); it reads what it missed \
         from the log"
    );
    diverged_since(hub, divergences)
}

/// The first revision of the new history, if the hub has seen lost revisions since it had
/// seen `divergences` (see the hub): a watcher then ends as those that took the hub's batch.
fn diverged_since(hub: &Hub, divergences: u64) -> Option<i64> {
    let divergence = hub.divergence();
    (divergence.count != divergences).then_some(divergence.resume)
}

/// etcd's compacted cancel of watch `id`: it may watch again from `floor`.
fn compacted(id: i64, floor: i64) -> WatchResponse {
    WatchResponse {
        watch_id: id,
        canceled: true,
        compact_revision: floor,
        ..WatchResponse::default()
    }
}

/// The responses that send `events` (in revision order) read from the log at `revision`:
/// one a revision (at its own revision, as live) for a synced watcher, else at most
/// [`REPLAY_REVISIONS`] revisions a response (at the revision read).
fn replay(
    watch: &Watch,
    mut events: Vec<Event>,
    revision: i64,
    synced: bool,
) -> Vec<WatchResponse> {
    if synced {
        return by_revision(events)
            .into_iter()
            .map(|same| watch.response(same.first().map_or(revision, revision_of), same))
            .collect();
    }
    let mut answers = Vec::new();
    while !events.is_empty() {
        let rest = events.split_off(replay_cut(&events));
        answers.push(watch.response(revision, events));
        events = rest;
    }
    answers
}

/// `events` (in revision order) split by revision.
fn by_revision(events: Vec<Event>) -> Vec<Vec<Event>> {
    let mut runs: Vec<Vec<Event>> = Vec::new();
    for event in events {
        match runs.last_mut() {
            Some(run) if run.last().map(revision_of) == Some(revision_of(&event)) => {
                run.push(event);
            }
            _ => runs.push(vec![event]),
        }
    }
    runs
}

/// How many of `events` (in revision order) go in one response while catching up: at most
/// [`REPLAY_REVISIONS`] revisions, whole.
fn replay_cut(events: &[Event]) -> usize {
    let mut revisions = 0;
    let mut last = None;
    for (i, event) in events.iter().enumerate() {
        let revision = revision_of(event);
        if last != Some(revision) {
            if revisions == REPLAY_REVISIONS {
                return i;
            }
            revisions += 1;
            last = Some(revision);
        }
    }
    events.len()
}

#[cfg(test)]
mod tests {
    use super::*;
    use tenure_etcd_proto::mvccpb::KeyValue;

    fn event(key: &str, revision: i64, put: bool) -> Event {
        Event {
            r#type: if put {
                EventType::Put
            } else {
                EventType::Delete
            } as i32,
            kv: Some(KeyValue {
                key: key.as_bytes().to_vec(),
                mod_revision: revision,
                ..KeyValue::default()
            }),
            prev_kv: Some(KeyValue {
                key: key.as_bytes().to_vec(),
                ..KeyValue::default()
            }),
        }
    }

    fn watch(key: &str, range_end: &str, filters: Vec<FilterType>, prev_kv: bool) -> Watch {
        Watch::new(
            0,
            &WatchCreateRequest {
                key: key.as_bytes().to_vec(),
                range_end: range_end.as_bytes().to_vec(),
                filters: filters.into_iter().map(|f| f as i32).collect(),
                prev_kv,
                ..WatchCreateRequest::default()
            },
        )
    }

    #[test]
    fn a_watcher_keeps_its_range_and_filters_and_prev_kv_only_when_asked() {
        let prefix = watch("a/", "a0", vec![], false);
        assert!(prefix.keep(&event("a/1", 2, true)).is_some());
        assert!(prefix.keep(&event("b", 2, true)).is_none());
        assert_eq!(prefix.keep(&event("a/1", 2, true)).unwrap().prev_kv, None);
        let with_prev = watch("a", "", vec![], true);
        assert!(with_prev
            .keep(&event("a", 2, true))
            .unwrap()
            .prev_kv
            .is_some());
        assert!(
            with_prev.keep(&event("a/1", 2, true)).is_none(),
            "one key only"
        );
        let no_delete = watch("a", "\0", vec![FilterType::Nodelete], false);
        assert!(no_delete.keep(&event("z", 2, true)).is_some(), "from a on");
        assert!(no_delete.keep(&event("z", 2, false)).is_none());
        let no_put = watch("", "\0", vec![FilterType::Noput], false);
        assert!(no_put.keep(&event("a", 2, true)).is_none());
        assert!(
            no_put.keep(&event("a", 2, false)).is_some(),
            "the empty key is \\0: all"
        );
        assert!(watch("b", "a", vec![], false).is_empty());
        assert!(!watch("a", "", vec![], false).is_empty());
    }

    #[test]
    fn live_events_go_one_revision_a_response() {
        let runs = by_revision(vec![
            event("a", 2, true),
            event("b", 2, false),
            event("a", 3, true),
        ]);
        let revisions: Vec<Vec<i64>> = runs
            .iter()
            .map(|r| r.iter().map(revision_of).collect())
            .collect();
        assert_eq!(revisions, [vec![2, 2], vec![3]]);
    }

    #[test]
    fn a_replay_response_holds_whole_revisions_up_to_the_bound() {
        let mut events = Vec::new();
        for revision in 1..=1001 {
            events.push(event("a", revision, true));
            events.push(event("b", revision, true));
        }
        let cut = replay_cut(&events);
        assert_eq!(cut, 2000, "1000 revisions of two events each");
        assert_eq!(revision_of(&events[cut]), 1001);
        assert_eq!(replay_cut(&events[cut..]), 2);
    }
}
