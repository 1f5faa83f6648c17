//! `tenure serve`: tenure over HTTP — JSON reads, blocking queries in the manner of Consul's,
//! admin calls behind a bearer token, a leader-check for load balancers, Prometheus metrics and
//! a status page.
//!
//! # Layout
//! - this file: [`AppState`], the router [`app`] (drivable with `oneshot`, without a socket)
//!   and [`serve`], which runs it until the caller's shutdown future completes.
//! - `error`: [`ApiError`](error::ApiError), the JSON error every failure answers with.
//! - `reads`: health, status, one lease, its leader and its history; blocking or not; the
//!   candidates of a name and the spreading groups.
//! - `campaigns`: this process's own `--campaign` roles and the leader-check.
//! - `admin`: demote, handover, pause and resume, behind the token.
//! - `params`: path names, query parameters and admin bodies, parsed strictly (400 otherwise).
//! - `watch`: the shared watcher. One database read per poll interval (and, on PostgreSQL, one
//!   per NOTIFY) serves every waiting client, however many there are.
//! - `renewals`: each name's renewals as the watcher reads them (the gap between renewals and
//!   the lease left at each), for the status page's charts (`GET /v1/renewals`).
//! - `consul`, `consul_node`: Consul's session and KV API (leader election, locks,
//!   semaphores) on `tenure::consul`, and this instance as a Consul node (heartbeat of its
//!   sessions without TTL, the reap of expired ones, the index blocking queries wait on).
//! - `auth`: the admin token, compared in constant time, and the requester's address.
//! - `metrics`: the Prometheus recorder behind the library's `metrics` facade.
//! - `openapi.json`, `page.html`: the API description and the status page, embedded.

mod admin;
mod auth;
mod campaigns;
mod consul;
mod consul_node;
mod error;
mod go_duration;
pub(crate) mod metrics;
mod params;
mod reads;
mod renewals;
mod watch;

#[cfg(test)]
mod tests;

pub(crate) use auth::Token;
pub(crate) use consul_node::ConsulNode;
pub(crate) use watch::Watcher;

use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
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
pub(crate) struct Campaign {
    /// This process's candidate id.
    pub candidate: String,
    /// The elector's role; the leader-check answers 200 only while it says leader.
    pub role: channel::Receiver<Role>,
}

/// What every handler shares. Cheap to clone.
#[derive(Clone)]
pub(crate) struct AppState(Arc<Shared>);

/// The parts of an [`AppState`].
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

/// Every route of `tenure serve`.
pub(crate) fn app(state: AppState) -> Router {
    let admin = Router::new()
        .route("/v1/demote/{name}", post(admin::demote))
        .route("/v1/handover/{name}", post(admin::handover))
        .route("/v1/pause/{name}", post(admin::pause))
        .route("/v1/resume/{name}", post(admin::resume))
        .route_layer(middleware::from_fn_with_state(state.clone(), auth::require));
    // Consul's API: values up to 512 KiB, checked by the handler (Consul's 413).
    let consul = Router::new()
        .route("/v1/session/create", put(consul::create_session))
        .route("/v1/session/renew/{id}", put(consul::renew_session))
        .route("/v1/session/destroy/{id}", put(consul::destroy_session))
        .route("/v1/session/info/{id}", get(consul::session_info))
        .route("/v1/session/list", get(consul::session_list))
        .route("/v1/session/node/{node}", get(consul::session_node))
        .route(
            "/v1/kv/",
            get(consul::kv_get_root).delete(consul::kv_delete_root),
        )
        .route(
            "/v1/kv/{*key}",
            get(consul::kv_get)
                .put(consul::kv_put)
                .delete(consul::kv_delete),
        )
        .route_layer(middleware::from_fn(crate::watching::consul_request))
        .layer(DefaultBodyLimit::max(tenure::consul::MAX_VALUE_BYTES + 1));
    Router::new()
        .route("/", get(page))
        .route("/openapi.json", get(openapi))
        .route("/health", get(reads::health))
        .route("/metrics", get(metrics::render))
        .route("/v1/status", get(reads::status))
        .route("/v1/status/{name}", get(reads::lease))
        .route("/v1/leader/{name}", get(reads::leader))
        .route("/v1/history/{name}", get(reads::history))
        .route("/v1/candidates/{name}", get(reads::candidates))
        .route("/v1/renewals", get(renewals::renewals))
        .route("/v1/groups", get(reads::groups))
        .route("/v1/self", get(campaigns::campaigns))
        .route("/v1/self/{name}", get(campaigns::campaign))
        .route("/v1/leader-check/{name}", get(campaigns::leader_check))
        .merge(admin)
        .merge(consul)
        .fallback(error::no_route)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(middleware::from_fn(edges))
        .with_state(state)
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
    axum::serve(listener, service)
        .with_graceful_shutdown(async move {
            shutdown.await;
            watcher.stop();
        })
        .await
}

/// What every answer shares: a body announced larger than [`MAX_BODY_BYTES`] is refused before
/// it is read, a 405 says why in JSON like every other error, and nothing is cached (a
/// leader-check answer is only true now).
async fn edges(request: Request, next: Next) -> Response {
    let announced = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if request.uri().path().starts_with("/v1/kv/") {
        if let Some(n) = announced.filter(|n| *n > tenure::consul::MAX_VALUE_BYTES as u64) {
            return consul::too_large(usize::try_from(n).unwrap_or(usize::MAX)).into_response();
        }
    } else if announced.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return error::ApiError::too_large().into_response();
    }
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

const PAGE: &str = include_str!("page.html");
const OPENAPI: &str = include_str!("openapi.json");

/// The status page: plain HTML and JS, nothing fetched but this server's own API.
async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'",
            ),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        PAGE,
    )
        .into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}
