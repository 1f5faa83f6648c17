//! The one helper every RPC of the room goes through: [`Room::unary`] for a call with one
//! answer, [`Room::open`] for a stream. It checks the token, refuses a write larger than
//! etcd's 1.5 MiB limit (etcd's `request is too large`, before anything is read or written),
//! runs the method's body, completes the answer's header (this cluster, this member, the
//! term), and records the call's outcome and latency (`crate::serve::metrics`). A method that
//! is not served goes through it too ([`Room::unserved`]).
//!
//! # Tokens
//! With `--token-file`, every call but `Authenticate`, `Maintenance.Status` and
//! `Cluster.MemberList` (which etcd also answers without one) presents the server's token as
//! gRPC metadata `token` (what etcd's clients send after `Authenticate`) or `authorization`
//! (what etcd's JSON gateway forwards from the `Authorization` header; `Bearer ` optional).
//! A call without one gets etcd's `user name is empty`, a wrong one `invalid auth token`.

use super::headers::Headed;
use super::status::{self, Refused};
use super::Room;
use crate::serve::auth::bearer;
use crate::serve::metrics;
use std::future::Future;
use tenure::etcd::MAX_REQUEST_BYTES;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};

/// One RPC as the helper sees it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rpc {
    /// `Service.Method`, the `method` label of the metrics (`KV.Range`).
    pub name: &'static str,
    /// A write: its request is bounded by etcd's request limit (1.5 MiB).
    write: bool,
    /// Answered without a token.
    open: bool,
}

impl Rpc {
    /// A call that writes nothing.
    pub(super) const fn read(name: &'static str) -> Rpc {
        Rpc {
            name,
            write: false,
            open: false,
        }
    }

    /// A call whose request etcd bounds by its request limit (it goes through Raft there).
    pub(super) const fn write(name: &'static str) -> Rpc {
        Rpc {
            name,
            write: true,
            open: false,
        }
    }

    /// A call answered without a token.
    pub(super) const fn open(name: &'static str) -> Rpc {
        Rpc {
            name,
            write: false,
            open: true,
        }
    }
}

/// The answers of a stream, as tonic sends them.
pub(super) type Outbound<A> = ReceiverStream<Result<A, Status>>;

/// Where a stream's body sends its answers (their headers completed on the way).
pub(super) struct Outbox<A> {
    tx: mpsc::Sender<Result<A, Status>>,
    room: Room,
}

impl<A: Headed> Outbox<A> {
    /// Sends one answer; `false` once the client has gone.
    pub(super) async fn send(&self, mut answer: A) -> bool {
        self.room.stamp(answer.header());
        self.tx.send(Ok(answer)).await.is_ok()
    }
}

#[cfg(test)]
impl<A> Outbox<A> {
    /// An outbox of `room` and what reaches its client (for tests of a stream's body).
    pub(super) fn for_test(room: Room) -> (Outbox<A>, mpsc::Receiver<Result<A, Status>>) {
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        (Outbox { tx, room }, rx)
    }
}

impl<A> Clone for Outbox<A> {
    fn clone(&self) -> Outbox<A> {
        Outbox {
            tx: self.tx.clone(),
            room: self.room.clone(),
        }
    }
}

/// How many answers of one stream wait for a slow client before its body waits too.
const STREAM_BUFFER: usize = 64;

impl Room {
    /// Runs one call with one answer: admission, then `body`, then the answer's header (this
    /// cluster and member) and the metrics.
    ///
    /// # Errors
    /// The admission's status (token, size) or `body`'s.
    pub(super) async fn unary<Q, A, F, Fut>(
        &self,
        rpc: Rpc,
        request: Request<Q>,
        body: F,
    ) -> Result<Response<A>, Status>
    where
        Q: prost::Message,
        A: Headed,
        F: FnOnce(Room, Q) -> Fut,
        Fut: Future<Output = Result<A, Refused>>,
    {
        let started = Instant::now();
        let result = match self.admit(rpc, request.metadata()) {
            Ok(()) => {
                let request = request.into_inner();
                if rpc.write && request.encoded_len() > MAX_REQUEST_BYTES {
                    Err(status::request_too_large())
                } else {
                    body(self.clone(), request).await.map_err(|Refused(s)| s)
                }
            }
            Err(refused) => Err(refused),
        };
        metrics::etcd_call(rpc.name, code(&result), started.elapsed());
        result.map(|mut answer| {
            self.stamp(answer.header());
            Response::new(answer)
        })
    }

    /// Opens a stream: admission, then `body` on a task of its own, which sends its answers
    /// to its [`Outbox`] and ends with `Ok` (the stream ends) or a status (sent last). The
    /// task ends when the client goes away or the server stops (`etcdserver: server
    /// stopped`), whatever `body` is waiting for.
    ///
    /// # Errors
    /// The admission's status (the token).
    pub(super) fn open<I, A, F, Fut>(
        &self,
        rpc: Rpc,
        request: Request<I>,
        body: F,
    ) -> Result<Response<Outbound<A>>, Status>
    where
        I: Send + 'static,
        A: Send + 'static,
        F: FnOnce(Room, I, Outbox<A>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<(), Refused>> + Send + 'static,
    {
        let started = Instant::now();
        let admitted = self.admit(rpc, request.metadata());
        metrics::etcd_call(rpc.name, code(&admitted), started.elapsed());
        admitted?;
        let (tx, rx) = mpsc::channel(STREAM_BUFFER);
        let room = self.clone();
        let mut stopping = self.0.stopping.subscribe();
        let inbound = request.into_inner();
        tokio::spawn(async move {
            let outbox = Outbox {
                tx: tx.clone(),
                room: room.clone(),
            };
            let ended = tokio::select! {
                ended = body(room, inbound, outbox) => ended.map_err(|Refused(s)| s),
                () = tx.closed() => Ok(()),
                _ = stopping.wait_for(|stopping| *stopping) => Err(status::stopped()),
            };
            if let Err(status) = ended {
                let _ = tx.send(Err(status)).await;
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    /// A method this room does not serve: admission (an unauthorized caller learns nothing
    /// more), then gRPC's `UNIMPLEMENTED`, counted like every call.
    ///
    /// # Errors
    /// Always: the admission's status or `UNIMPLEMENTED`.
    pub(super) fn unserved<I, A>(&self, rpc: Rpc, request: &Request<I>) -> Result<A, Status> {
        let started = Instant::now();
        let method = rpc.name.rsplit('.').next().unwrap_or(rpc.name);
        let result = self
            .admit(rpc, request.metadata())
            .and_then(|()| Err(status::unimplemented(method)));
        metrics::etcd_call(rpc.name, code(&result), started.elapsed());
        result
    }

    /// Lets the call in: with a server token, only with that token (see the module's docs).
    fn admit(&self, rpc: Rpc, metadata: &MetadataMap) -> Result<(), Status> {
        let Some(token) = &self.0.token else {
            return Ok(());
        };
        if rpc.open {
            return Ok(());
        }
        let given = metadata
            .get("token")
            .or_else(|| metadata.get("authorization"))
            .map(|v| v.as_bytes());
        match given {
            None => Err(status::user_empty()),
            Some(given) if token.matches(bearer(given).unwrap_or(given)) => Ok(()),
            Some(_) => Err(status::invalid_token()),
        }
    }
}

/// The gRPC code of an outcome.
fn code<T>(result: &Result<T, Status>) -> tonic::Code {
    match result {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    }
}
