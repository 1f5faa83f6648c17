//! OpenTelemetry traces from real processes: with `OTEL_EXPORTER_OTLP_ENDPOINT` pointing at a
//! tiny OTLP/HTTP collector of the test (an axum route `POST /v1/traces` decoding the
//! protobuf), `tenure run` and `tenure lock` export their spans — campaign, release, the
//! command's lifetime with its name and term — before they exit; without the variable no
//! exporter is started.

mod support;

use axum::body::Bytes;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::leaders::backend;
use support::{BackendKind, Background};

/// One span as it arrived: its service, name and attributes (as text).
#[derive(Clone, Debug)]
struct Arrived {
    service: String,
    name: String,
    attributes: BTreeMap<String, String>,
}

/// A collector on 127.0.0.1 (port chosen by the OS), on its own runtime thread.
struct Collector {
    address: SocketAddr,
    spans: Arc<Mutex<Vec<Arrived>>>,
}

impl Collector {
    fn start() -> Collector {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&spans);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            support::runtime().block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind");
                tx.send(listener.local_addr().expect("address"))
                    .expect("send");
                let app = Router::new().route(
                    "/v1/traces",
                    post(move |body: Bytes| async move {
                        let request = ExportTraceServiceRequest::decode(body).expect("OTLP");
                        sink.lock().expect("spans").extend(arrived(request));
                        // An empty ExportTraceServiceResponse.
                        Vec::<u8>::new()
                    }),
                );
                axum::serve(listener, app).await.expect("serve");
            });
        });
        let address = rx.recv_timeout(Duration::from_secs(20)).expect("bound");
        Collector { address, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    fn spans(&self) -> Vec<Arrived> {
        self.spans.lock().expect("spans").clone()
    }
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(i)) => i.to_string(),
        Some(Value::BoolValue(b)) => b.to_string(),
        Some(Value::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn attributes(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .map(|kv| {
            let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
            (kv.key.clone(), text(value))
        })
        .collect()
}

fn arrived(request: ExportTraceServiceRequest) -> Vec<Arrived> {
    let mut out = Vec::new();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .and_then(|a| a.get("service.name").cloned())
            .unwrap_or_default();
        for scope in resource.scope_spans {
            for span in scope.spans {
                out.push(Arrived {
                    service: service.clone(),
                    name: span.name.clone(),
                    attributes: attributes(&span.attributes),
                });
            }
        }
    }
    out
}

/// The spans of `service` named `name`.
fn named<'a>(spans: &'a [Arrived], service: &str, name: &str) -> Vec<&'a Arrived> {
    spans
        .iter()
        .filter(|s| s.service == service && s.name == name)
        .collect()
}

#[test]
fn run_and_lock_export_their_spans_before_they_exit() {
    let collector = Collector::start();
    let b = backend(BackendKind::Sqlite).expect("SQLite always runs");
    let mut run = b.tenure(&["run", "traced", "--", "sh", "-c", "echo $TENURE_TERM"]);
    run.env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
        .env("OTEL_SERVICE_NAME", "traced-run");
    let out = run.output().expect("tenure run");
    assert!(out.status.success(), "{out:?}");
    let term = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(term.parse::<u64>().is_ok(), "{out:?}");

    // The exporter was flushed at exit: everything is there when the process is gone.
    let spans = collector.spans();
    let command = named(&spans, "traced-run", "tenure.command");
    assert_eq!(command.len(), 1, "{spans:#?}");
    let attributes = &command[0].attributes;
    assert_eq!(attributes.get("name"), Some(&"traced".to_string()));
    assert_eq!(attributes.get("term"), Some(&term));
    assert_eq!(attributes.get("command"), Some(&"sh".to_string()));
    assert_eq!(attributes.get("outcome"), Some(&"exited".to_string()));
    let campaigns = named(&spans, "traced-run", "tenure.campaign");
    assert!(
        campaigns
            .iter()
            .any(|s| s.attributes.get("name") == Some(&"traced".into())
                && s.attributes.get("term") == Some(&term)
                && s.attributes.get("outcome") == Some(&"ok".into())),
        "{spans:#?}"
    );
    let releases = named(&spans, "traced-run", "tenure.release");
    assert!(
        releases
            .iter()
            .any(|s| s.attributes.get("term") == Some(&term)),
        "{spans:#?}"
    );

    let mut lock = b.tenure(&["lock", "traced-lock", "--", "true"]);
    lock.env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env("OTEL_SERVICE_NAME", "traced-lock");
    let out = lock.output().expect("tenure lock");
    assert!(out.status.success(), "{out:?}");
    let spans = collector.spans();
    let command = named(&spans, "traced-lock", "tenure.command");
    assert_eq!(command.len(), 1, "{spans:#?}");
    assert_eq!(
        command[0].attributes.get("name"),
        Some(&"traced-lock".to_string())
    );
    let term = command[0].attributes.get("term").expect("a term");
    assert!(
        named(&spans, "traced-lock", "tenure.release")
            .iter()
            .any(|s| s.attributes.get("term") == Some(term)),
        "{spans:#?}"
    );
}

