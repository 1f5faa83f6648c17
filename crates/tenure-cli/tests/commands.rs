//! The read and admin commands of `tenure` (`leader`, `status`, `watch`, `history`, `demote`,
//! `handover`, `pause`, `resume`, `migrate`) and its handling of bad input, as real processes
//! on SQLite, PostgreSQL and MariaDB.
//!
//! Leadership is set up through the library (`Store::apply`), never through `tenure run`, so
//! that these tests depend on the binary's read and admin paths only. Every test has its own
//! database: a fresh SQLite file, or a fresh table prefix on the servers.

mod support;

use serde_json::{json, Value};
use std::time::Duration;
use support::*;
use tenure::{Applied, Effect, Op, StepDownReason, Store};

per_backend!(
    async leader_json_and_am_i,
    status_json_and_table,
    watch_prints_one_json_line_per_change,
    history_newest_first_with_admin_actor,
    admin_actions_take_effect,
    migrate_then_no_create,
    bad_input_is_refused_before_anything_is_written,
);

const TTL_MS: u64 = 30_000;

/// The fields of a lease in `status`, `watch` and the admin answers.
const LEASE_KEYS: [&str; 9] = [
    "name",
    "holder",
    "term",
    "since",
    "remaining_ms",
    "expires_at",
    "paused",
    "handover_to",
    "metadata",
];

async fn campaign(
    store: &Store,
    name: &str,
    who: &str,
    ttl_ms: u64,
    metadata: Option<&str>,
) -> Applied {
    let op = Op::Campaign {
        candidate: who.to_string(),
        term: None,
        ttl_ms,
        metadata: metadata.map(str::to_string),
        purpose: tenure::Purpose::Election,
    };
    store.apply(name, &op, who).await.expect("campaign")
}

/// The campaign of a holder that believes it holds `term`: the only kind that renews.
async fn renew(store: &Store, name: &str, who: &str, term: u64, metadata: Option<&str>) -> Applied {
    let op = Op::Campaign {
        candidate: who.to_string(),
        term: Some(term),
        ttl_ms: TTL_MS,
        metadata: metadata.map(str::to_string),
        purpose: tenure::Purpose::Election,
    };
    store.apply(name, &op, who).await.expect("campaign")
}

fn acquired(applied: &Applied) -> bool {
    matches!(applied.effect, Effect::Acquired { .. })
}

fn term(applied: &Applied) -> u64 {
    applied.lease.as_ref().expect("a lease").term
}

/// Panics unless `remaining` is a time left within (0, ttl].
fn assert_live_remaining(remaining: &Value, ttl_ms: u64) {
    let ms = remaining
        .as_u64()
        .unwrap_or_else(|| panic!("remaining_ms not a number: {remaining}"));
    assert!(
        ms > 0 && ms <= ttl_ms,
        "remaining_ms {ms} not in (0, {ttl_ms}]"
    );
}

// ---------------------------------------------------------------------------------------------
// leader

