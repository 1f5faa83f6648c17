//! `tenure serve`: one house, several rooms. The house is what every build of the server has:
//! the listener, the shared watcher of the leases, `/health`, `/metrics`, `/openapi.json`, the
//! admin token and the JSON error. Each protocol it speaks is a room — a folder of its own
//! behind a cargo feature of `tenure-cli`, on in the default build — that gives the house its
//! routes and its part of the OpenAPI document; a slim build leaves a room out with its feature.
//!
//! # Layout
//! - this file: [`AppState`], the router [`app`] (drivable with `oneshot`, without a socket)
//!   and [`serve`], which runs it until the caller's shutdown future completes.
//! - `error`: [`ApiError`](error::ApiError), the JSON error every failure of the house and of
//!   the HTTP API answers with.
//! - `health`, `metrics`: `/health` and the Prometheus recorder behind the library's `metrics`
//!   facade.
//! - `watch`, `renewals`: the shared watcher. One database read per poll interval (and, on
//!   PostgreSQL, one per NOTIFY) serves every waiting client, however many there are; it keeps
//!   each name's renewals for the status page's charts.
//! - `auth`: the admin token, compared in constant time, and the requester's address.
//! - `openapi`: the document, the house's part (`openapi.json`) merged with the rooms'.
//! - the rooms: `api` (feature `http-api`: tenure's reads, admin calls, campaigns, the status
//!   page), `consul` (feature `consul`: Consul's session and KV API, and this instance as a
//!   Consul node) and `etcd` (feature `etcd`: etcd's v3 API, gRPC and its JSON gateway, on a
//!   listener of its own, `--etcd-listen`).

#[cfg(feature = "http-api")]
mod api;
mod auth;
#[cfg(feature = "consul")]
mod consul;
mod error;
#[cfg(feature = "etcd")]
pub(crate) mod etcd;
mod health;
pub(crate) mod metrics;
mod openapi;
mod renewals;
mod watch;

#[cfg(test)]
mod tests;

pub(crate) use auth::Token;
#[cfg(feature = "consul")]
pub(crate) use consul::{ConsulArgs, ConsulNode};
#[cfg(feature = "etcd")]
pub(crate) use etcd::EtcdArgs;
pub(crate) use watch::Watcher;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::PrometheusHandle;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tenure::{Role, Store};
use tokio::net::TcpListener;
use tokio::sync::watch as channel;

/// The largest request body accepted (admin bodies are a few bytes); larger ones get 413.
pub(crate) const MAX_BODY_BYTES: usize = 16 * 1024;

/// This process's own campaign for one name (`--campaign`).
#[derive(Clone, Debug)]
#[cfg_attr(not(feature = "http-api"), allow(dead_code))]
pub(crate) struct Campaign {
    /// This process's candidate id.
    pub candidate: String,
    /// The elector's role; the leader-check answers 200 only while it says leader.
    pub role: channel::Receiver<Role>,
}

/// What every handler shares. Cheap to clone.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Shared>);

/// The parts of an [`AppState`]. (A slim build's rooms leave some of them unread.)
#[cfg_attr(not(all(feature = "http-api", feature = "consul")), allow(dead_code))]
pub(crate) struct Shared {
    /// Reads without `index`, and the admin calls, go to the database through it.
    pub store: Store,
    /// Blocking queries watch it instead.
    pub watcher: Watcher,
    /// This process's campaigns, by name.
    pub campaigns: BTreeMap<String, Campaign>,
    /// `None`: admin calls are refused (no `--token-file`).
    pub token: Option<Token>,
    /// `None`: `/metrics` answers 503 (no recorder installed, as in most unit tests).
    pub metrics: Option<PrometheusHandle>,
    /// Blocking queries never wait longer than this, whatever they ask for.
    pub max_wait: Duration,
    /// This instance as a Consul node (the Consul API's sessions and index).
    #[cfg(feature = "consul")]
    pub consul: ConsulNode,
}

impl AppState {
    /// Shares `shared` between the handlers.
    pub(crate) fn new(shared: Shared) -> AppState {
        AppState(Arc::new(shared))
    }

