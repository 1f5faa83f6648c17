//! `tenure serve` as a real process on SQLite, PostgreSQL and MariaDB: the sidecar's own
//! campaign and its leader-check, reads, blocking queries, admin calls with the token (and the
//! actor in the history), metrics, bad input, and a clean stop that releases at once.

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::runtime;
use support::serve::*;

per_backend!(
    sidecar_over_http,
    leader_check_moves_with_the_leader,
    an_observer_follows_and_never_leads
);

fn leads(server: &Server, name: &str) -> bool {
    server.get(&format!("/v1/leader-check/{name}")).status == 200
}

/// The value of the sample `line_start` (a metric name with its labels) in Prometheus text.
fn sample(metrics: &str, line_start: &str) -> Option<f64> {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

fn events(server: &Server, name: &str) -> Vec<(String, String)> {
    server.get(&format!("/v1/history/{name}?limit=50")).json()["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().to_string(),
                e["actor"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn sidecar_over_http(kind: BackendKind) {
    let rt = runtime();
    let Some(db) = rt.block_on(Db::new(kind)) else {
        return;
    };
    let mut server = db.serve(&[
        "--campaign",
        "alpha",
        "--candidate",
        "node-1",
        "--metadata",
        "10.0.0.7:8080",
        "--ttl",
        "2s",
        "--poll-interval",
        "100ms",
    ]);

    // Up, and leading its campaign.
    let health = server.get("/health");
    assert_eq!(health.status, 200, "{}", health.text());
    assert_eq!(health.json()["database"], kind.to_string());
    eventually(Duration::from_secs(5), "node-1 leads alpha", || {
        leads(&server, "alpha").then_some(())
    });
    let check = server.get("/v1/leader-check/alpha").json();
    assert_eq!(
        check,
        json!({"name": "alpha", "leader": true, "candidate": "node-1", "term": 1})
    );
    let mine = server.get("/v1/self").json();
    assert_eq!(mine["campaigns"][0]["role"], "leader");
    assert_eq!(mine["campaigns"][0]["candidate"], "node-1");
    let leader = server.get("/v1/leader/alpha").json();
    assert_eq!(leader["leader"]["holder"], "node-1");
    assert_eq!(leader["leader"]["metadata"], "10.0.0.7:8080");
    let status = server.get("/v1/status");
    assert_eq!(status.json()["leases"][0]["holder"], "node-1");
    assert_eq!(
        events(&server, "alpha"),
        [("acquired".into(), "node-1".into())]
    );
    // Not campaigned here: never 200, even though someone leads it.
    rt.block_on(db.campaign("beta", "node-9", 30_000));
    assert_eq!(server.get("/v1/leader-check/beta").status, 503);

    // Metrics of the elector, through the library's facade.
    let metrics = server.get("/metrics");
    assert_eq!(
        metrics.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let text = metrics.text();
    assert_eq!(
        sample(&text, "tenure_is_leader{name=\"alpha\"}"),
        Some(1.0),
        "{text}"
    );
    assert_eq!(sample(&text, "tenure_term{name=\"alpha\"}"), Some(1.0));
    assert_eq!(
        sample(
            &text,
            "tenure_transitions_total{name=\"alpha\",event=\"acquired\"}"
        ),
        Some(1.0)
    );
    assert!(sample(&text, "tenure_campaign_seconds_count{name=\"alpha\"}").unwrap() >= 1.0);
    assert!(
        text.contains("# TYPE tenure_campaign_seconds histogram"),
        "{text}"
    );
    assert!(text.contains("tenure_campaign_seconds_bucket{name=\"alpha\",le=\"0.005\"}"));
    let left = sample(&text, "tenure_lease_remaining_seconds{name=\"alpha\"}").unwrap();
    assert!(left > 0.0 && left <= 2.0, "{left}");
    // What the shared watcher sees of every name (beta as of its next read).
    eventually(Duration::from_secs(3), "the watcher sees beta led", || {
        let text = server.get("/metrics").text();
        (sample(&text, "tenure_observed_leader{name=\"beta\"}") == Some(1.0)).then_some(())
    });

    // A blocking query waits for the pause below.
    let index = server.get("/v1/status").index();
    let addr = server.addr;
    let blocked = std::thread::spawn(move || {
        let started = Instant::now();
        let reply = http(
            addr,
            "GET",
            &format!("/v1/status?index={index}&wait=20s"),
            &[],
            b"",
        );
        (reply, started.elapsed())
    });
    eventually(Duration::from_secs(5), "the query waits", || {
        (server.get("/health").json()["waiting"] == 1).then_some(())
    });

    // Admin calls: refused without the token, recorded with the peer's address with it.
    server.get("/v1/leader/alpha");
    let refused = http(server.addr, "POST", "/v1/pause/alpha", &[], b"");
    refused.assert_error(401, "Bearer");
    assert_eq!(
        refused.header("www-authenticate"),
        Some("Bearer realm=\"tenure\"")
    );
    let paused = server.admin("/v1/pause/alpha", "");
    assert_eq!(paused.status, 200, "{}", paused.text());
    assert_eq!(paused.json()["effect"], "paused");
    let (reply, took) = blocked.join().expect("blocked query");
    assert_eq!(reply.status, 200);
    assert!(reply.index() > index);
    assert!(took < Duration::from_secs(5), "answered after {took:?}");
    let alpha = reply.json()["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "alpha")
        .cloned()
        .unwrap();
    assert_eq!(alpha["paused"], true);
    eventually(Duration::from_secs(3), "node-1 steps down on pause", || {
        (!leads(&server, "alpha")).then_some(())
    });
    let history = events(&server, "alpha");
    let (_, actor) = history
        .iter()
        .find(|(event, _)| event == "paused")
        .unwrap_or_else(|| panic!("no pause in {history:?}"));
    assert!(actor.starts_with("http:127.0.0.1:"), "{actor}");
    let text = server.get("/metrics").text();
    assert_eq!(sample(&text, "tenure_is_leader{name=\"alpha\"}"), Some(0.0));

    assert_eq!(
        server.admin("/v1/resume/alpha", "{}").json()["effect"],
        "resumed"
    );
    eventually(
        Duration::from_secs(3),
        "node-1 leads again after resume",
        || leads(&server, "alpha").then_some(()),
    );
    assert_eq!(server.get("/v1/leader-check/alpha").json()["term"], 2);

    // Hand over to a node outside the server, which campaigns without registering: refused
    // as no live candidate (nothing changes), accepted as a process not yet started; node-1
    // steps down, node-2 takes over.
    server
        .admin("/v1/handover/alpha", r#"{"to":"node-2"}"#)
        .assert_error(400, "live candidate");
    assert!(leads(&server, "alpha"));
    let handover = server.admin(
        "/v1/handover/alpha",
        r#"{"to":"node-2","unregistered":true}"#,
    );
    assert_eq!(
        handover.json()["effect"],
        "handover_requested",
        "{}",
        handover.text()
    );
    eventually(
        Duration::from_secs(3),
        "node-1 steps down for node-2",
        || (!leads(&server, "alpha")).then_some(()),
    );
    let taken = eventually(Duration::from_secs(3), "node-2 acquires", || {
        let applied = rt.block_on(db.campaign("alpha", "node-2", 30_000));
        matches!(applied.effect, tenure::Effect::Acquired { .. }).then_some(applied)
    });
    assert_eq!(taken.lease.unwrap().term, 3);
    let follower = eventually(Duration::from_secs(3), "node-1 sees node-2", || {
        let me = server.get("/v1/self/alpha").json();
        (me["leader"]["holder"] == "node-2").then_some(me)
    });
    assert_eq!(follower["role"], "follower");
    assert_eq!(server.get("/v1/leader-check/alpha").status, 503);

    // Demote node-2 at once: node-1 takes over again.
    let demoted = server.admin("/v1/demote/alpha", r#"{"immediate": true}"#);
    assert_eq!(demoted.json()["effect"], "demoted");
    eventually(
        Duration::from_secs(3),
        "node-1 leads after the demote",
        || leads(&server, "alpha").then_some(()),
    );

    // Bad input: answered with a JSON error, nothing changes, the server keeps serving.
    server
        .get("/v1/status/ghost")
        .assert_error(404, "\"ghost\"");
    server
        .get("/v1/leader/ghost")
        .assert_error(404, "\"ghost\"");
    server
        .admin("/v1/demote/ghost", "")
        .assert_error(404, "\"ghost\"");
    server
        .get("/v1/status?index=1&wait=1h")
        .assert_error(400, "\"1h\"");
    server
        .get("/v1/status?index=abc")
        .assert_error(400, "\"abc\"");
    server
        .get("/v1/history/alpha?limit=x")
        .assert_error(400, "\"x\"");
    server
        .get("/v1/status/bad%00name")
        .assert_error(400, "control");
    server
        .admin("/v1/handover/alpha", r#"{"to": 5}"#)
        .assert_error(400, "JSON");
    server
        .admin("/v1/pause/alpha", "not json")
        .assert_error(400, "JSON");
    let big = vec![b'x'; 64 * 1024];
    server
        .admin("/v1/pause/alpha", std::str::from_utf8(&big).unwrap())
        .assert_error(413, "too large");
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    let mut chunked = format!(
        "POST /v1/pause/alpha HTTP/1.1\r\nHost: x\r\n{auth}Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    .into_bytes();
    for _ in 0..32 {
        chunked.extend_from_slice(b"400\r\n");
        chunked.extend_from_slice(&[b' '; 1024]);
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    raw(server.addr, &chunked).assert_error(413, "too large");
    let garbage = raw(server.addr, b"NOT HTTP AT ALL\r\n\r\n");
    assert_eq!(garbage.status, 400);
    assert_eq!(server.get("/health").status, 200, "still serving");
    assert!(leads(&server, "alpha"), "bad input changed nothing");
    assert_eq!(rt.block_on(db.holder("alpha")).as_deref(), Some("node-1"));

    // SIGTERM: exit 0 soon, and the lease is released at once (no wait for the ttl).
    let term = server.get("/v1/leader-check/alpha").json()["term"].clone();
    let started = Instant::now();
    let status = server.terminate(Duration::from_secs(10)).expect("stops");
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        rt.block_on(db.holder("alpha")),
        None,
        "released on shutdown"
    );
    let history = rt.block_on(db.store.history("alpha", 1)).unwrap();
    assert_eq!(
        (
            history[0].event.as_str(),
            history[0].actor.as_str(),
            Value::from(history[0].term)
        ),
        ("released", "node-1", term)
    );
    rt.block_on(db.drop_tables());
}

/// Two servers campaign for one name: exactly one answers 200; when it stops, the other does.
fn leader_check_moves_with_the_leader(kind: BackendKind) {
    let rt = runtime();
    let Some(db) = rt.block_on(Db::new(kind)) else {
        return;
    };
    let args = |id: &'static str| {
        [
            "--campaign",
            "alpha",
            "--candidate",
            id,
            "--ttl",
            "2s",
            "--poll-interval",
            "100ms",
        ]
    };
    let a = db.serve(&args("node-a"));
    let b = db.serve(&args("node-b"));
    let a_leads = eventually(Duration::from_secs(5), "one of them leads", || {
        match (leads(&a, "alpha"), leads(&b, "alpha")) {
            (true, false) => Some(true),
            (false, true) => Some(false),
            (true, true) => panic!("both servers answer 200"),
            (false, false) => None,
        }
    });
    let (mut first, second) = if a_leads { (a, b) } else { (b, a) };
    for _ in 0..10 {
        assert!(leads(&first, "alpha") && !leads(&second, "alpha"));
        std::thread::sleep(Duration::from_millis(50));
    }
    let term = first.get("/v1/leader-check/alpha").json()["term"]
        .as_u64()
        .unwrap();

    let stopped = Instant::now();
    assert_eq!(
        first
            .terminate(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0)
    );
    let took = eventually(Duration::from_secs(4), "the other server leads", || {
        leads(&second, "alpha").then(|| stopped.elapsed())
    });
    let check = second.get("/v1/leader-check/alpha").json();
    assert_eq!(check["term"].as_u64().unwrap(), term + 1);
    eprintln!("{kind}: leader-check moved {took:?} after SIGTERM to the leader's server");
    drop(second);
    rt.block_on(db.drop_tables());
}

/// `--observe`: the observer registers (with its priority, marked an observer), follows the
/// leader, answers 503 at its leader-check, and never takes the lease, not even when it is
/// free for two ttls.
fn an_observer_follows_and_never_leads(kind: BackendKind) {
    let rt = runtime();
    let Some(db) = rt.block_on(Db::new(kind)) else {
        return;
    };
    let common = [
        "--campaign",
        "alpha",
        "--ttl",
        "2s",
        "--poll-interval",
        "100ms",
    ];
    let mut leader =
        db.serve(&[&common[..], &["--candidate", "node-a", "--priority", "1"]].concat());
    let observer = db.serve(
        &[
            &common[..],
            &["--candidate", "watcher", "--priority", "100", "--observe"],
        ]
        .concat(),
    );
    eventually(Duration::from_secs(10), "node-a leads", || {
        leads(&leader, "alpha").then_some(())
    });
    let listed = eventually(Duration::from_secs(10), "both are registered", || {
        let roster = observer.get("/v1/candidates/alpha").json();
        (roster["candidates"].as_array()?.len() == 2).then_some(roster)
    });
    assert_eq!(listed["leader"], "node-a", "{listed}");
    let watcher = &listed["candidates"][1];
    assert_eq!(
        (
            &watcher["candidate"],
            &watcher["observer"],
            &watcher["priority"]
        ),
        (&json!("watcher"), &json!(true), &json!(100)),
        "{listed}"
    );
    assert!(!leads(&observer, "alpha"));
    eventually(
        Duration::from_secs(10),
        "the observer sees node-a lead",
        || {
            let mine = observer.get("/v1/self/alpha").json();
            (mine["role"] == "follower" && mine["leader"]["holder"] == "node-a").then_some(())
        },
    );

    // The leader stops: the lease is free, and stays free — the observer never campaigns.
    assert_eq!(
        leader
            .terminate(Duration::from_secs(10))
            .and_then(|s| s.code()),
        Some(0)
    );
    let until = Instant::now() + Duration::from_secs(4);
    while Instant::now() < until {
        let lease = observer.get("/v1/status/alpha").json();
        assert_eq!(lease["lease"]["holder"], Value::Null, "{lease}");
        assert!(!leads(&observer, "alpha"));
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(observer);
    rt.block_on(db.drop_tables());
}

/// Bad configuration: a one-line error naming the value, exit 64, no server.
#[test]
fn bad_configuration_is_refused() {
    let rt = runtime();
    let db = rt.block_on(Db::new(BackendKind::Sqlite)).expect("sqlite");
    let empty = db.dir().join("empty-token");
    std::fs::write(&empty, "\n").unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let missing = db.dir().join("no-such-file");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["--token-file".into(), missing.display().to_string()],
            "no-such-file",
        ),
        (
            vec!["--token-file".into(), empty.display().to_string()],
            "empty",
        ),
        (vec!["--campaign".into(), "".into()], "invalid name"),
        (
            vec![
                "--campaign".into(),
                "a".into(),
                "--campaign".into(),
                "a".into(),
            ],
            "more than once",
        ),
        (
            vec!["--candidate".into(), "x".repeat(192)],
            "invalid candidate id",
        ),
        (vec!["--listen".into(), taken.clone()], &taken),
        (vec!["--listen".into(), "localhost".into()], "localhost"),
        (vec!["--ttl".into(), "10ms".into()], "unsafe timing"),
        (
            vec!["--poll-interval".into(), "1ms".into()],
            "--poll-interval",
        ),
    ];
    for (args, needle) in cases {
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
            .env("TENURE_DATABASE_URL", &db.url)
            .env("TENURE_TABLE_PREFIX", &db.prefix)
            .env("XDG_STATE_HOME", db.dir().join("state"))
            .arg("serve")
            .args(&args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run tenure serve");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(64), "{args:?}: {stderr}");
        let message: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("tenure: database ") && !l.trim().is_empty())
            .filter(|l| !l.starts_with("For more information"))
            .collect();
        assert_eq!(message.len(), 1, "{args:?}: one line expected: {stderr}");
        assert!(
            message[0].contains(needle),
            "{args:?}: {:?} lacks {needle:?}",
            message[0]
        );
        assert!(!stderr.contains("listening on"), "{args:?}: {stderr}");
    }
}
