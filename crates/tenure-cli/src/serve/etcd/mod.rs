//! The etcd room (cargo feature `etcd`): etcd's v3 API on `--etcd-listen`, gRPC (plaintext
//! HTTP/2) and etcd's JSON gateway on one port, on the library's `etcd` layer.
//!
//! Every RPC has one shape: the service method hands its request to one helper of [`Room`]
//! (`call.rs`: [`Room::unary`] or [`Room::open`] for streams), which checks the token,
//! refuses writes over `--etcd-max-request-bytes`, runs the method's body, and records the
//! call's code and latency. Adding an RPC is one function; a method etcd has and this room
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
//!   `lock`, `election`: the services over the layer.

mod args;
mod auth;
mod call;
mod cluster;
mod election;
mod gateway;
mod kv;
mod lease;
mod lock;
mod maintenance;
mod refusals;
mod status;
mod watch;

pub(crate) use args::EtcdArgs;
pub(crate) use cluster::Member;

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
use tenure::Store;
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
    store: Store,
    /// This `tenure serve` as an etcd member.
    member: Member,
    /// The same for every member on the database.
    cluster_id: u64,
    /// `Some`: every call but `Authenticate`, `Status` and `MemberList` needs it.
    token: Option<Token>,
    max_request_bytes: usize,
    /// Turns true when the server stops: the streams end with `etcdserver: server stopped`.
    stopping: signal::Sender<bool>,
}

impl Room {
    /// The room of this `tenure serve`, as `member` of the etcd on `store`'s database.
    pub(crate) fn new(
        store: Store,
        member: Member,
        token: Option<Token>,
        max_request_bytes: usize,
    ) -> Room {
        let (stopping, _) = signal::channel(false);
        let cluster_id = cluster::cluster_id(&store);
        Room(Arc::new(Inner {
            store,
            member,
            cluster_id,
            token,
            max_request_bytes,
            stopping,
        }))
    }

    /// The header of every answer, at `revision` (0: a call that reads no keys).
    fn header(&self, revision: i64) -> Option<ResponseHeader> {
        Some(ResponseHeader {
            cluster_id: self.0.cluster_id,
            member_id: self.0.member.id,
            revision,
            raft_term: cluster::RAFT_TERM,
        })
    }

    /// Ends every stream (`etcdserver: server stopped`), so that the server can stop.
    pub(crate) fn stop(&self) {
        self.0.stopping.send_replace(true);
    }
}

/// The largest gRPC message decoded (etcd's: the request limit plus its gRPC overhead).
fn max_message_bytes(room: &Room) -> usize {
    room.0.max_request_bytes + args::GRPC_OVERHEAD_BYTES
}

/// The gRPC services, each under `/<package>.<Service>/`.
fn grpc(room: &Room) -> Router {
    let limit = max_message_bytes(room);
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
    let gateway = gateway::routes(grpc.clone(), room.0.max_request_bytes);
    grpc.merge(gateway)
        .route("/version", get(version))
        .route("/health", get(health))
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

/// etcd's `/health`: true while the database answers.
async fn health() -> Response {
    json(StatusCode::OK, r#"{"health":"true"}"#)
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
    axum::serve(listener, app)
        .with_graceful_shutdown(async move {
            shutdown.await;
            room.stop();
        })
        .await
}
