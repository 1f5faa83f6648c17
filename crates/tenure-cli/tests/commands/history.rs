//! `tenure history`: the transitions of a name, newest first, with the actor of each.

use crate::support::*;
use crate::{acquired, campaign, TTL_MS};
use serde_json::json;

crate::per_backend!(
    async history_newest_first_with_admin_actor,
);

async fn history_newest_first_with_admin_actor(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let store = db.store().await;
    let name = unique("hist");
    let a = unique("cand-a");
    let b = unique("cand-b");

    // Never used: no events.
    let out = db.run(&["history", &name, "--json"]);
    out.expect_code(0);
    assert_eq!(out.json(), json!({ "name": name, "events": [] }));
    let out = db.run(&["history", &name]);
    out.expect_code(0);
    assert_eq!(out.stdout, format!("{name}: no history\n"));

    assert!(acquired(&campaign(&store, &name, &a, TTL_MS, None).await));
    let admin = |args: &[&str]| {
        let out = run(db.tenure().env("USER", "tester").args(args));
        out.expect_code(0);
    };
    admin(&["pause", &name]);
    admin(&["resume", &name]);
    admin(&["handover", &name, &b, "--unregistered"]);
    admin(&["demote", &name]);

    let out = db.run(&["history", &name, "--limit", "3", "--json"]);
    out.expect_code(0);
    let v = out.json();
    assert_keys(&v, &["name", "events"]);
    assert_eq!(v["name"], json!(name));
    let events = v["events"].as_array().expect("events");
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["demoted", "handed_over", "resumed"]);

    let out = db.run(&["history", &name, "--limit", "10", "--json"]);
    out.expect_code(0);
    let v = out.json();
    let events = v["events"].as_array().expect("events");
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["demoted", "handed_over", "resumed", "paused", "acquired"]
    );
    for (i, e) in events.iter().enumerate() {
        assert_keys(
            e,
            &["id", "term", "event", "holder", "at", "actor", "detail"],
        );
        assert_eq!(e["term"], json!(1), "{e}");
        assert_eq!(e["holder"], json!(a), "{e}");
        rfc3339(&e["at"]);
        if let Some(older) = events.get(i + 1) {
            assert!(e["id"].as_i64() > older["id"].as_i64(), "newest first");
            assert!(rfc3339(&e["at"]) >= rfc3339(&older["at"]), "newest first");
        }
        let actor = e["actor"].as_str().expect("actor");
        if e["event"] == "acquired" {
            assert_eq!(actor, a);
            assert_eq!(e["detail"], json!(""));
        } else {
            assert!(actor.starts_with("tenure-cli:tester@"), "actor {actor}");
        }
    }
    assert!(
        events[0]["detail"].as_str().unwrap().contains(&a),
        "{}",
        events[0]
    );
    assert!(
        events[1]["detail"].as_str().unwrap().contains(&b),
        "{}",
        events[1]
    );

    // For people: a table, newest first.
    let out = db.run(&["history", &name]);
    out.expect_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        ["AT", "TERM", "EVENT", "HOLDER", "ACTOR", "DETAIL"]
    );
    let row: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(row[1..4], ["1", "demoted", a.as_str()]);
    assert!(row[4].starts_with("tenure-cli:tester@"), "{}", lines[1]);
    assert!(lines[5].contains("acquired"), "{out}");
    db.drop_tables().await;
}
