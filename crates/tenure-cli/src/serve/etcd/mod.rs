//! The etcd room (cargo feature `etcd`): etcd's v3 API on `--etcd-listen`, gRPC (plaintext
//! HTTP/2) and etcd's JSON gateway on one port, on the library's `etcd` layer.
//!
//! Every RPC has one shape: the service method hands its request to one helper of [`Room`]
//! (`call.rs`: `Room::unary`, or `Room::open` for streams), which checks the token, refuses
//! writes over etcd's 1.5 MiB request limit, runs the method's body (the layer's call, its
//! errors answered with etcd's codes and texts), completes the answer's header (this cluster
//! and member) and records the call's code and latency. Adding an RPC is one function; a method etcd has and this room
//! does not serve answers gRPC's `UNIMPLEMENTED` through the same helper, never a silent fake.
//!
//! The JSON gateway is what etcd's is: a proxy in front of the gRPC services. Its routes are
//! read from the `google.api.http` annotations of etcd's own protocol definitions, a JSON
//! body becomes the protobuf request, the call goes through the gRPC services in process,
//! and the answer comes back as JSON with etcd's field names (`gateway/`).
//!
//! # Layout
//! - this file: [`Room`] (what every service shares), the router and [`serve`].
//! - `args`: the flags (`--etcd-listen` …); `call`: the one helper; `status`: etcd's statuses;
//!   `refusals`: what the gRPC layer refuses before a service sees it, in grpc-go's words.
//! - `gateway/`: the JSON gateway (routes from the annotations, JSON ⇄ protobuf, gRPC frames).
//! - `cluster`, `maintenance`, `auth`: members, status and tokens; `kv`, `lease`, `watch`,
//!   `lock`, `election`: the services over the layer; `headers`: every answer's header.
//! - `watch/`: the watch hub (one read of the log for every watcher of this server) and the
//!   watch streams; `renewer`: keep-alives of every stream, renewed in batches; `upkeep`:
//!   this member's heartbeat, the reaping of ended leases and the log's compaction.

mod args;
mod auth;
mod call;
mod cluster;
mod election;
mod gateway;
mod headers;
mod kv;
mod lease;
mod lock;
mod maintenance;
mod refusals;
mod renewer;
mod status;
mod upkeep;
mod watch;

pub(crate) use args::EtcdArgs;
pub(crate) use cluster::{cluster_id, Member};

use crate::serve::Token;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tenure::etcd::{Etcd, MAX_REQUEST_BYTES};
use tenure_etcd_proto::etcdserverpb::auth_server::AuthServer;
use tenure_etcd_proto::etcdserverpb::cluster_server::ClusterServer;
use tenure_etcd_proto::etcdserverpb::kv_server::KvServer;
use tenure_etcd_proto::etcdserverpb::lease_server::LeaseServer;
use tenure_etcd_proto::etcdserverpb::maintenance_server::MaintenanceServer;
use tenure_etcd_proto::etcdserverpb::watch_server::WatchServer;
use tenure_etcd_proto::etcdserverpb::ResponseHeader;
use tenure_etcd_proto::v3electionpb::election_server::ElectionServer;
use tenure_etcd_proto::v3lockpb::lock_server::LockServer;
use tokio::net::TcpListener;
use tokio::sync::watch as signal;

/// What every service of the room shares. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Room(Arc<Inner>);

struct Inner {
    etcd: Etcd,
    /// This `tenure serve` as an etcd member.
    member: Member,
    /// The same for every member on the database.
    cluster_id: u64,
    /// `Some`: every call but `Authenticate`, `Status` and `MemberList` needs it.
    token: Option<Token>,
    /// The log's followers: one read of the log serves every watcher of this server.
    hub: watch::Hub,
    /// Keep-alives of every stream, renewed in batches.
    renewer: renewer::Renewer,
    /// Turns true when the server stops: the streams end with `etcdserver: server stopped`.
    stopping: signal::Sender<bool>,
}

/// How the room is set up (from `tenure serve`'s flags).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// This member.
    pub member: Member,
    /// The same for every server on the database (see [`cluster::cluster_id`]).
    pub cluster_id: u64,
    /// `--token-file`'s token.
    pub token: Option<Token>,
    /// How often the log is read where no change signal woke its followers, ended leases
    /// are reaped, and a waiting recipe looks again.
    pub poll: Duration,
    /// How long this member stays listed after its last heartbeat.
    pub member_ttl: Duration,
    /// Revisions of history kept (0: no automatic compaction).
    pub retention: u32,
    /// How many batches the watch feed keeps for a slow watcher (`--etcd-watch-buffer`).
    pub watch_buffer: usize,
}

impl Room {
    /// The room of this `tenure serve`, as a member of the etcd on `store`'s database (listed
    /// when this returns, unless the database failed: then the upkeep keeps trying), with its
    /// upkeep (membership, reaping ended leases, compaction) and its watch hub running on the
    /// current runtime until [`Room::stop`].
    pub(crate) async fn start(store: tenure::Store, settings: Settings) -> Room {
        let (stopping, _) = signal::channel(false);
        let etcd = Etcd::new(store).poll_interval(settings.poll);
        let hub = watch::Hub::spawn(
            etcd.clone(),
            settings.poll,
            settings.watch_buffer,
            stopping.subscribe(),
        );
        // The recipes this room runs wake when the hub's timed reads find new revisions.
        let etcd = etcd.woken_by(hub.nudges());
        let renewer = renewer::Renewer::spawn(etcd.clone());
        let room = Room(Arc::new(Inner {
            etcd,
            member: settings.member.clone(),
            cluster_id: settings.cluster_id,
            token: settings.token.clone(),
            hub,
            renewer,
            stopping,
        }));
        let listed = match room
            .etcd()
            .member_join(&settings.member.to_proto(), settings.member_ttl)
            .await
        {
            Ok(_) => true,
            Err(e) => {
                tracing::warn!(error = %e, "etcd member could not join; trying again");
                false
            }
        };
        tokio::spawn(upkeep::run(room.clone(), settings, listed));
        room
    }

