//! `tenure status`: every name with its state, in JSON and as a table.

use crate::support::*;
use crate::{acquired, assert_live_remaining, campaign, LEASE_KEYS, TTL_MS};
use serde_json::{json, Value};

crate::per_backend!(
    async status_json_and_table,
);

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
        let mut keys = LEASE_KEYS.to_vec();
        keys.push("live");
        assert_keys(l, &keys);
        // Leases written without an elector have no registered candidates.
        assert_eq!(l["live"], json!({"candidates": 0, "observers": 0}));
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
        [
            "NAME",
            "HOLDER",
            "TERM",
            "SINCE",
            "LEFT",
            "PAUSED",
            "HANDOVER",
            "CANDIDATES"
        ]
    );
    let cols = |i: usize| -> Vec<&str> { lines[i + 1].split_whitespace().collect() };
    for i in 0..4 {
        let row = cols(i);
        assert_eq!(row.len(), 8, "{}", lines[i + 1]);
        assert_eq!(row[7], "0", "no registered candidates");
        assert_eq!(row[0], names[i]);
        assert_eq!(row[2], "1");
        assert_eq!(row[3], db_time(snapshot.leases[i].acquired_at));
    }
    assert_eq!(cols(0)[1], holders[0]);
    assert!(cols(0)[4].ends_with('s'), "time left: {}", lines[1]);
    assert_eq!(cols(0)[5..7], ["no", "-"]);
    assert_eq!(cols(1)[5..7], ["yes", "-"]);
    assert_eq!(cols(2)[5..7], ["no", target.as_str()]);
    assert_eq!(cols(3)[1], "-");
    assert_eq!(cols(3)[4..7], ["-", "no", "-"]);
    db.drop_tables().await;
}
