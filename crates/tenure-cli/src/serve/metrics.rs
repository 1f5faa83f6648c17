//! `/metrics`: the Prometheus recorder behind the `metrics` facade.
//!
//! The library's electors already record through the facade (`tenure_campaign_seconds`,
//! `tenure_database_errors_total`, `tenure_transitions_total`, `tenure_is_leader`,
//! `tenure_term`, `tenure_lease_remaining_seconds`, labelled by `name`); installing the recorder
//! is all it takes to export them. The server adds what its shared watcher sees of every name
//! (`tenure_observed_leader`, `tenure_observed_term`) and of itself (`tenure_serve_*`).

use super::error::ApiError;
use super::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::sync::OnceLock;
use std::time::Duration;

/// Buckets of the campaign round trip, in seconds: a millisecond on a local database up to the
/// seconds a struggling one takes before the timeout.
const CAMPAIGN_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
];

/// Installs the process-wide recorder once and returns its handle (the same handle on later
/// calls). Histograms are drained by [`upkeep`], which the caller runs.
///
/// # Errors
/// Another recorder is already installed.
pub fn install() -> Result<PrometheusHandle, String> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Full("tenure_campaign_seconds".into()),
                    CAMPAIGN_BUCKETS,
                )
                .and_then(PrometheusBuilder::install_recorder)
                .map_err(|e| format!("cannot install the Prometheus recorder: {e}"))?;
            describe();
            Ok(handle)
        })
        .clone()
}

/// Runs the recorder's upkeep every few seconds, forever.
pub async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

fn describe() {
    describe_histogram!(
        "tenure_campaign_seconds",
        Unit::Seconds,
        "Round trip of each campaign (acquire or renew) of this process's electors."
    );
    describe_counter!(
        "tenure_database_errors_total",
        "Campaigns of this process's electors that failed (database error or timeout)."
    );
    describe_counter!(
        "tenure_transitions_total",
        "Leadership transitions of this process's electors, by event (acquired, lost)."
    );
    describe_gauge!(
        "tenure_is_leader",
        "1 while this process's elector leads the name, else 0."
    );
    describe_gauge!(
        "tenure_term",
        "The term (fencing token) of this process's latest tenure of the name."
    );
    describe_gauge!(
        "tenure_lease_remaining_seconds",
        Unit::Seconds,
        "Time left of the lease, as the database said at this process's latest campaign."
    );
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
}

/// `GET /metrics`: the Prometheus text format.
pub async fn render(State(state): State<AppState>) -> Response {
    match &state.0.metrics {
        Some(handle) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            handle.render(),
        )
            .into_response(),
        None => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "no metrics recorder is installed",
        )
        .into_response(),
    }
}
