//! `Watch`: the watch streams, fed by one hub per server (`hub`), one task per watcher
//! (`watcher`).
//!
//! A stream answers its requests in order: a create with its `created` response (the id the
//! client gave, or the next free one of this stream from 0, as etcd numbers them), then the
//! watcher's events; a cancel with `canceled`; a progress request with the revision every
//! watcher of the stream has sent through (watch id -1, as etcd 3.4). A watch of an empty
//! range or with an id in use is created and canceled at once with etcd's reason. When the
//! client closes its side the stream goes on (as etcd's); when it goes away, or the server
//! stops, every watcher of the stream ends with it.

mod hub;
#[cfg(test)]
mod tests;
mod watcher;

pub(crate) use hub::Hub;

use super::call::{Outbound, Outbox, Rpc};
use super::Room;
use crate::serve::metrics;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use tenure_etcd_proto::etcdserverpb::watch_request::RequestUnion;
use tenure_etcd_proto::etcdserverpb::watch_server::Watch;
use tenure_etcd_proto::etcdserverpb::*;
use tokio::task::JoinSet;
use tonic::{Request, Response, Status, Streaming};
use watcher::Watch as One;

type Answer<A> = Result<Response<A>, Status>;

/// The id of a response that belongs to no watcher (etcd's `InvalidWatchID`).
const NO_WATCH: i64 = -1;

#[tonic::async_trait]
impl Watch for Room {
    type WatchStream = Outbound<WatchResponse>;

    async fn watch(&self, request: Request<Streaming<WatchRequest>>) -> Answer<Self::WatchStream> {
        self.open(
            Rpc::read("Watch.Watch"),
            request,
            |room, inbound, outbox| async move {
                Stream::new(room, outbox).run(inbound).await;
                Ok(())
            },
        )
    }
}

/// One watch stream: its watchers and their tasks.
struct Stream {
    room: Room,
    outbox: Outbox<WatchResponse>,
    /// Each live watcher's progress, by id.
    watchers: HashMap<i64, Arc<AtomicI64>>,
    tasks: JoinSet<i64>,
    /// Abort handles by id, to cancel one.
    aborts: HashMap<i64, tokio::task::AbortHandle>,
    /// The next id to try for a watcher without one.
    next_id: i64,
}

impl Stream {
    fn new(room: Room, outbox: Outbox<WatchResponse>) -> Stream {
        Stream {
            room,
            outbox,
            watchers: HashMap::new(),
            tasks: JoinSet::new(),
            aborts: HashMap::new(),
            next_id: 0,
        }
    }

    /// Answers the requests until the client goes (its side closed: the watchers go on until
    /// the stream ends).
    async fn run(mut self, mut inbound: Streaming<WatchRequest>) {
        let mut open = true;
        loop {
            tokio::select! {
                request = inbound.message(), if open => match request {
                    Ok(Some(request)) => {
                        if !self.answer(request).await {
                            return;
                        }
                    }
                    // Closed or unreadable: no more requests.
                    Ok(None) | Err(_) => open = false,
                },
                Some(ended) = self.tasks.join_next() => {
                    if let Ok(id) = ended {
                        self.forget(id);
                    }
                }
                () = std::future::pending::<()>(), if !open && self.tasks.is_empty() => {}
            }
        }
    }

    /// Answers one request; `false` once the client has gone.
    async fn answer(&mut self, request: WatchRequest) -> bool {
        match request.request_union {
            Some(RequestUnion::CreateRequest(create)) => self.create(&create).await,
            Some(RequestUnion::CancelRequest(cancel)) => {
                if !self.watchers.contains_key(&cancel.watch_id) {
                    return true;
                }
                if let Some(task) = self.aborts.get(&cancel.watch_id) {
                    task.abort();
                }
                self.forget(cancel.watch_id);
                let revision = self.room.0.hub.position();
                self.outbox
                    .send(WatchResponse {
                        header: Room::header(revision),
                        watch_id: cancel.watch_id,
                        canceled: true,
                        ..WatchResponse::default()
                    })
                    .await
            }
            Some(RequestUnion::ProgressRequest(_)) => {
                let revision = self
                    .watchers
                    .values()
                    .map(|sent| sent.load(Ordering::Relaxed))
                    .min()
                    .unwrap_or_else(|| self.room.0.hub.position());
                self.outbox
                    .send(WatchResponse {
                        header: Room::header(revision),
                        watch_id: NO_WATCH,
                        ..WatchResponse::default()
                    })
                    .await
            }
            None => true,
        }
    }

    /// Creates a watcher: `created` first, then its task.
    async fn create(&mut self, create: &WatchCreateRequest) -> bool {
        // The store's revision now: a watch from "now" starts after it (the hub may lag a
        // poll behind; without the database, its position will do).
        let current = match self.room.etcd().revisions().await {
            Ok(now) => now.revision,
            Err(_) => self.room.0.hub.position(),
        };
        // As etcd: an empty range is refused before an id is given out.
        if One::new(NO_WATCH, create).is_empty() {
            return self.refuse(current, "mvcc: watcher range is empty").await;
        }
        let asked = create.watch_id;
        let id = if asked != 0 {
            if self.watchers.contains_key(&asked) {
                return self
                    .refuse(
                        current,
                        "mvcc: duplicate watch ID provided on the WatchStream",
                    )
                    .await;
            }
            asked
        } else {
            while self.watchers.contains_key(&self.next_id) {
                self.next_id += 1;
            }
            self.next_id += 1;
            self.next_id - 1
        };
        let watch = One::new(id, create);
        let created = WatchResponse {
            header: Room::header(current),
            watch_id: id,
            created: true,
            ..WatchResponse::default()
        };
        if !self.outbox.send(created).await {
            return false;
        }
        let next = if create.start_revision > 0 {
            create.start_revision
        } else {
            current + 1
        };
        self.watchers.insert(id, watch.progress());
        metrics::etcd_watchers(1);
        let (room, outbox) = (self.room.clone(), self.outbox.clone());
        let task = self.tasks.spawn(async move {
            watcher::run(room, watch, next, current, outbox).await;
            id
        });
        self.aborts.insert(id, task);
        true
    }

    /// A create etcd refuses: created and canceled at once, with its reason.
    async fn refuse(&self, revision: i64, reason: &str) -> bool {
        self.outbox
            .send(WatchResponse {
                header: Room::header(revision),
                watch_id: NO_WATCH,
                created: true,
                canceled: true,
                cancel_reason: reason.to_string(),
                ..WatchResponse::default()
            })
            .await
    }

    /// Forgets watcher `id` (ended or canceled).
    fn forget(&mut self, id: i64) {
        if self.watchers.remove(&id).is_some() {
            metrics::etcd_watchers(-1);
        }
        self.aborts.remove(&id);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // The JoinSet aborts the tasks as it drops.
        if !self.watchers.is_empty() {
            metrics::etcd_watchers(-i64::try_from(self.watchers.len()).unwrap_or(i64::MAX));
        }
    }
}
