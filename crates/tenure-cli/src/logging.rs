//! Logs on stderr through tracing: human by default, JSON with `--log-format json`; and, when
//! the standard `OTEL_*` variables ask for it, the same tracing spans exported as OpenTelemetry
//! traces over OTLP/HTTP (protobuf).
//!
//! Traces are off unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or `…_TRACES_ENDPOINT`) is set: then
//! no exporter, no thread and no span is built (the library's spans are at debug level, which
//! the log filter does not enable). When on, spans of the `tenure` crates at debug level and
//! above go to a batch exporter on the SDK's own thread; [`Tracing::shutdown`] flushes it at
//! exit, so that a short command's spans arrive.

use crate::cli::{Global, LogFormat};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::{LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

/// The trace exporter of this process, if the `OTEL_*` variables asked for one.
#[must_use = "shut it down at exit, or the last spans are lost"]
pub(crate) struct Tracing(Option<SdkTracerProvider>);

impl Tracing {
    /// Exports what is still buffered and stops the exporter (bounded by the exporter's
    /// timeout, `OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s by default).
    pub(crate) fn shutdown(self) {
        if let Some(provider) = self.0 {
            if let Err(e) = provider.shutdown() {
                eprintln!("tenure: exporting the last traces failed: {e}");
            }
        }
    }
}

pub(crate) fn init(global: &Global) -> Tracing {
    let level = match (global.verbose, global.quiet) {
        (0, 0) => "info",
        (1, _) => "debug",
        (v, _) if v >= 2 => "trace",
        (_, 1) => "warn",
        _ => "error",
    };
    // The library speaks for itself; sqlx's per-statement logs only at trace.
    let default = format!("tenure={level},tenure_cli={level},sqlx=warn");
    let filter = EnvFilter::try_from_env("TENURE_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let logs = match global.log_format {
        LogFormat::Human => logs.boxed(),
        LogFormat::Json => logs.json().boxed(),
    };
    let (provider, problem) = match exporter() {
        Ok(provider) => (provider, None),
        Err(problem) => (None, Some(problem)),
    };
    let traces = provider.as_ref().map(|provider| {
        let spans = Targets::new()
            .with_target("tenure", LevelFilter::DEBUG)
            .with_target("tenure_cli", LevelFilter::DEBUG);
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("tenure"))
            .with_filter(spans)
    });
    tracing_subscriber::registry()
        .with(logs.with_filter(filter))
        .with(traces)
        .with(crate::stages::layer())
        .init();
    if let Some(problem) = problem {
        tracing::warn!("no traces exported: {problem}");
    }
    Tracing(provider)
}

/// The OTLP exporter the environment asks for: none without an endpoint variable (or with
/// `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none`).
///
/// # Errors
/// A protocol this build does not speak (`grpc`, `http/json`), or an exporter that cannot be
/// built: one line saying so.
fn exporter() -> Result<Option<SdkTracerProvider>, String> {
    let set = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    let endpoint = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").or(set("OTEL_EXPORTER_OTLP_ENDPOINT"));
    let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
        || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.eq_ignore_ascii_case("none"));
    if endpoint.is_none() || disabled {
        return Ok(None);
    }
    let protocol = set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or(set("OTEL_EXPORTER_OTLP_PROTOCOL"));
    match protocol.as_deref() {
        None | Some("http/protobuf") => {}
        Some(other) => {
            return Err(format!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={other} is not supported: tenure exports over \
                 http/protobuf (port 4318 on an OpenTelemetry Collector)"
            ))
        }
    }
    // The endpoint variables themselves are read by the exporter (…_ENDPOINT + "/v1/traces").
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| format!("cannot build the OTLP exporter: {e}"))?;
    let mut resource = Resource::builder();
    if set("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name("tenure");
    }
    Ok(Some(
        SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build(),
    ))
}