    /// The shared watcher (to stop it, or to count the waiting requests).
    pub(crate) fn watcher(&self) -> &Watcher {
        &self.0.watcher
    }
}

/// Every route of `tenure serve`: the house's, and those of every room compiled in.
pub(crate) fn app(state: AppState) -> Router {
    let house = Router::new()
        .route("/openapi.json", get(openapi))
        .route("/health", get(health::health))
        .route("/metrics", get(metrics::render));
    #[cfg(feature = "http-api")]
    let house = house.merge(api::routes(&state));
    // Bodies of at most MAX_BODY_BYTES here; a room with a limit of its own (Consul's values)
    // brings it with its routes.
    let house = house
        .layer(middleware::from_fn(limit_body))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES));
    #[cfg(feature = "consul")]
    let house = house.merge(consul::routes());
    house
        .fallback(error::no_route)
        .layer(middleware::from_fn(edges))
        .with_state(state)
}

/// The parts of the OpenAPI document of the rooms compiled in.
const ROOMS: &[&str] = &[
    #[cfg(feature = "http-api")]
    api::OPENAPI,
    #[cfg(all(feature = "http-api", feature = "etcd"))]
    api::OPENAPI_ETCD,
    #[cfg(feature = "consul")]
    consul::OPENAPI,
];

/// `listener` with Nagle's algorithm off on every connection it accepts (`TCP_NODELAY`):
/// an answer written in several pieces (an HTTP/2 response's headers, data and trailers; a
/// streamed event) leaves at once, instead of waiting for the client's delayed ACK (40 ms on
/// Linux), as etcd's and Consul's servers (Go sets it on every TCP connection) answer.
pub(crate) fn without_delay(
    listener: TcpListener,
) -> axum::serve::TapIo<TcpListener, fn(&mut tokio::net::TcpStream)> {
    use axum::serve::ListenerExt;
    fn no_delay(stream: &mut tokio::net::TcpStream) {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY not set on a connection");
        }
    }
    listener.tap_io(no_delay as fn(&mut tokio::net::TcpStream))
}

/// Runs `app(state)` on `listener` until `shutdown` completes; then blocking queries answer at
/// once and the server stops after the requests in flight.
///
/// # Errors
/// Errors of the listener.
pub(crate) async fn serve(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let watcher = state.watcher().clone();
    let service = app(state).into_make_service_with_connect_info::<SocketAddr>();
    axum::serve(without_delay(listener), service)
        .with_graceful_shutdown(async move {
            shutdown.await;
            watcher.stop();
        })
        .await
}

/// A body announced larger than [`MAX_BODY_BYTES`] is refused before it is read.
async fn limit_body(request: Request, next: Next) -> Response {
    if announced_length(&request).is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return error::ApiError::too_large().into_response();
    }
    next.run(request).await
}

/// The body's length as its `Content-Length` announces it.
pub(crate) fn announced_length(request: &Request) -> Option<u64> {
    request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

/// What every answer shares: a 405 says why in JSON like every other error, and nothing is
/// cached (a leader-check answer is only true now).
async fn edges(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    if response.status() == StatusCode::METHOD_NOT_ALLOWED
        && !response.headers().contains_key(header::CONTENT_TYPE)
    {
        let allow = response.headers().get(header::ALLOW).cloned();
        response = error::ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed on this path",
        )
        .into_response();
        if let Some(allow) = allow {
            response.headers_mut().insert(header::ALLOW, allow);
        }
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// The API description of this build's routes.
async fn openapi() -> Response {
    axum::Json(openapi::document(ROOMS)).into_response()
}

/// Whether a change signal may concern what `serve`'s lease view (`watch.rs`) and Consul's
/// index follow: every topic but etcd's, whose writes touch only the etcd tables. Each etcd
/// write woke both, and each read again for nothing: a lease list and a Consul index request
/// per write, on every `serve` of the database.
///
/// Named here, not through `tenure::etcd::TOPIC`, for builds without etcd's API (another
/// `serve` on the database may have it; a test checks the two agree).
pub(crate) fn beyond_etcd(topic: tenure::Topic<'_>) -> bool {
    topic != tenure::Topic::Layer("etcd")
}