async fn leader_json_and_am_i(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let store = db.store().await;
    let name = unique("leader");
    let a = unique("cand-a");
    let b = unique("cand-b");

    // Never used: no leader, and nobody is it.
    let out = db.run(&["leader", &name, "--json"]);
    out.expect_code(0);
    assert_eq!(out.json(), json!({ "name": name, "leader": null }));
    let out = db.run(&["leader", &name, "--am-i", &a, "--json"]);
    out.expect_code(1);
    assert_eq!(
        out.json(),
        json!({ "name": name, "leader": null, "am_i": { "candidate": a, "leads": false } })
    );

    assert!(acquired(
        &campaign(&store, &name, &a, TTL_MS, Some("10.0.0.7:8080")).await
    ));
    let snapshot = store.get(&name).await.expect("get");
    let lease = &snapshot.leases[0];

    let out = db.run(&["leader", &name, "--json"]);
    out.expect_code(0);
    let v = out.json();
    assert_keys(&v, &["name", "leader"]);
    assert_eq!(v["name"], json!(name));
    let leader = &v["leader"];
    assert_keys(
        leader,
        &["holder", "term", "since", "remaining_ms", "metadata"],
    );
    assert_eq!(leader["holder"], json!(a));
    assert_eq!(leader["term"], json!(1));
    rfc3339(&leader["since"]);
    assert_eq!(leader["since"], json!(db_time(lease.acquired_at)));
    assert_live_remaining(&leader["remaining_ms"], TTL_MS);
    assert_eq!(leader["metadata"], json!("10.0.0.7:8080"));

    // --am-i: 0 for the holder, 1 for anyone else (compared byte for byte).
    let out = db.run(&["leader", &name, "--am-i", &a, "--json"]);
    out.expect_code(0);
    let v = out.json();
    assert_keys(&v, &["name", "leader", "am_i"]);
    assert_eq!(v["am_i"], json!({ "candidate": a, "leads": true }));
    assert_eq!(v["leader"]["holder"], json!(a));
    for other in [b.clone(), a.to_uppercase(), format!(" {a}")] {
        let out = db.run(&["leader", &name, "--am-i", &other, "--json"]);
        out.expect_code(1);
        let v = out.json();
        assert_eq!(v["am_i"], json!({ "candidate": other, "leads": false }));
        assert_eq!(v["leader"]["holder"], json!(a));
    }
    // A trailing space is refused: MySQL's PAD SPACE collation would equate it with `a`.
    let out = db.run(&["leader", &name, "--am-i", &format!("{a} ")]);
    out.expect_code(64);
    assert!(out.stderr.contains("must not end with a space"), "{out}");

    // The same for people.
    let out = db.run(&["leader", &name]);
    out.expect_code(0);
    let line = out.stdout.trim_end();
    assert!(
        line.starts_with(&format!(
            "{name}: led by {a} (term 1) since {}, ",
            db_time(lease.acquired_at)
        )) && line.ends_with(" left, metadata 10.0.0.7:8080"),
        "{out}"
    );
    let out = db.run(&["leader", &name, "--am-i", &a]);
    out.expect_code(0);
    assert_eq!(out.stdout, format!("{a} leads {name}\n"));
    let out = db.run(&["leader", &name, "--am-i", &b]);
    out.expect_code(1);
    assert_eq!(out.stdout, format!("{b} does not lead {name}\n"));

    // An expired lease has no leader; the next tenure has the next term.
    let short = unique("short");
    assert!(acquired(&campaign(&store, &short, &a, 300, None).await));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let out = db.run(&["leader", &short, "--am-i", &a, "--json"]);
    out.expect_code(1);
    assert_eq!(
        out.json(),
        json!({ "name": short, "leader": null, "am_i": { "candidate": a, "leads": false } })
    );
    let taken = campaign(&store, &short, &b, TTL_MS, None).await;
    assert_eq!(
        taken.effect,
        Effect::Acquired {
            took_over_from: Some(a.clone())
        }
    );
    let out = db.run(&["leader", &short, "--am-i", &b, "--json"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["leader"]["term"], json!(2));
    assert_eq!(v["leader"]["metadata"], Value::Null);
    assert_live_remaining(&v["leader"]["remaining_ms"], TTL_MS);

    // Reading wrote nothing: the history holds only the three acquisitions.
    assert_eq!(db.rows("history").await, Some(3));
    db.drop_tables().await;
}

// ---------------------------------------------------------------------------------------------
// status

async fn status_json_and_table(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let store = db.store().await;

    // No names yet.
    let out = db.run(&["status", "--json"]);
    out.expect_code(0);
    let v = out.json();
    assert_keys(&v, &["now", "leases"]);
    rfc3339(&v["now"]);
    assert_eq!(v["leases"], json!([]));
    let out = db.run(&["status"]);
    out.expect_code(0);
    assert_eq!(out.stdout, "no names yet\n");

    // a: led; b: led, paused; c: led, handover requested; d: demoted (lock-delay kept).
    let base = unique("st");
    let names: Vec<String> = ["a", "b", "c", "d"]
        .iter()
        .map(|s| format!("{base}-{s}"))
        .collect();
    let holders: Vec<String> = ["ha", "hb", "hc", "hd"].iter().map(|s| unique(s)).collect();
    let target = unique("target");
    for (name, holder) in names.iter().zip(&holders) {
        let metadata = format!("addr of {holder}");
        assert!(acquired(
            &campaign(&store, name, holder, TTL_MS, Some(&metadata)).await
        ));
    }
    store.pause(&names[1], "test").await.expect("pause");
    store
        .handover(&names[2], &target, false, "test")
        .await
        .expect("handover");
    store
        .demote(&names[3], false, "test")
        .await
        .expect("demote");
    let snapshot = store.list().await.expect("list");
    assert_eq!(snapshot.leases.len(), 4);

    let out = db.run(&["status", "--json"]);
    out.expect_code(0);
    let v = out.json();
    assert_keys(&v, &["now", "leases"]);
    let now = rfc3339(&v["now"]);
    assert!(now >= snapshot.now.to_utc() - chrono::Duration::milliseconds(1));
    let leases = v["leases"].as_array().expect("leases array");
    assert_eq!(leases.len(), 4, "{v}");
    for (i, (l, lease)) in leases.iter().zip(&snapshot.leases).enumerate() {
        assert_keys(l, &LEASE_KEYS);
        assert_eq!(l["name"], json!(names[i]), "sorted by name");
        assert_eq!(l["term"], json!(1));
        assert_eq!(l["since"], json!(db_time(lease.acquired_at)));
        assert_eq!(l["expires_at"], json!(db_time(lease.expires_at)));
        assert_eq!(l["paused"], json!(i == 1));
        assert_eq!(
            l["handover_to"],
            if i == 2 { json!(target) } else { Value::Null }
        );
        assert_eq!(l["metadata"], json!(format!("addr of {}", holders[i])));
        let expires_at = rfc3339(&l["expires_at"]);
        assert!(expires_at > now, "no lease has ended yet: {l}");
        if i < 3 {
            assert_eq!(l["holder"], json!(holders[i]));
            assert_live_remaining(&l["remaining_ms"], TTL_MS);
            // remaining_ms agrees with expires_at - now (both printed to the millisecond).
            let left = (expires_at - now).num_milliseconds();
            let remaining = l["remaining_ms"].as_i64().expect("number");
            assert!((left - remaining).abs() <= 1, "{left} vs {l}");
        } else {
            // Demoted: nobody leads, but nobody may start before the old expiry either.
            assert_eq!(l["holder"], Value::Null);
            assert_eq!(l["remaining_ms"], json!(0));
        }
    }

    // The table for people.
    let out = db.run(&["status"]);
    out.expect_code(0);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "HOLDER", "TERM", "SINCE", "LEFT", "PAUSED", "HANDOVER"]
    );
    let cols = |i: usize| -> Vec<&str> { lines[i + 1].split_whitespace().collect() };
    for i in 0..4 {
        let row = cols(i);
        assert_eq!(row.len(), 7, "{}", lines[i + 1]);
        assert_eq!(row[0], names[i]);
        assert_eq!(row[2], "1");
        assert_eq!(row[3], db_time(snapshot.leases[i].acquired_at));
    }
    assert_eq!(cols(0)[1], holders[0]);
    assert!(cols(0)[4].ends_with('s'), "time left: {}", lines[1]);
    assert_eq!(cols(0)[5..], ["no", "-"]);
    assert_eq!(cols(1)[5..], ["yes", "-"]);
    assert_eq!(cols(2)[5..], ["no", target.as_str()]);
    assert_eq!(cols(3)[1], "-");
    assert_eq!(cols(3)[4..], ["-", "no", "-"]);
    db.drop_tables().await;
}

