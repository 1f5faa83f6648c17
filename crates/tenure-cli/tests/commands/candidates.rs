//! `tenure candidates NAME` and the live counts of `tenure status`: the registry of real
//! electors (two campaigning, one observing), in JSON and as tables.
//!
//! The electors run on a runtime of their own: each `tenure` call blocks this thread while it
//! runs, and an elector paused between `BEGIN IMMEDIATE` and `COMMIT` on a blocked thread would
//! hold SQLite's write lock against the very command the test waits for.

use crate::support::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tenure::{Elector, Timing};

crate::per_backend!(candidates_json_and_table);

fn candidates_json_and_table(kind: BackendKind) {
    let electors = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("a runtime for the electors");
    let Some(db) = electors.block_on(TestDb::new(kind)) else {
        return;
    };
    let store = electors.block_on(db.store());
    let name = unique("cand");

    let out = db.run(&["candidates", &name]);
    out.expect_code(0);
    assert_eq!(out.stdout, format!("{name}: no candidates\n"));

    let timing = Timing::from_ttl(Duration::from_secs(20)).unwrap();
    let elector = |id: &str, priority: i32| {
        Elector::builder(store.clone(), &name)
            .timing(timing)
            .candidate(id)
            .priority(priority)
    };
    let (high, low, observer) = electors.block_on(async {
        (
            elector("high", 7).metadata("10.0.0.7:80").spawn().unwrap(),
            elector("low", -1).spawn().unwrap(),
            elector("watcher", 100).observe().spawn().unwrap(),
        )
    });

    // Bounded wait until all three registered and the best leads.
    let deadline = Instant::now() + Duration::from_secs(30);
    let v: Value = loop {
        let out = db.run(&["candidates", &name, "--json"]);
        out.expect_code(0);
        let v = out.json();
        let three = v["candidates"].as_array().map(Vec::len) == Some(3);
        if three && v["leader"] == "high" {
            break v;
        }
        assert!(Instant::now() < deadline, "never settled: {v}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_keys(&v, &["name", "now", "leader", "candidates"]);
    assert_eq!(v["name"], json!(name));
    rfc3339(&v["now"]);
    let c = &v["candidates"];
    assert_keys(
        &c[0],
        &[
            "candidate",
            "priority",
            "observer",
            "metadata",
            "live",
            "leader",
            "since",
            "last_seen",
            "last_seen_ms_ago",
            "live_until",
            "ttl_ms",
            "expiries",
            "backing_off_until",
        ],
    );
    let summary: Vec<(&str, i64, bool, bool, bool)> = (0..3)
        .map(|i| {
            (
                c[i]["candidate"].as_str().unwrap(),
                c[i]["priority"].as_i64().unwrap(),
                c[i]["observer"].as_bool().unwrap(),
                c[i]["live"].as_bool().unwrap(),
                c[i]["leader"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("high", 7, false, true, true),
            ("low", -1, false, true, false),
            ("watcher", 100, true, true, false),
        ]
    );
    assert_eq!(c[0]["metadata"], "10.0.0.7:80");
    assert_eq!(c[1]["metadata"], Value::Null);
    assert_eq!(c[0]["ttl_ms"], 20_000);
    assert_eq!(
        (&c[0]["expiries"], &c[0]["backing_off_until"]),
        (&json!(0), &Value::Null)
    );
    assert!(rfc3339(&c[0]["live_until"]) > rfc3339(&v["now"]));
    assert!(rfc3339(&c[0]["since"]) <= rfc3339(&c[0]["last_seen"]));

    // The table for people.
    let out = db.run(&["candidates", &name]);
    out.expect_code(0);
    let rows: Vec<Vec<&str>> = out
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        [
            "CANDIDATE",
            "PRIORITY",
            "ROLE",
            "LIVE",
            "LAST",
            "SEEN",
            "METADATA"
        ]
    );
    assert_eq!(rows[1][..4], ["high", "7", "leader", "yes"]);
    assert_eq!(rows[1].last(), Some(&"10.0.0.7:80"));
    assert_eq!(rows[2][..4], ["low", "-1", "candidate", "yes"]);
    assert_eq!(rows[3][..4], ["watcher", "100", "observer", "yes"]);
    assert_eq!(rows.len(), 4, "{out}");

    // `tenure status` counts the live ones.
    let out = db.run(&["status", "--json"]);
    out.expect_code(0);
    let status = out.json();
    let lease = status["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == json!(name))
        .unwrap_or_else(|| panic!("{name} in {status}"));
    assert_eq!(lease["live"], json!({"candidates": 2, "observers": 1}));
    let out = db.run(&["status"]);
    let row = out
        .stdout
        .lines()
        .find(|l| l.starts_with(&name))
        .unwrap_or_else(|| panic!("{name} in {out}"))
        .to_string();
    assert!(row.ends_with("2 (+1 observing)"), "{row}");

    electors.block_on(async {
        for e in [high, low, observer] {
            e.shutdown().await;
        }
    });
    // A clean stop leaves the registry at once.
    let out = db.run(&["candidates", &name]);
    assert_eq!(out.stdout, format!("{name}: no candidates\n"));
    electors.block_on(db.drop_tables());
}
