//! The HTTP API room (cargo feature `http-api`): tenure's own reads, admin calls and this
//! process's campaigns as JSON, blocking queries in the manner of Consul's, and the status page.
//!
//! - `reads`: status, one lease, its leader and its history; blocking or not; the candidates
//!   of a name, the spreading groups, the renewals the watcher saw.
//! - `campaigns`: this process's own `--campaign` roles and the leader-check.
//! - `admin`: demote, handover, pause and resume, behind the token.
//! - `etcd` (with the feature `etcd`): the etcd on the database as an operator sees it.
//! - `params`: path names, query parameters and admin bodies, parsed strictly (400 otherwise).
//! - `openapi.json`: this room's part of the API description (`openapi_etcd.json` its etcd
//!   read's, with the feature `etcd`); `page.html`: the status page.

mod admin;
mod campaigns;
#[cfg(feature = "etcd")]
mod etcd;
mod params;
mod reads;

use super::AppState;
use axum::http::header;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

/// This room's part of the OpenAPI document.
pub(super) const OPENAPI: &str = include_str!("openapi.json");
/// Its part for `GET /v1/etcd`, in a build with the etcd layer (feature `etcd`).
#[cfg(feature = "etcd")]
pub(super) const OPENAPI_ETCD: &str = include_str!("openapi_etcd.json");

/// This room's routes.
pub(super) fn routes(state: &AppState) -> Router<AppState> {
    let admin = Router::new()
        .route("/v1/demote/{name}", post(admin::demote))
        .route("/v1/handover/{name}", post(admin::handover))
        .route("/v1/pause/{name}", post(admin::pause))
        .route("/v1/resume/{name}", post(admin::resume))
        .route_layer(middleware::from_fn_with_state(
            state.clone(),
            admin::require,
        ));
    let reads = Router::new();
    #[cfg(feature = "etcd")]
    let reads = reads.route("/v1/etcd", get(etcd::overview));
    reads
        .route("/", get(page))
        .route("/v1/status", get(reads::status))
        .route("/v1/status/{name}", get(reads::lease))
        .route("/v1/leader/{name}", get(reads::leader))
        .route("/v1/history/{name}", get(reads::history))
        .route("/v1/candidates/{name}", get(reads::candidates))
        .route("/v1/renewals", get(reads::renewals))
        .route("/v1/groups", get(reads::groups))
        .route("/v1/self", get(campaigns::campaigns))
        .route("/v1/self/{name}", get(campaigns::campaign))
        .route("/v1/leader-check/{name}", get(campaigns::leader_check))
        .merge(admin)
}

const PAGE: &str = include_str!("page.html");

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