// ---------------------------------------------------------------------------------------------
// watch

/// The next line of `watch --json`, which must come within 5 s, followed by nothing for 300 ms
/// (three intervals): each change gives exactly one line.
fn one_line(watch: &Background, after: &str) -> Value {
    let line = watch
        .next_line(Duration::from_secs(5))
        .unwrap_or_else(|| panic!("no line after {after}; stderr:\n{}", watch.stderr()));
    let value: Value = serde_json::from_str(&line)
        .unwrap_or_else(|e| panic!("not a JSON line after {after} ({e}): {line}"));
    if let Some(extra) = watch.next_line(Duration::from_millis(300)) {
        panic!("a second line after {after}: {extra} (first: {line})");
    }
    value
}

/// Checks one change line of a lease: every field, with `expected` giving holder, term,
/// paused, handover_to and metadata.
fn check_change(line: &Value, name: &str, expected: Value) {
    let mut keys = vec!["at"];
    keys.extend(LEASE_KEYS);
    assert_keys(line, &keys);
    let at = rfc3339(&line["at"]);
    rfc3339(&line["since"]);
    assert_eq!(line["name"], json!(name));
    for (key, value) in expected.as_object().expect("object") {
        assert_eq!(&line[key.as_str()], value, "{key} in {line}");
    }
    if line["holder"].is_null() {
        assert_eq!(line["remaining_ms"], json!(0), "{line}");
    } else {
        assert_live_remaining(&line["remaining_ms"], TTL_MS);
        assert!(rfc3339(&line["expires_at"]) > at, "{line}");
    }
}

async fn watch_prints_one_json_line_per_change(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let store = db.store().await;
    let name = unique("watch");
    let a = unique("cand-a");
    let b = unique("cand-b");

    let mut watch =
        Background::spawn(
            db.tenure()
                .args(["watch", &name, "--json", "--interval", "100ms"]),
        );
    // A name never used: one line with the time and the name only.
    let first = one_line(&watch, "start");
    assert_keys(&first, &["at", "name"]);
    assert_eq!(first["name"], json!(name));
    let mut last_at = rfc3339(&first["at"]);
    let mut next = |after: &str, expected: Value| {
        let line = one_line(&watch, after);
        check_change(&line, &name, expected);
        let at = rfc3339(&line["at"]);
        assert!(at >= last_at, "time went back: {line}");
        last_at = at;
        line
    };

    assert!(acquired(
        &campaign(&store, &name, &a, TTL_MS, Some("m1")).await
    ));
    let line = next(
        "acquire",
        json!({ "holder": a, "term": 1, "paused": false, "handover_to": null, "metadata": "m1" }),
    );
    let since = line["since"].clone();

    // A renewal changes only the time left: no line.
    assert_eq!(
        renew(&store, &name, &a, 1, Some("m1")).await.effect,
        Effect::Renewed
    );
    if let Some(extra) = watch.next_line(Duration::from_millis(500)) {
        panic!("a line for a renewal: {extra}");
    }
    // A renewal that publishes new metadata (e.g. a new address) is a change.
    assert_eq!(
        renew(&store, &name, &a, 1, Some("m1b")).await.effect,
        Effect::Renewed
    );
    next(
        "new metadata",
        json!({ "holder": a, "term": 1, "paused": false, "handover_to": null, "metadata": "m1b" }),
    );

    store.pause(&name, "test").await.expect("pause");
    let line = next(
        "pause",
        json!({ "holder": a, "term": 1, "paused": true, "handover_to": null, "metadata": "m1b" }),
    );
    assert_eq!(line["since"], since);

    store.resume(&name, "test").await.expect("resume");
    next(
        "resume",
        json!({ "holder": a, "term": 1, "paused": false, "handover_to": null }),
    );

    store
        .handover(&name, &b, false, "test")
        .await
        .expect("handover");
    next(
        "handover",
        json!({ "holder": a, "term": 1, "paused": false, "handover_to": b }),
    );

    assert_eq!(
        store
            .release(&name, &a, 1, Duration::ZERO)
            .await
            .expect("release")
            .effect,
        Effect::Released
    );
    next(
        "release",
        json!({ "holder": null, "term": 1, "paused": false, "handover_to": b }),
    );

    assert!(acquired(
        &campaign(&store, &name, &b, TTL_MS, Some("m2")).await
    ));
    let line = next(
        "acquire by the handover target",
        json!({ "holder": b, "term": 2, "paused": false, "handover_to": null, "metadata": "m2" }),
    );
    assert_ne!(line["since"], since);

    // demote: nobody leads, nobody may start before the old expiry; then --now cuts that short.
    store.demote(&name, false, "test").await.expect("demote");
    let line = next(
        "demote",
        json!({ "holder": null, "term": 2, "paused": false, "handover_to": null }),
    );
    assert!(
        rfc3339(&line["expires_at"]) > rfc3339(&line["at"]),
        "{line}"
    );
    store
        .demote(&name, true, "test")
        .await
        .expect("demote --now");
    let line = next(
        "demote --now",
        json!({ "holder": null, "term": 2, "paused": false, "handover_to": null }),
    );
    assert!(
        rfc3339(&line["expires_at"]) <= rfc3339(&line["at"]),
        "{line}"
    );

    // Nothing changes for a second: nothing is printed.
    if let Some(extra) = watch.next_line(Duration::from_secs(1)) {
        panic!("a line while nothing changed: {extra}");
    }

    watch.signal(nix::sys::signal::Signal::SIGINT);
    let status = watch
        .wait_timeout(Duration::from_secs(5))
        .expect("watch stops on SIGINT");
    assert_eq!(status.code(), Some(0), "stderr:\n{}", watch.stderr());
    assert_eq!(watch.next_line(Duration::from_millis(200)), None);
    let stderr = watch.stderr();
    assert!(
        stderr.lines().all(|l| l.starts_with("tenure: database ")),
        "unexpected stderr:\n{stderr}"
    );
    db.drop_tables().await;
}

