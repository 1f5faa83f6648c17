//! The admin commands `demote`, `handover`, `pause` and `resume`: their `--json` answers, and
//! that each takes effect on the next campaigns.

use crate::support::*;
use crate::{acquired, assert_live_remaining, campaign, renew, term, LEASE_KEYS, TTL_MS};
use serde_json::{json, Value};
use std::time::Duration;
use tenure::{Effect, StepDownReason};

crate::per_backend!(
    async admin_actions_take_effect,
);

/// Runs an admin command with `--json` and checks the answer's shape; returns its lease.
pub(crate) fn admin_json(
    db: &TestDb,
    args: &[&str],
    action: &str,
    changed: bool,
    effect: &str,
) -> Value {
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

    // handover: refused while the target is no live candidate of the name (these campaigns
    // do not register), accepted with --unregistered; the leader keeps leading until it steps
    // down; then only the target may start.
    let name = unique("handover");
    assert!(acquired(
        &campaign(&store, &name, &a, TTL_MS, Some("meta-a")).await
    ));
    let out = db.run(&["handover", &name, &b]);
    out.expect_code(64);
    assert!(
        out.stderr.contains(&format!("\"{b}\"")) && out.stderr.contains("--unregistered"),
        "{out}"
    );
    let lease = admin_json(
        &db,
        &["handover", &name, &b, "--unregistered"],
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
        &["handover", &name, &b, "--unregistered"],
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
    let out = db.run(&["handover", &name, &b, "--now", "--unregistered", "--json"]);
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
