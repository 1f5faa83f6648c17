//! `--metrics-listen` on the long-running commands, as real processes: `tenure run` serves its
//! leader gauge, term and histograms while it leads; `tenure lock` (the address from
//! `TENURE_METRICS_LISTEN`) serves its held lock. Port 0 everywhere: the command logs the
//! address it bound.

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