// ---------------------------------------------------------------------------------------------
// history

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
    admin(&["handover", &name, &b]);
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

// ---------------------------------------------------------------------------------------------
// demote, handover, pause, resume

/// Runs an admin command with `--json` and checks the answer's shape; returns its lease.
fn admin_json(db: &TestDb, args: &[&str], action: &str, changed: bool, effect: &str) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = db.run(&all);
    out.expect_code(0);
    let v = out.json();
    assert_keys(&v, &["action", "changed", "effect", "lease"]);
    assert_eq!(v["action"], json!(action), "{v}");
    assert_eq!(v["changed"], json!(changed), "{v}");
    assert_eq!(v["effect"], json!(effect), "{v}");
    assert_keys(&v["lease"], &LEASE_KEYS);
    v["lease"].clone()
}

fn leader_term(db: &TestDb, name: &str, candidate: &str) -> (i32, Value) {
    let out = db.run(&["leader", name, "--am-i", candidate, "--json"]);
    (out.code.expect("exit code"), out.json()["leader"].clone())
}

async fn admin_actions_take_effect(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let store = db.store().await;
    let a = unique("cand-a");
    let b = unique("cand-b");
    let c = unique("cand-c");

    // demote: nobody leads, the expiry is kept (nobody starts before it); --now cuts it short.
    let name = unique("demote");
    let first = campaign(&store, &name, &a, TTL_MS, None).await;
    let expires = first.lease.as_ref().expect("lease").expires_at;
    let lease = admin_json(&db, &["demote", &name], "demote", true, "demoted");
    assert_eq!(lease["holder"], Value::Null);
    assert_eq!(lease["term"], json!(1));
    assert_eq!(lease["remaining_ms"], json!(0));
    assert_eq!(lease["expires_at"], json!(db_time(expires)));
    assert_eq!(leader_term(&db, &name, &a), (1, Value::Null));
    assert_eq!(
        campaign(&store, &name, &b, TTL_MS, None).await.effect,
        Effect::Unavailable
    );
    admin_json(&db, &["demote", &name], "demote", false, "no_change");
    let out = db.run(&["demote", &name, "--now", "--json"]);
    out.expect_code(0);
    assert!(out.stderr.contains("unsafe"), "{out}");
    assert_eq!(out.json()["effect"], json!("demoted"));
    let snapshot = store.get(&name).await.expect("get");
    assert!(snapshot.leases[0].expires_at <= snapshot.now);
    let next = campaign(&store, &name, &b, TTL_MS, None).await;
    assert!(acquired(&next) && term(&next) == 2, "{next:?}");
    assert_eq!(leader_term(&db, &name, &b).0, 0);

    // demote --now of a live leader: the next candidate starts at once.
    let name = unique("demote-now");
    assert!(acquired(&campaign(&store, &name, &a, TTL_MS, None).await));
    let lease = admin_json(&db, &["demote", &name, "--now"], "demote", true, "demoted");
    assert_eq!(lease["holder"], Value::Null);
    let next = campaign(&store, &name, &b, TTL_MS, None).await;
    assert!(acquired(&next) && term(&next) == 2, "{next:?}");

    // handover: the leader keeps leading until it steps down; then only the target may start.
    let name = unique("handover");
    assert!(acquired(
        &campaign(&store, &name, &a, TTL_MS, Some("meta-a")).await
    ));
    let lease = admin_json(
        &db,
        &["handover", &name, &b],
        "handover",
        true,
        "handover_requested",
    );
    assert_eq!(lease["holder"], json!(a));
    assert_eq!(lease["handover_to"], json!(b));
    assert_eq!(lease["term"], json!(1));
    let (code, leader) = leader_term(&db, &name, &a);
    assert_eq!((code, &leader["holder"]), (0, &json!(a)));
    admin_json(
        &db,
        &["handover", &name, &b],
        "handover",
        false,
        "no_change",
    );
    assert_eq!(
        renew(&store, &name, &a, 1, None).await.effect,
        Effect::SteppedDown(StepDownReason::HandoverTo(b.clone()))
    );
    store
        .release(&name, &a, 1, Duration::ZERO)
        .await
        .expect("release");
    assert_eq!(
        campaign(&store, &name, &c, TTL_MS, None).await.effect,
        Effect::Unavailable
    );
    let next = campaign(&store, &name, &b, TTL_MS, None).await;
    assert!(acquired(&next) && term(&next) == 2, "{next:?}");
    assert_eq!(leader_term(&db, &name, &b).0, 0);
    assert_eq!(leader_term(&db, &name, &a).0, 1);

    // handover --now: the target leads with a new term at once.
    let name = unique("handover-now");
    assert!(acquired(
        &campaign(&store, &name, &a, TTL_MS, Some("meta-a")).await
    ));
    let out = db.run(&["handover", &name, &b, "--now", "--json"]);
    out.expect_code(0);
    assert!(out.stderr.contains("unsafe"), "{out}");
    let v = out.json();
    assert_eq!(v["effect"], json!("forced"));
    assert_eq!(v["changed"], json!(true));
    let lease = &v["lease"];
    assert_eq!(lease["holder"], json!(b));
    assert_eq!(lease["term"], json!(2));
    assert_eq!(lease["metadata"], Value::Null);
    assert_eq!(lease["handover_to"], Value::Null);
    assert_live_remaining(&lease["remaining_ms"], TTL_MS);
    let (code, leader) = leader_term(&db, &name, &b);
    assert_eq!((code, &leader["term"]), (0, &json!(2)));
    assert_eq!(leader_term(&db, &name, &a).0, 1);
    // The target adopts the forced grant at its first campaign, once.
    let adopted = campaign(&store, &name, &b, TTL_MS, None).await;
    assert!(acquired(&adopted) && term(&adopted) == 2, "{adopted:?}");
    let renewed = renew(&store, &name, &b, 2, None).await;
    assert_eq!(
        (renewed.effect.clone(), term(&renewed)),
        (Effect::Renewed, 2)
    );
    assert_eq!(
        campaign(&store, &name, &a, TTL_MS, None).await.effect,
        Effect::Unavailable
    );

    // pause: the leader steps down and nobody acquires until resume.
    let name = unique("pause");
    assert!(acquired(&campaign(&store, &name, &a, TTL_MS, None).await));
    let lease = admin_json(&db, &["pause", &name], "pause", true, "paused");
    assert_eq!(lease["paused"], json!(true));
    assert_eq!(lease["holder"], json!(a));
    admin_json(&db, &["pause", &name], "pause", false, "no_change");
    assert_eq!(
        renew(&store, &name, &a, 1, None).await.effect,
        Effect::SteppedDown(StepDownReason::Paused)
    );
    store
        .release(&name, &a, 1, Duration::ZERO)
        .await
        .expect("release");
    assert_eq!(
        campaign(&store, &name, &b, TTL_MS, None).await.effect,
        Effect::Unavailable
    );
    assert_eq!(leader_term(&db, &name, &b), (1, Value::Null));
    let status = db.run(&["status", "--json"]).json();
    let paused: Vec<&Value> = status["leases"]
        .as_array()
        .expect("leases")
        .iter()
        .filter(|l| l["paused"] == json!(true))
        .collect();
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0]["name"], json!(name));
    let lease = admin_json(&db, &["resume", &name], "resume", true, "resumed");
    assert_eq!(lease["paused"], json!(false));
    admin_json(&db, &["resume", &name], "resume", false, "no_change");
    let next = campaign(&store, &name, &b, TTL_MS, None).await;
    assert!(acquired(&next) && term(&next) == 2, "{next:?}");

    // The same for people.
    let out = db.run(&["pause", &name]);
    out.expect_code(0);
    assert!(
        out.stdout
            .starts_with(&format!("{name}: paused; the leader steps down")),
        "{out}"
    );
    let out = db.run(&["resume", &name]);
    out.expect_code(0);
    assert!(
        out.stdout.starts_with(&format!("{name}: resumed\n")),
        "{out}"
    );

    // A name never used: demote, handover and resume refuse it and create nothing; pause
    // creates it paused, so that nobody starts it.
    let never = unique("never");
    for args in [
        vec!["demote", never.as_str()],
        vec!["demote", never.as_str(), "--now"],
        vec!["handover", never.as_str(), b.as_str()],
        vec!["resume", never.as_str()],
    ] {
        let out = db.run(&args);
        out.expect_code(64);
        let lines = out.message_lines();
        assert_eq!(lines.len(), 1, "{out}");
        assert!(
            lines[0].contains(&format!("{never:?}")) && lines[0].contains("has ever been held"),
            "{out}"
        );
        assert!(store.get(&never).await.expect("get").leases.is_empty());
    }
    let lease = admin_json(&db, &["pause", &never], "pause", true, "paused");
    assert_eq!(
        (&lease["paused"], &lease["holder"], &lease["term"]),
        (&json!(true), &Value::Null, &json!(0))
    );
    db.drop_tables().await;
}

