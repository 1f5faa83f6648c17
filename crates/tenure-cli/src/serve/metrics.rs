//! `/metrics` of `tenure serve`, and the series only the server records.
//!
//! The recorder is the one every command installs (`crate::watching`); the library's series
//! (`tenure::telemetry`: the campaigns of `--campaign` names, the store's round trips) come
//! with it. The server adds what its shared watcher sees of every name
//! (`tenure_observed_leader`, `tenure_observed_term`) and of itself (`tenure_serve_*`), and
//! the etcd room's series (`tenure_etcd_*`), declared here and recorded where everything of
//! the room passes: its one call helper (calls and latency by method) and its watch hub
//! (revision, compaction floor, live leases, watchers).

use super::error::ApiError;
use super::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use metrics::{describe_counter, describe_gauge};
#[cfg(feature = "etcd")]
use metrics::{describe_histogram, Unit};

/// etcd API calls by method (`KV.Range`) and gRPC code (`Ok`, `NotFound` …) (counter).
#[cfg(feature = "etcd")]
pub(crate) const ETCD_CALLS: &str = "tenure_etcd_calls_total";
/// How long each etcd API call took, a stream until it was opened (histogram, seconds;
/// label `method`).
#[cfg(feature = "etcd")]
pub(crate) const ETCD_CALL_SECONDS: &str = "tenure_etcd_call_seconds";
/// The etcd revision at the watch hub's latest read (gauge).
#[cfg(feature = "etcd")]
pub(crate) const ETCD_REVISION: &str = "tenure_etcd_revision";
/// The etcd compaction floor at the watch hub's latest read (gauge).
#[cfg(feature = "etcd")]
pub(crate) const ETCD_COMPACT_REVISION: &str = "tenure_etcd_compact_revision";
/// etcd leases alive on the database (gauge).
#[cfg(feature = "etcd")]
pub(crate) const ETCD_LEASES: &str = "tenure_etcd_leases";
/// etcd watchers on this server (gauge).
#[cfg(feature = "etcd")]
pub(crate) const ETCD_WATCHERS: &str = "tenure_etcd_watchers";
/// Reads of the etcd log by single watchers (counter).
#[cfg(feature = "etcd")]
pub(crate) const ETCD_WATCH_LOG_READS: &str = "tenure_etcd_watch_log_reads_total";

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
    #[cfg(feature = "etcd")]
    describe_etcd();
}

#[cfg(feature = "etcd")]
fn describe_etcd() {
    describe_counter!(
        ETCD_CALLS,
        "etcd API calls of this server by method and gRPC code."
    );
    describe_histogram!(
        ETCD_CALL_SECONDS,
        Unit::Seconds,
        "How long each etcd API call took (a stream: until it was open), by method."
    );
    describe_gauge!(
        ETCD_REVISION,
        "The etcd revision at this server's latest read."
    );
    describe_gauge!(
        ETCD_COMPACT_REVISION,
        "The etcd compaction floor at this server's latest read: older revisions are gone."
    );
    describe_gauge!(ETCD_LEASES, "etcd leases alive on the database.");
    describe_gauge!(ETCD_WATCHERS, "etcd watchers on this server.");
    describe_counter!(
        ETCD_WATCH_LOG_READS,
        "Reads of the etcd log by single watchers (a watch from the past, or one that fell behind the watch feed)."
    );
}

/// Records one etcd API call.
#[cfg(feature = "etcd")]
pub(crate) fn etcd_call(method: &'static str, code: tonic::Code, took: std::time::Duration) {
    metrics::counter!(ETCD_CALLS, "method" => method, "code" => format!("{code:?}")).increment(1);
    metrics::histogram!(ETCD_CALL_SECONDS, "method" => method).record(took.as_secs_f64());
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

/// The revision and compaction floor at the watch hub's latest read.
#[cfg(feature = "etcd")]
pub(crate) fn etcd_revisions(revision: i64, floor: i64) {
    #[allow(clippy::cast_precision_loss)]
    {
        metrics::gauge!(ETCD_REVISION).set(revision as f64);
        metrics::gauge!(ETCD_COMPACT_REVISION).set(floor as f64);
    }
}

/// Watchers started (`delta` > 0) or ended on this server.
#[cfg(feature = "etcd")]
pub(crate) fn etcd_watchers(delta: i64) {
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!(ETCD_WATCHERS).increment(delta as f64);
}

/// One read of the log by one watcher.
#[cfg(feature = "etcd")]
pub(crate) fn etcd_watch_log_read() {
    metrics::counter!(ETCD_WATCH_LOG_READS).increment(1);
}

/// The leases alive on the database, as last counted.
#[cfg(feature = "etcd")]
pub(crate) fn etcd_leases(count: usize) {
    #[allow(clippy::cast_precision_loss)]
    metrics::gauge!(ETCD_LEASES).set(count as f64);
}