    /// The layer.
    fn etcd(&self) -> &Etcd {
        &self.0.etcd
    }

    /// The header of an answer at `revision` (the rest is filled in on the way out).
    fn header(revision: i64) -> Option<ResponseHeader> {
        Some(ResponseHeader {
            revision,
            ..ResponseHeader::default()
        })
    }

    /// Completes a header the layer filled in: this cluster, this member, the term.
    fn stamp(&self, header: &mut Option<ResponseHeader>) {
        let header = header.get_or_insert_with(ResponseHeader::default);
        header.cluster_id = self.0.cluster_id;
        header.member_id = self.0.member.id;
        header.raft_term = cluster::RAFT_TERM;
    }

    /// A future that completes when the server stops.
    fn stopped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut stopping = self.0.stopping.subscribe();
        async move {
            let _ = stopping.wait_for(|stopping| *stopping).await;
        }
    }

    /// `future`, unless the server stops first (then etcd's `server stopped`): a call that
    /// may wait long (a lock, a campaign) does not hold the server up.
    async fn until_stopped<T>(
        &self,
        future: impl Future<Output = T>,
    ) -> Result<T, status::Refused> {
        tokio::select! {
            out = future => Ok(out),
            () = self.stopped() => Err(status::stopped().into()),
        }
    }

    /// Ends every stream (`etcdserver: server stopped`) and the upkeep, which leaves the
    /// member list; the server then stops.
    pub(crate) fn stop(&self) {
        self.0.stopping.send_replace(true);
    }
}

/// The largest gRPC message decoded (etcd's: the request limit plus its gRPC overhead).
const MAX_MESSAGE_BYTES: usize = MAX_REQUEST_BYTES + args::GRPC_OVERHEAD_BYTES;

/// The gRPC services, each under `/<package>.<Service>/`.
fn grpc(room: &Room) -> Router {
    let limit = MAX_MESSAGE_BYTES;
    Router::new()
        .route_service(
            "/etcdserverpb.KV/{*method}",
            KvServer::new(room.clone()).max_decoding_message_size(limit),
        )
        .route_service(
            "/etcdserverpb.Watch/{*method}",
            WatchServer::new(room.clone()).max_decoding_message_size(limit),
        )
        .route_service(
            "/etcdserverpb.Lease/{*method}",
            LeaseServer::new(room.clone()).max_decoding_message_size(limit),
        )
        .route_service(
            "/etcdserverpb.Cluster/{*method}",
            ClusterServer::new(room.clone()).max_decoding_message_size(limit),
        )
        .route_service(
            "/etcdserverpb.Maintenance/{*method}",
            MaintenanceServer::new(room.clone()).max_decoding_message_size(limit),
        )
        .route_service(
            "/etcdserverpb.Auth/{*method}",
            AuthServer::new(room.clone()).max_decoding_message_size(limit),
        )
        .route_service(
            "/v3lockpb.Lock/{*method}",
            LockServer::new(room.clone()).max_decoding_message_size(limit),
        )
        .route_service(
            "/v3electionpb.Election/{*method}",
            ElectionServer::new(room.clone()).max_decoding_message_size(limit),
        )
        .layer(middleware::from_fn(refusals::in_grpc_go_words))
}

/// Everything on `--etcd-listen`: the gRPC services, the JSON gateway in front of them,
/// `/version` and `/health`.
pub(crate) fn app(room: &Room) -> Router {
    let grpc = grpc(room);
    let gateway = gateway::routes(grpc.clone(), MAX_REQUEST_BYTES);
    grpc.merge(gateway)
        .route("/version", get(version))
        .route("/health", get(health).with_state(room.clone()))
        .fallback(no_route)
}

/// etcd's `/version`: the API this room speaks (etcd 3.4's), which clients such as Patroni
/// read to choose their paths.
async fn version() -> Response {
    json(
        StatusCode::OK,
        r#"{"etcdserver":"3.4.0","etcdcluster":"3.4.0"}"#,
    )
}

/// etcd's `/health`: true while the database answers (a read of the revision).
async fn health(axum::extract::State(room): axum::extract::State<Room>) -> Response {
    match room.etcd().revisions().await {
        Ok(_) => json(StatusCode::OK, r#"{"health":"true"}"#),
        Err(e) => {
            tracing::warn!(error = %e, "etcd health: the database did not answer");
            json(StatusCode::SERVICE_UNAVAILABLE, r#"{"health":"false"}"#)
        }
    }
}

/// An unknown gRPC service answers gRPC's `UNIMPLEMENTED` (grpc-go's text); any other path
/// etcd's plain 404.
async fn no_route(request: Request) -> Response {
    let grpc = request
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/grpc"));
    if grpc {
        let service = request
            .uri()
            .path()
            .trim_start_matches('/')
            .split('/')
            .next()
            .unwrap_or("")
            .to_string();
        return tonic::Status::unimplemented(format!("unknown service {service}"))
            .into_http::<Body>()
            .into_response();
    }
    (StatusCode::NOT_FOUND, "Not Found\n").into_response()
}

fn json(status: StatusCode, body: &'static str) -> Response {
    (
        status,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

/// Runs the room on `listener` until `shutdown` completes; then every stream ends and the
/// server stops after the calls in flight.
///
/// # Errors
/// Errors of the listener.
pub(crate) async fn serve(
    listener: TcpListener,
    room: Room,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = app(&room);
    axum::serve(super::without_delay(listener), app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            room.stop();
        })
        .await
}