// ---------------------------------------------------------------------------------------------
// migrate

#[test]
fn migrate_print_needs_no_connection() {
    // Unroutable hosts (TEST-NET-1): any attempt to connect would hang for seconds.
    let cases = [
        (
            "postgres://tenure:s3cretpw@192.0.2.1:5432/x",
            &["TIMESTAMPTZ", "GENERATED ALWAYS AS IDENTITY"][..],
        ),
        (
            "postgresql://tenure:s3cretpw@192.0.2.1/x",
            &["TIMESTAMPTZ"][..],
        ),
        (
            "mysql://tenure:s3cretpw@192.0.2.1:3306/x",
            &[
                "DATETIME(6)",
                "ENGINE=InnoDB",
                "utf8mb4_bin",
                "DELIMITER //\nCREATE PROCEDURE IF NOT EXISTS ",
                "lock_acquire_v1(IN p_name",
                "lock_release_v1(IN p_name",
            ][..],
        ),
        (
            "mariadb://tenure:s3cretpw@192.0.2.1/x",
            &["DATETIME(6)"][..],
        ),
        (
            "sqlite:///nonexistent-tenure-dir/x.db",
            &["AUTOINCREMENT"][..],
        ),
    ];
    let prefix = fresh_prefix();
    for (url, markers) in cases {
        let out = run(tenure().args([
            "--database-url",
            url,
            "--table-prefix",
            &prefix,
            "migrate",
            "--print",
        ]));
        out.expect_code(0);
        assert!(
            out.took < Duration::from_secs(3),
            "{url} took {:?}",
            out.took
        );
        for table in ["lease", "history", "tick", "schema"] {
            assert!(
                out.stdout
                    .contains(&format!("CREATE TABLE IF NOT EXISTS {prefix}{table} (")),
                "{url}: {table}:\n{out}"
            );
        }
        for marker in markers {
            assert!(out.stdout.contains(marker), "{url}: {marker}:\n{out}");
        }
        assert!(
            !out.stdout.contains("tenure_"),
            "{url}: default prefix:\n{out}"
        );
        assert!(!out.stderr.contains("s3cretpw") && !out.stdout.contains("s3cretpw"));
    }
    assert!(!std::path::Path::new("/nonexistent-tenure-dir").exists());

    // The URL may come from the environment; the default prefix is tenure_.
    let out = run(tenure()
        .env("TENURE_DATABASE_URL", "mysql://192.0.2.1/x")
        .args(["migrate", "--print"]));
    out.expect_code(0);
    assert!(out
        .stdout
        .contains("CREATE TABLE IF NOT EXISTS tenure_lease ("));
    assert!(out.stdout.contains("ENGINE=InnoDB"), "{out}");

    // A bad prefix is refused even here.
    let out = run(tenure().args([
        "--database-url",
        "postgres://192.0.2.1/x",
        "--table-prefix",
        "x;drop",
        "migrate",
        "--print",
    ]));
    out.expect_code(64);
    assert!(out.stdout.is_empty(), "{out}");
    assert!(out.message_lines()[0].contains("\"x;drop\""), "{out}");
}

