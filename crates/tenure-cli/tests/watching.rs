//! `--metrics-listen` on the long-running commands, as real processes: `tenure run` serves its
//! leader gauge, term and histograms while it leads; `tenure lock` (the address from
//! `TENURE_METRICS_LISTEN`) serves its held lock. Port 0 everywhere: the command logs the
//! address it bound. And the Grafana dashboard (`deploy/grafana`) reads only series they serve.

mod support;

use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};
use support::leaders::backend;
use support::serve::http;
use support::{BackendKind, Background};

per_backend!(run_serves_its_tenure, lock_serves_its_lock);

/// The value of the sample `line_start` (a metric name with its labels) in Prometheus text.
fn sample(metrics: &str, line_start: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

/// The address the command logged ("metrics at http://ADDR/metrics"), waiting for it.
fn metrics_address(process: &Background) -> SocketAddr {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stderr = process.stderr();
        let found = stderr.lines().find_map(|l| {
            let rest = l.split_once("metrics at http://")?.1;
            rest.split_once("/metrics")?.0.parse().ok()
        });
        if let Some(address) = found {
            return address;
        }
        assert!(Instant::now() < deadline, "no metrics address: {stderr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `/metrics` at `address`, once `ready` holds of it (at most 20 s).
fn metrics_when(address: SocketAddr, what: &str, ready: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = http(address, "GET", "/metrics", &[], b"");
        assert_eq!(reply.status, 200);
        let text = reply.text();
        if ready(&text) {
            return text;
        }
        assert!(Instant::now() < deadline, "never {what}:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn run_serves_its_tenure(kind: BackendKind) {
    let Some(b) = backend(kind) else {
        return;
    };
    let script = "echo term=$TENURE_TERM; exec sleep 60";
    let mut args = vec!["run", "watched", "--ttl", "2s", "--metrics-listen"];
    args.extend(["127.0.0.1:0", "--", "sh", "-c", script]);
    let mut command: Command = b.tenure(&args);
    let process = Background::spawn(&mut command);
    let line = process
        .next_line(Duration::from_secs(20))
        .unwrap_or_else(|| panic!("the command never started: {}", process.stderr()));
    let term: f64 = line
        .strip_prefix("term=")
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("not a term: {line:?}"));
    let address = metrics_address(&process);
    assert!(address.ip().is_loopback());

    // A renewal after the grant (every 500 ms) brings the renewal histograms.
    let text = metrics_when(address, "renewed", |t| {
        sample(
            t,
            "tenure_renew_lag_seconds_count{name=\"watched\",role=\"leader\"}",
        )
        .is_some_and(|n| n >= 1.0)
    });
    assert_eq!(
        sample(&text, "tenure_is_leader{name=\"watched\"}"),
        Some(1.0)
    );
    assert_eq!(sample(&text, "tenure_term{name=\"watched\"}"), Some(term));
    let margin = "tenure_belief_margin_seconds_count{name=\"watched\",role=\"leader\"}";
    assert!(sample(&text, margin).is_some_and(|n| n >= 1.0), "{text}");
    assert!(
        sample(&text, "tenure_campaign_seconds_count{name=\"watched\"}").is_some_and(|n| n >= 2.0),
        "{text}"
    );
    let db_ok = "tenure_database_seconds_count{op=\"campaign\",outcome=\"ok\"}";
    assert!(sample(&text, db_ok).is_some_and(|n| n >= 2.0), "{text}");
    assert!(
        text.contains("# TYPE tenure_renew_lag_seconds histogram"),
        "histograms, not summaries: {text}"
    );
    let offset = sample(&text, "tenure_database_clock_offset_seconds")
        .unwrap_or_else(|| panic!("no clock offset: {text}"));
    assert!(
        offset.abs() < 5.0,
        "a local database's clock is near ours: {offset}"
    );
    drop(process);
}

fn lock_serves_its_lock(kind: BackendKind) {
    let Some(b) = backend(kind) else {
        return;
    };
    let args = [
        "lock",
        "watched-lock",
        "--",
        "sh",
        "-c",
        "echo held; exec sleep 60",
    ];
    let mut command = b.tenure(&args);
    command.env("TENURE_METRICS_LISTEN", "127.0.0.1:0");
    let process = Background::spawn(&mut command);
    let line = process.next_line(Duration::from_secs(20));
    assert_eq!(line.as_deref(), Some("held"), "{}", process.stderr());
    let address = metrics_address(&process);
    let text = metrics_when(address, "held", |t| {
        sample(t, "tenure_lock_held{name=\"watched-lock\"}") == Some(1.0)
    });
    let wait = "tenure_lock_wait_seconds_count{name=\"watched-lock\",outcome=\"acquired\"}";
    assert_eq!(sample(&text, wait), Some(1.0), "{text}");
    assert!(
        !text.contains("tenure_is_leader"),
        "a lock is no election: {text}"
    );
}

/// Every metric name in the expressions of `deploy/grafana/tenure-dashboard.json` is a series
/// a live tenure serves. Three processes on one SQLite file make every series appear:
/// `tenure serve --campaign` (elector, watcher, a blocking query), `tenure lock`, and a
/// database locked by the test for a while (errors, a loss by deadline, hold time, and the
/// vacancy before the next tenure).
#[test]
fn the_dashboard_uses_only_exported_series() {
    let dashboard = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/grafana/tenure-dashboard.json"
    );
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dashboard).expect("dashboard"))
            .expect("JSON");
    let mut expressions = Vec::new();
    collect_queries(&dashboard, &mut expressions);
    assert!(expressions.len() >= 20, "{expressions:?}");
    let names: std::collections::BTreeSet<String> =
        expressions.iter().flat_map(|e| metric_names(e)).collect();

    let b = backend(BackendKind::Sqlite).expect("SQLite always runs");
    let lock_args = [
        "lock",
        "dash-lock",
        "--ttl",
        "2s",
        "--metrics-listen",
        "127.0.0.1:0",
    ];
    let mut lock = b.tenure(&lock_args);
    lock.args(["--", "sh", "-c", "echo held; exec sleep 60"]);
    let lock = Background::spawn(&mut lock);
    assert_eq!(
        lock.next_line(Duration::from_secs(20)).as_deref(),
        Some("held")
    );
    let lock_text = metrics_when(metrics_address(&lock), "renewed", |t| {
        t.contains("tenure_renew_lag_seconds_count{name=\"dash-lock\",role=\"lock\"}")
    });
    drop(lock);

    let serve_args = [
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--campaign",
        "dash",
        "--ttl",
        "2s",
    ];
    let mut serve = b.tenure(&serve_args);
    serve.args(["--metrics-listen", "127.0.0.1:0"]);
    let serve = Background::spawn(&mut serve);
    let address = metrics_address(&serve);
    metrics_when(address, "leading and renewed", |t| {
        sample(t, "tenure_is_leader{name=\"dash\"}") == Some(1.0)
            && t.contains("tenure_renew_lag_seconds_count{name=\"dash\",role=\"leader\"}")
    });
    let api = api_address(&serve);
    let index = http(api, "GET", "/v1/status", &[], b"")
        .header("x-tenure-index")
        .map(str::to_string);
    let index = index.expect("an index");
    let blocking = format!("/v1/status?index={index}&wait=100ms");
    assert_eq!(http(api, "GET", &blocking, &[], b"").status, 200);

    // The database locked: campaigns and reads fail until the belief ends at its deadline.
    let runtime = support::runtime();
    let mut conn = runtime.block_on(async {
        use sqlx::Connection;
        let mut conn = sqlx::SqliteConnection::connect(&b.url)
            .await
            .expect("connect");
        sqlx::query("BEGIN EXCLUSIVE")
            .execute(&mut conn)
            .await
            .expect("lock");
        conn
    });
    let serve_text = metrics_when(address, "failed and lost", |t| {
        t.contains("tenure_database_errors_total{")
            && t.contains("tenure_losses_total{name=\"dash\",role=\"leader\",reason=\"deadline\"}")
            && t.contains("tenure_serve_poll_errors_total")
    });
    runtime.block_on(async {
        sqlx::query("ROLLBACK")
            .execute(&mut conn)
            .await
            .expect("unlock");
    });
    // The database back, the elector takes the name again in a new term; the watcher, which
    // read the old tenure, records how long the name stood vacant.
    let vacancy_text = metrics_when(address, "a vacancy", |t| {
        sample(t, "tenure_vacancy_seconds_count{name=\"dash\"}").is_some_and(|n| n >= 1.0)
    });
    let vacant = sample(&vacancy_text, "tenure_vacancy_seconds_sum{name=\"dash\"}");
    assert!(
        vacant.is_some_and(|s| (0.0..60.0).contains(&s)),
        "{vacancy_text}"
    );

    let exported: std::collections::BTreeSet<&str> = lock_text
        .lines()
        .chain(serve_text.lines())
        .chain(vacancy_text.lines())
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let missing: Vec<_> = names
        .iter()
        .filter(|n| !exported.contains(n.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries series nobody exports: {missing:?}\nexported: {exported:?}"
    );
}

/// Every PromQL string of a Grafana dashboard: the panels' `expr` and the variables' queries.
fn collect_queries(value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => collect_queries(v, out),
                }
            }
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| collect_queries(v, out)),
        _ => {}
    }
}

/// The metric names an expression reads: every `tenure_…` identifier. An identifier right
/// before a selector's `{` that is not tenure's is a series tenure does not export.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphabetic() || c == '_') {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .unwrap_or(tail.len());
        let word = &tail[..end];
        let quoted = rest[..start].ends_with('"') || rest[..start].ends_with('|');
        if word.starts_with("tenure_") {
            names.push(word.to_string());
        } else {
            assert!(
                quoted || !tail[end..].starts_with('{'),
                "{word} in {expr:?} is not a tenure series"
            );
        }
        rest = &tail[end..];
    }
    names
}

/// The API address `tenure serve` printed ("tenure: listening on http://ADDR").
fn api_address(process: &Background) -> SocketAddr {
    let stderr = process.stderr();
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("tenure: listening on http://")?.parse().ok())
        .unwrap_or_else(|| panic!("no API address: {stderr}"))
}
