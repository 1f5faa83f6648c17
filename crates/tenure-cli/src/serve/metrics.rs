//! `/metrics` of `tenure serve`, and the series only the server records.
//!
//! The recorder is the one every command installs (`crate::watching`); the library's series
//! (`tenure::telemetry`: the campaigns of `--campaign` names, the store's round trips) come
//! with it. The server adds what its shared watcher sees of every name
//! (`tenure_observed_leader`, `tenure_observed_term`) and of itself (`tenure_serve_*`).

use super::error::ApiError;
use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use metrics::{describe_counter, describe_gauge};

/// Gives the server's own series their help text.
pub(crate) fn describe() {
    describe_gauge!(
        "tenure_observed_leader",
        "1 if anyone leads the name at the watcher's latest read, else 0."
    );
    describe_gauge!(
        "tenure_observed_term",
        "The name's term at the watcher's latest read."
    );
    describe_counter!(
        "tenure_serve_polls_total",
        "Database reads of the shared watcher (one serves every waiting request)."
    );
    describe_counter!(
        "tenure_serve_poll_errors_total",
        "Database reads of the shared watcher that failed."
    );
    describe_gauge!(
        "tenure_serve_waiting_requests",
        "Blocking queries waiting now."
    );
    #[cfg(feature = "consul")]
    describe_counter!(
        "tenure_consul_requests_total",
        "Requests to the Consul API, by method, route pattern and status."
    );
}

/// `GET /metrics`: the Prometheus text format.
pub(crate) async fn render(State(state): State<AppState>) -> Response {
    match &state.0.metrics {
        Some(handle) => crate::watching::render(handle),
        None => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no metrics recorder is installed",
        )
        .into_response(),
    }
}
