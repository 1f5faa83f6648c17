//! `tenure watch --json`: one line per change of a lease, and nothing else.

use crate::support::*;
use crate::{acquired, assert_live_remaining, campaign, renew, LEASE_KEYS, TTL_MS};
use serde_json::{json, Value};
use std::time::Duration;
use tenure::Effect;

crate::per_backend!(
    async watch_prints_one_json_line_per_change,
);

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