// ---------------------------------------------------------------------------------------------
// fence-sql

#[test]
fn fence_sql_prints_the_dialects_statement_without_connecting() {
    let prefix = fresh_prefix();
    // Unroutable host: the dialect comes from the scheme, nothing connects.
    let cases = [
        (
            &["--database-url", "postgres://u:s3cretpw@192.0.2.1/x"][..],
            &["$1", "$3", "FOR SHARE", "clock_timestamp()"][..],
        ),
        (
            &["--database-url", "mariadb://u:s3cretpw@192.0.2.1/x"][..],
            &["name = ?", "@@global.read_only = 0", "LOCK IN SHARE MODE"][..],
        ),
        (&[][..], &["UPDATE", "RETURNING term"][..]),
    ];
    for (flags, markers) in cases {
        let out = run(tenure()
            .args(flags)
            .args(["--table-prefix", &prefix, "fence-sql"]));
        out.expect_code(0);
        let lines: Vec<&str> = out.stdout.lines().collect();
        assert_eq!(lines.len(), 2, "a comment and the statement:\n{out}");
        assert!(
            lines[0].starts_with("-- ") && lines[0].contains("name, holder, term"),
            "{out}"
        );
        assert!(lines[0].contains(&format!("table {prefix}lease")), "{out}");
        assert!(lines[1].contains(&format!(" {prefix}lease ")), "{out}");
        for marker in markers {
            assert!(lines[1].contains(marker), "{flags:?}: {marker}:\n{out}");
        }
        assert!(!out.stdout.contains("s3cretpw") && !out.stderr.contains("s3cretpw"));
    }
    assert!(
        !scratch_state_home().exists(),
        "fence-sql touched the default database's directory"
    );

    // --dialect wins over the URL; --json gives the parts.
    let out = run(tenure().args([
        "--database-url",
        "postgres://192.0.2.1/x",
        "--json",
        "fence-sql",
        "--dialect",
        "mysql",
    ]));
    out.expect_code(0);
    let json = out.json();
    assert_keys(&json, &["dialect", "parameters", "sql", "table"]);
    assert_eq!(json["dialect"], "mysql");
    assert_eq!(json["table"], "tenure_lease");
    assert_eq!(
        json["parameters"],
        serde_json::json!(["name", "holder", "term"])
    );
    assert!(
        json["sql"]
            .as_str()
            .unwrap()
            .ends_with("LOCK IN SHARE MODE"),
        "{out}"
    );

    // An unknown dialect is a usage error, never a statement.
    let out = run(tenure().args(["fence-sql", "--dialect", "oracle"]));
    out.expect_code(64);
    assert!(out.stdout.is_empty(), "{out}");
}

/// `tenure run`, `lock` and `every` give their command the store's fence statement.
#[tokio::test]
async fn commands_get_tenure_fence_sql() {
    let Some(db) = TestDb::new(BackendKind::Sqlite).await else {
        return;
    };
    let expected = tenure::backend::fence_sql(BackendKind::Sqlite, &db.prefix).unwrap();
    let print = ["--", "sh", "-c", "printf '%s\\n' \"$TENURE_FENCE_SQL\""];
    for (command, args) in [
        ("run", &["run", "fx", "--ttl", "2s"][..]),
        ("lock", &["lock", "fx", "--ttl", "2s"][..]),
    ] {
        let out = db.run(&[args, &print[..]].concat());
        out.expect_code(0);
        assert_eq!(out.stdout.trim_end(), expected, "{command}:\n{out}");
    }
}

async fn migrate_then_no_create(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let name = unique("mig");

    // Without tables and without DDL rights: a usage error that says what to do.
    for args in [
        vec!["--no-create", "leader", name.as_str()],
        vec!["--no-create", "pause", name.as_str()],
        vec!["--no-create", "status", "--json"],
    ] {
        let out = db.run(&args);
        out.expect_code(64);
        assert!(out.stdout.is_empty(), "{out}");
        let lines = out.message_lines();
        assert_eq!(lines.len(), 1, "{out}");
        assert!(
            lines[0].contains("`tenure migrate`") && lines[0].contains(&format!("({}", db.prefix)),
            "{out}"
        );
    }
    db.assert_untouched("--no-create without tables").await;
    assert_eq!(db.rows("schema").await, None);

    let out = db.run(&["migrate"]);
    out.expect_code(0);
    let p = &db.prefix;
    assert!(
        out.stderr.contains(&format!(
            "tables {p}lease, {p}history, {p}tick and {p}schema are ready"
        )),
        "{out}"
    );
    assert_eq!(db.rows("lease").await, Some(0));
    assert_eq!(db.rows("schema").await, Some(1));
    db.run(&["migrate"]).expect_code(0);
    assert_eq!(db.rows("schema").await, Some(1), "migrate is idempotent");

    let lease = admin_json(
        &db,
        &["--no-create", "pause", &name],
        "pause",
        true,
        "paused",
    );
    assert_eq!(lease["name"], json!(name));
    let out = db.run(&["--no-create", "status", "--json"]);
    out.expect_code(0);
    assert_eq!(out.json()["leases"][0]["name"], json!(name));
    db.run(&["--no-create", "leader", &name]).expect_code(0);
    assert_eq!(db.rows("lease").await, Some(1));

    // A DBA applies the printed DDL (twice: it is idempotent); then --no-create works.
    let Some(dba) = TestDb::new(kind).await else {
        return;
    };
    let out = run(dba.tenure().args(["migrate", "--print"]));
    out.expect_code(0);
    dba.execute_script(&out.stdout).await;
    dba.execute_script(&out.stdout).await;
    assert_eq!(dba.rows("schema").await, Some(1));
    admin_json(
        &dba,
        &["--no-create", "pause", &name],
        "pause",
        true,
        "paused",
    );
    let out = dba.run(&["--no-create", "history", &name, "--json"]);
    out.expect_code(0);
    assert_eq!(out.json()["events"][0]["event"], json!("paused"));
    db.drop_tables().await;
    dba.drop_tables().await;
}

