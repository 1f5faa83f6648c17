//! `tenure leader`: the holder, its term and time left, in JSON and for people, and `--am-i`.

use crate::support::*;
use crate::{acquired, assert_live_remaining, campaign, TTL_MS};
use serde_json::{json, Value};
use std::time::Duration;
use tenure::Effect;

crate::per_backend!(
    async leader_json_and_am_i,
);

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