/// The threads of process `pid` by name.
fn threads(pid: i32) -> Vec<String> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    tasks
        .filter_map(Result::ok)
        .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

/// A held lock's `tenure` process, started with `env` added: its thread names once it holds.
fn threads_of_a_holder(env: &[(&str, String)]) -> Vec<String> {
    let b = backend(BackendKind::Sqlite).expect("SQLite always runs");
    let mut lock = b.tenure(&[
        "lock",
        "quiet",
        "--",
        "sh",
        "-c",
        "echo held; exec sleep 60",
    ]);
    for (k, v) in env {
        lock.env(k, v);
    }
    let process = Background::spawn(&mut lock);
    let line = process.next_line(Duration::from_secs(20));
    assert_eq!(line.as_deref(), Some("held"), "{}", process.stderr());
    threads(process.pid())
}

#[test]
fn without_the_endpoint_nothing_is_exported() {
    let collector = Collector::start();
    // The service name and protocol alone start nothing.
    let unset = [
        ("OTEL_SERVICE_NAME", "quiet".to_string()),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf".to_string()),
    ];
    let names = threads_of_a_holder(&unset);
    assert!(!names.is_empty());
    assert!(
        !names.iter().any(|n| n.starts_with("OpenTelemetry")),
        "{names:?}"
    );
    // The same with the endpoint: the SDK's exporter thread is there (its name, cut to the
    // 15 bytes Linux keeps, starts with "OpenTelemetry").
    let mut set = unset.to_vec();
    set.push(("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint()));
    let names = threads_of_a_holder(&set);
    assert!(
        names.iter().any(|n| n.starts_with("OpenTelemetry")),
        "{names:?}"
    );

    // A run to its end without the endpoint: nothing reached the collector.
    let b = backend(BackendKind::Sqlite).expect("SQLite always runs");
    let mut run = b.tenure(&["run", "quiet-run", "--", "true"]);
    run.env("OTEL_SERVICE_NAME", "quiet");
    let started = Instant::now();
    let out = run.output().expect("tenure run");
    assert!(out.status.success(), "{out:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    let spans = collector.spans();
    assert!(
        !spans
            .iter()
            .any(|s| s.service == "quiet" && s.name == "tenure.command"),
        "{spans:#?}"
    );
}

#[test]
fn an_unsupported_protocol_is_said_and_exports_nothing() {
    let b = backend(BackendKind::Sqlite).expect("SQLite always runs");
    let collector = Collector::start();
    let mut run = b.tenure(&["run", "grpc-run", "--", "true"]);
    run.env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .env("OTEL_SERVICE_NAME", "grpc");
    let out = run.output().expect("tenure run");
    assert!(out.status.success(), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL=grpc is not supported"),
        "{stderr}"
    );
    assert!(collector.spans().is_empty());
}