// ---------------------------------------------------------------------------------------------
// the default database

#[tokio::test]
async fn default_database_is_a_file_in_the_state_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let state = dir.path().join("state");
    let name = unique("default");
    let path = state.join("tenure").join("tenure.db");
    let url = format!("sqlite://{}", path.display());

    let out = run(tenure()
        .env("XDG_STATE_HOME", &state)
        .args(["pause", &name, "--json"]));
    out.expect_code(0);
    assert_eq!(out.banner(), Some(url.as_str()), "{out}");
    assert_eq!(
        out.stderr,
        format!("tenure: database {url}\n"),
        "the path is the only thing said"
    );
    assert!(path.is_file(), "{} missing", path.display());

    // A second process ("another terminal") and the library see the same database.
    let out = run(tenure()
        .env("XDG_STATE_HOME", &state)
        .args(["status", "--json"]));
    out.expect_code(0);
    assert_eq!(out.banner(), Some(url.as_str()));
    assert_eq!(out.json()["leases"][0]["name"], json!(name));
    assert_eq!(out.json()["leases"][0]["paused"], json!(true));
    let store = Store::connect(&url)
        .await
        .expect("library on the default file");
    let snapshot = store.get(&name).await.expect("get");
    assert!(snapshot.leases[0].paused);

    // -q hides the banner.
    let out = run(tenure()
        .env("XDG_STATE_HOME", &state)
        .args(["-q", "leader", &name, "--json"]));
    out.expect_code(0);
    assert_eq!(out.stderr, "");

    // Without XDG_STATE_HOME (or with it empty): ~/.local/state.
    let home = dir.path().join("home");
    let home_path = home.join(".local/state/tenure/tenure.db");
    for xdg in [None, Some("")] {
        let mut command = tenure();
        command.env("HOME", &home);
        match xdg {
            Some(v) => command.env("XDG_STATE_HOME", v),
            None => command.env_remove("XDG_STATE_HOME"),
        };
        let out = run(command.args(["status", "--json"]));
        out.expect_code(0);
        let expected = format!("sqlite://{}", home_path.display());
        assert_eq!(out.banner(), Some(expected.as_str()), "{out}");
        assert!(home_path.is_file());
    }

    // Printing the DDL of the default database creates nothing.
    let untouched = dir.path().join("untouched");
    let out = run(tenure()
        .env("XDG_STATE_HOME", &untouched)
        .args(["migrate", "--print"]));
    out.expect_code(0);
    assert!(out.stdout.contains("AUTOINCREMENT"), "SQLite DDL:\n{out}");
    assert!(
        !untouched.exists(),
        "migrate --print created the state directory"
    );

    // Neither: a usage error that says what to do.
    let out = run(tenure()
        .env_remove("XDG_STATE_HOME")
        .env_remove("HOME")
        .args(["status"]));
    out.expect_code(64);
    assert!(out.message_lines()[0].contains("--database-url"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// bad input

/// `args`, the exit code, and what the one-line message must contain: the bad value as shown
/// and what is allowed.
type Case = (Vec<String>, i32, Vec<String>);

fn case(args: &[&str], code: i32, says: &[&str]) -> Case {
    (
        args.iter().map(|s| s.to_string()).collect(),
        code,
        says.iter().map(|s| s.to_string()).collect(),
    )
}

/// Runs `args`, checking the exit code and a one-line message naming the value.
fn refused(db_command: &mut std::process::Command, (args, code, says): &Case) -> Output {
    let out = run(db_command.args(args));
    out.expect_code(*code);
    assert!(out.stdout.is_empty(), "{args:?} printed on stdout:\n{out}");
    let lines = out.message_lines();
    assert_eq!(lines.len(), 1, "{args:?}: not a one-line message:\n{out}");
    for s in says {
        assert!(
            lines[0].contains(s.as_str()),
            "{args:?}: {s:?} not said:\n{out}"
        );
    }
    out
}

async fn bad_input_is_refused_before_anything_is_written(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    let long_name = "n".repeat(192);
    let long_id = "i".repeat(192);
    let bytes = "1 to 191 bytes";
    let control = "must not contain control characters";
    let cases = [
        case(&["pause", ""], 64, &["invalid name \"\"", bytes]),
        case(
            &["pause", &long_name],
            64,
            &[&format!("{long_name:?}"), bytes],
        ),
        case(&["pause", "bad\nname"], 64, &["\"bad\\nname\"", control]),
        case(&["demote", "bell\u{7}"], 64, &["\"bell\\u{7}\"", control]),
        case(&["handover", "x\ty", "b"], 64, &["\"x\\ty\"", control]),
        case(&["resume", "del\u{7f}"], 64, &["\"del\\u{7f}\"", control]),
        case(&["leader", "", "--json"], 64, &["invalid name \"\""]),
        case(&["watch", "a\rb"], 64, &["\"a\\rb\"", control]),
        case(
            &["history", &long_name],
            64,
            &[&format!("{long_name:?}"), bytes],
        ),
        case(
            &["leader", "x", "--am-i", "a\nb"],
            64,
            &["invalid candidate id \"a\\nb\"", control],
        ),
        case(
            &["handover", "x", "a\tb"],
            64,
            &["invalid candidate id \"a\\tb\"", control],
        ),
        case(
            &["handover", "x", &long_id, "--now"],
            64,
            &[&format!("{long_id:?}"), bytes],
        ),
        case(
            &["--table-prefix", "x;drop", "pause", "x"],
            64,
            &["\"x;drop\"", "^[A-Za-z_][A-Za-z0-9_]{0,40}$"],
        ),
        case(
            &["--table-prefix", "1tenure_", "migrate"],
            64,
            &["\"1tenure_\"", "^[A-Za-z_]"],
        ),
        case(
            &["--table-prefix", &"p".repeat(42), "status"],
            64,
            &[&"p".repeat(42), "{0,40}"],
        ),
        case(
            &["watch", "x", "--interval", "10parsecs"],
            64,
            &["'10parsecs'", "500ms, 10s or 2m"],
        ),
        case(&["history", "x", "--limit", "0"], 64, &["'0'", "1..=10000"]),
    ];
    for c in &cases {
        refused(&mut db.tenure(), c);
    }
    // Usage errors that clap explains at more length (with the usage line): still 64.
    for args in [
        &["history", "x", "--limit", "-5"][..],
        &["leader"],
        &["handover", "x"],
        &["frobnicate", "x"],
        &["--json"],
    ] {
        let out = db.run(args);
        out.expect_code(64);
        assert!(out.stdout.is_empty(), "{out}");
        assert!(out.stderr.starts_with("error: "), "{out}");
    }
    // Nothing connected: no SQLite file, no tables of this prefix.
    if kind == BackendKind::Sqlite {
        assert!(!db.file_exists(), "the SQLite file was created");
    }
    db.assert_untouched("bad input").await;
    for table in ["lease", "history", "schema"] {
        assert_eq!(db.rows(table).await, None, "{table} was created");
    }
}

#[tokio::test]
async fn bad_database_urls_are_refused() {
    let prefix = fresh_prefix();
    let pause = |url: &str| -> Vec<String> {
        [
            "--database-url",
            url,
            "--table-prefix",
            &prefix,
            "pause",
            "x",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let cases = [
        (
            pause("postgres://127.0.0.1:notaport/test"),
            64,
            vec!["postgres://127.0.0.1:notaport/test", "invalid port"],
        ),
        (
            pause("redis://127.0.0.1:6379/0"),
            64,
            vec![
                "redis://127.0.0.1:6379/0",
                "postgres://, mysql://, mariadb:// or sqlite://",
            ],
        ),
        (
            pause("postgres//127.0.0.1/test"),
            64,
            vec!["postgres//127.0.0.1/test", "the scheme must be"],
        ),
        (
            pause("sqlite://"),
            64,
            vec!["invalid database URL sqlite://", "path"],
        ),
        (
            pause("sqlite:?mode=rwc"),
            64,
            vec!["invalid database URL sqlite:?mode=rwc", "path"],
        ),
        // Malformed with a password: the message must not show it, so it names the scheme.
        (
            pause("postgres://app:s3cretpw@[bad/test"),
            64,
            vec!["invalid database URL postgres:"],
        ),
        (
            pause(""),
            64,
            vec!["invalid database URL \"\"", "empty", "postgres://"],
        ),
        (
            pause("postgres://postgres@127.0.0.1:1/test"),
            69,
            vec!["cannot connect to postgres://postgres@127.0.0.1:1/test"],
        ),
        // Unreachable is 69 for `leader --am-i` too, not the 1 of "not the leader".
        (
            [
                "--database-url",
                "postgres://postgres@127.0.0.1:1/test",
                "leader",
                "x",
                "--am-i",
                "a",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            69,
            vec!["cannot connect to postgres://postgres@127.0.0.1:1/test"],
        ),
        (
            pause("mysql://root@127.0.0.1:1/test"),
            69,
            vec!["cannot connect to mysql://root@127.0.0.1:1/test"],
        ),
    ];
    // At once: the unreachable servers take the connect timeout (5 s) each.
    std::thread::scope(|scope| {
        for (args, code, says) in &cases {
            scope.spawn(move || {
                let says = says.iter().map(|s| s.to_string()).collect();
                let out = refused(&mut tenure(), &(args.clone(), *code, says));
                assert!(!out.stderr.contains("s3cretpw"), "password shown:\n{out}");
                assert!(out.took < Duration::from_secs(15), "took {:?}", out.took);
            });
        }
    });

    // An empty URL from the environment.
    refused(
        tenure().env("TENURE_DATABASE_URL", ""),
        &case(&["pause", "x"], 64, &["\"\"", "TENURE_DATABASE_URL"]),
    );

    // Wrong credentials on the MariaDB server: 69, and the password is never shown, not even
    // in trace logs.
    let Some(db) = TestDb::new(BackendKind::MySql).await else {
        return;
    };
    let password = format!("wrongpass{}", token());
    let url = with_password(&db.url, &password);
    for extra in [&[][..], &["-vv", "--log-format", "json"][..]] {
        let mut args = vec!["--database-url", url.as_str()];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["pause", "x"]);
        let out = run(db.tenure().args(&args));
        out.expect_code(69);
        assert!(
            !out.stderr.contains(&password) && !out.stdout.contains(&password),
            "password shown:\n{out}"
        );
        assert!(out.stderr.contains(":***@"), "{out}");
        if extra.is_empty() {
            let lines = out.message_lines();
            assert_eq!(lines.len(), 1, "{out}");
            assert!(lines[0].contains("cannot connect to mysql://"), "{out}");
        }
    }
    db.assert_untouched("wrong password").await;
    assert_eq!(db.rows("schema").await, None);
}

/// `url` with its user's password replaced by `password`.
fn with_password(url: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("scheme");
    let (userinfo, host) = rest.split_once('@').unwrap_or(("root", rest));
    let user = userinfo.split(':').next().unwrap_or("root");
    format!("{scheme}://{user}:{password}@{host}")
}
