//! Watching a tenure process from the outside: `--metrics-listen ADDR` on every long-running
//! command (`run`, `lock`, `every`, `serve`) and the one Prometheus recorder behind it and
//! behind `tenure serve`'s own `/metrics`.
//!
//! The series themselves are the library's (`tenure::telemetry`, where every name, label and
//! help text is declared) plus those `tenure serve` adds (`serve/metrics.rs`).
//!
//! The spans the command adds to the library's (exported as OpenTelemetry traces by
//! `logging.rs` when `OTEL_*` is set) are declared here too: one per supervised command's
//! lifetime ([`command_span`]) and one per Consul API request ([`consul_request`]).

use crate::exit::{Failure, INTERNAL};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use clap::Args;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;
use tokio::net::TcpListener;
use tracing::field::Empty;

/// The flag every long-running command flattens in.
#[derive(Debug, Args)]
#[command(next_help_heading = "Metrics")]
pub(crate) struct WatchingArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics while this command runs (port 0: a
    /// free port, logged at start). Bind beyond loopback only on purpose: it needs no token.
    #[arg(long, env = "TENURE_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
}

/// Installs the process-wide recorder once and returns its handle (the same handle on later
/// calls), with its upkeep (draining the histograms) running on the current runtime.
///
/// # Errors
/// Another recorder is already installed.
pub(crate) fn install() -> Result<PrometheusHandle, Failure> {
    static HANDLE: OnceLock<Result<PrometheusHandle, String>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(
                    Matcher::Suffix("_seconds".into()),
                    tenure::telemetry::SECONDS_BUCKETS,
                )
                .and_then(PrometheusBuilder::install_recorder)
                .map_err(|e| format!("cannot install the Prometheus recorder: {e}"))?;
            tenure::telemetry::describe();
            tokio::spawn(upkeep(handle.clone()));
            Ok(handle)
        })
        .clone()
        .map_err(|e| Failure::new(INTERNAL, e))
}

/// Runs the recorder's upkeep every few seconds, forever.
async fn upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

/// With `--metrics-listen`, installs the recorder and serves `/metrics` on that address for
/// as long as the runtime lives.
///
/// # Errors
/// The address cannot be bound (a usage error naming it), or the recorder cannot be installed.
pub(crate) async fn listen(args: &WatchingArgs) -> Result<(), Failure> {
    let Some(address) = args.metrics_listen else {
        return Ok(());
    };
    let handle = install()?;
    let listener = TcpListener::bind(address).await.map_err(|e| {
        Failure::usage(format!(
            "cannot listen on {address} (--metrics-listen): {e}"
        ))
    })?;
    let address = listener.local_addr()?;
    if !address.ip().is_loopback() {
        tracing::warn!(%address, "metrics listening beyond loopback: they need no token");
    }
    tracing::info!("metrics at http://{address}/metrics");
    let app = Router::new().route("/metrics", get(move || async move { render(&handle) }));
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the metrics listener stopped");
        }
    });
    Ok(())
}

/// The Prometheus text format of everything recorded so far.
pub(crate) fn render(handle: &PrometheusHandle) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle.render(),
    )
        .into_response()
}

/// The span of one supervised command's lifetime (`tenure.command`: `tenure run`, `lock`,
/// `every`), from its start to its end, with the `name`, the `lease` held (a semaphore's
/// permit `NAME#i`), the `term`, the program and, at the end, how it ended (`outcome`).
pub(crate) fn command_span(name: &str, lease: &str, term: u64, program: &str) -> tracing::Span {
    tracing::debug_span!(
        "tenure.command",
        otel.kind = "internal",
        name,
        lease,
        term,
        command = program,
        outcome = Empty,
    )
}

/// Middleware of `tenure serve`'s Consul API: one span per request
/// (`tenure.consul_request`) with its method, path and status, and one count
/// (`tenure_consul_requests_total`) by method, route (the route's pattern, not the key: the
/// labels stay few) and status — what a Consul client's loop costs the server.
#[cfg(feature = "consul")]
pub(crate) async fn consul_request(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    use tracing::Instrument;
    let method = request.method().to_string();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unknown", |p| p.as_str())
        .to_string();
    let span = tracing::debug_span!(
        "tenure.consul_request",
        otel.kind = "server",
        http.request.method = %method,
        url.path = request.uri().path(),
        http.response.status_code = Empty,
    );
    let response = next.run(request).instrument(span.clone()).await;
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    metrics::counter!(
        "tenure_consul_requests_total",
        "method" => method,
        "route" => route,
        "status" => status.to_string()
    )
    .increment(1);
    response
}
