//! etcd's JSON gateway as Patroni's `etcd3` DCS uses it (Debian's patroni 3.0.2,
//! `patroni/dcs/etcd3.py`: the same paths, bodies and fields), and as curl users do.

use crate::side_by_side;
use crate::support::etcd::*;
use serde_json::{json, Value};
use std::time::Duration;

side_by_side!(
    patroni_calls,
    watch_stream,
    errors,
    recipes_and_leases_over_json
);

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A POST whose answer must be 200 and JSON, recorded.
fn call(t: &mut Transcript, target: &Target, path: &str, body: &Value) -> Value {
    let reply = target.post(path, &body.to_string());
    let answer = reply.json();
    t.record_json(&format!("{path} {}", reply.status), &answer);
    answer
}

fn patroni_calls(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    t.alias(target.url(), "ENDPOINT");
    // What Patroni asks first, to choose its paths (/v3 from 3.4 on).
    let version = crate::support::serve::http(target.addr, "GET", "/version", &[], b"").json();
    t.record("etcdcluster", version["etcdcluster"].to_string());
    let members = target.post("/v3/cluster/member/list", "{}").json();
    t.record(
        "member clientURLs",
        members["members"][0]["clientURLs"].to_string(),
    );
    let grant = target
        .post("/v3/lease/grant", &json!({"TTL": 30}).to_string())
        .json();
    let id = grant["ID"].as_str().expect("a lease id").to_string();
    t.alias(id.clone(), "LEASE");
    t.record_json("grant", &grant);
    let (cluster, leader) = (b64("/service/pg/"), b64("/service/pg/leader"));
    let init = json!({"compare": [{"target": "CREATE", "create_revision": 0, "key": b64("/service/pg/initialize")}],
        "success": [{"request_put": {"key": b64("/service/pg/initialize"), "value": b64("7100")}}]});
    call(&mut t, target, "/v3/kv/txn", &init);
    call(&mut t, target, "/v3/kv/txn", &init);
    // take_leader: a put with the lease; attempt_to_acquire_leader: create_revision 0.
    let acquire = json!({"compare": [{"target": "CREATE", "create_revision": 0, "key": leader}],
        "success": [{"request_put": {"key": leader, "value": b64("pg-0"), "lease": id}}]});
    call(&mut t, target, "/v3/kv/txn", &acquire);
    call(&mut t, target, "/v3/kv/txn", &acquire);
    call(
        &mut t,
        target,
        "/v3/kv/put",
        &json!({"key": b64("/service/pg/members/pg-0"), "value": b64("{\"state\":\"running\"}"), "lease": id}),
    );
    let range = call(
        &mut t,
        target,
        "/v3/kv/range",
        &json!({"key": cluster, "range_end": b64("/service/pg0"), "serializable": true}),
    );
    let leader_rev = range["kvs"]
        .as_array()
        .and_then(|kvs| kvs.iter().find(|kv| kv["key"] == leader.as_str()))
        .map(|kv| kv["mod_revision"].clone())
        .expect("the leader key");
    // update_leader: keepalive, then a put guarded by the leader's mod revision.
    let alive = target.post("/v3/lease/keepalive", &json!({"ID": id}).to_string());
    let alive = alive.json();
    t.record("keepalive TTL", alive["result"]["TTL"].to_string());
    let cas = json!({"compare": [{"target": "MOD", "mod_revision": leader_rev, "key": leader}],
        "success": [{"request_put": {"key": leader, "value": b64("pg-0"), "lease": id}}]});
    call(&mut t, target, "/v3/kv/txn", &cas);
    call(&mut t, target, "/v3/kv/txn", &cas);
    // delete_leader: a delete guarded by the mod revision.
    let now = target
        .post("/v3/kv/range", &json!({"key": leader}).to_string())
        .json();
    let del = json!({"compare": [{"target": "MOD", "mod_revision": now["kvs"][0]["mod_revision"], "key": leader}],
        "success": [{"request_delete_range": {"key": leader}}]});
    call(&mut t, target, "/v3/kv/txn", &del);
    call(
        &mut t,
        target,
        "/v3/kv/deleterange",
        &json!({"key": cluster, "range_end": b64("/service/pg0")}),
    );
    call(
        &mut t,
        target,
        "/v3beta/kv/range",
        &json!({"key": cluster, "range_end": b64("/service/pg0")}),
    );
    call(&mut t, target, "/v3/lease/revoke", &json!({"ID": id}));
    t
}

fn watch_stream(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    let prefix = b64("/service/w/");
    let rev = target
        .post("/v3/kv/range", &json!({"key": prefix}).to_string())
        .json();
    let rev: i64 = rev["header"]["revision"]
        .as_str()
        .and_then(|r| r.parse().ok())
        .expect("revision");
    let watch = GatewayStream::open(
        target.addr,
        "/v3/watch",
        &json!({"create_request": {"key": prefix, "range_end": b64("/service/w0"),
            "start_revision": rev + 1, "filters": []}})
        .to_string(),
    );
    t.record("status", watch.status.to_string());
    let within = Duration::from_secs(10);
    let created = watch.next(within).expect("created");
    t.record_json("created", &created);
    // The writes' answers are recorded too: a missing event then shows its revision.
    for (key, value) in [
        ("/service/w/a", "1"),
        ("/service/w/b", "2"),
        ("/service/x", "3"),
    ] {
        let put = json!({"key": b64(key), "value": b64(value)});
        call(&mut t, target, "/v3/kv/put", &put);
    }
    let txn = json!({"success": [{"request_put": {"key": b64("/service/w/c"), "value": b64("4")}},
        {"request_delete_range": {"key": b64("/service/w/a")}}]});
    call(&mut t, target, "/v3/kv/txn", &txn);
    for what in ["put a", "put b", "a txn: one response"] {
        let event = watch.next_or_why(within).unwrap_or_else(|why| {
            panic!(
                "{}: no watch event for {what} ({why}); seen:\n{}\n--- the server's log\n{}",
                target.label,
                t.lines.join("\n"),
                target.log()
            )
        });
        t.record_json(what, &event);
    }
    // A keepalive stream through the gateway ends with its request body.
    let grant = target
        .post("/v3/lease/grant", &json!({"TTL": 20}).to_string())
        .json();
    let id = grant["ID"].as_str().expect("id").to_string();
    t.alias(id.clone(), "LEASE");
    let alive = GatewayStream::open(
        target.addr,
        "/v3/lease/keepalive",
        &json!({"ID": id}).to_string(),
    );
    for line in alive.rest(within) {
        t.record_json("keepalive", &line);
    }
    t
}

fn errors(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    for (path, body) in [
        ("/v3/lease/revoke", json!({"ID": 1234}).to_string()),
        (
            "/v3/kv/range",
            json!({"key": b64("k"), "revision": 1000}).to_string(),
        ),
        ("/v3/kv/range", "{}".to_string()),
        ("/v3/kv/range", String::new()),
        (
            "/v3/kv/put",
            json!({"key": b64("k"), "value": b64("v"), "lease": "77"}).to_string(),
        ),
        (
            "/v3/auth/authenticate",
            json!({"name": "root", "password": "x"}).to_string(),
        ),
        ("/v3/kv/range", r#"{"key":"Zm9v","bogus":1}"#.to_string()),
        (
            "/v3/kv/range",
            r#"{"key":"Zm9v"} {"key":"YQ=="}"#.to_string(),
        ),
    ] {
        let reply = target.post(path, &body);
        t.record_json(&format!("{path} {body} → {}", reply.status), &reply.json());
    }
    // Malformed JSON: etcd's texts are Go's decoder's, ours serde's: the status and code agree.
    for (path, body) in [
        ("/v3/kv/range", r#"{"key":"#),
        ("/v3/kv/range", "[1]"),
        ("/v3/kv/range", r#"{"key":"!!!"}"#),
    ] {
        let reply = target.post(path, body);
        t.record(
            &format!("{path} {body}"),
            format!("{} code {}", reply.status, reply.json()["code"]),
        );
    }
    let watch = GatewayStream::open(target.addr, "/v3/watch", "x");
    t.record("malformed watch", watch.status.to_string());
    let keepalive = GatewayStream::open(
        target.addr,
        "/v3/lease/keepalive",
        &json!({"ID": 5}).to_string(),
    );
    for line in keepalive.rest(Duration::from_secs(10)) {
        t.record_json("keepalive of an unknown lease", &line);
    }
    let reply = crate::support::serve::http(target.addr, "GET", "/v3/kv/range", &[], b"");
    t.record("GET on a POST route", reply.status.to_string());
    let reply = target.post("/v3/nope", "{}");
    t.record(
        "unknown path",
        format!("{} {}", reply.status, reply.text().trim()),
    );
    t
}

/// The Lock and Election services, TimeToLive, Leases and Compact over the gateway (etcd
/// serves them at `/v3/lock/*`, `/v3/election/*`, `/v3/lease/*`, `/v3/kv/compaction`).
fn recipes_and_leases_over_json(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    let grant = target
        .post("/v3/lease/grant", &json!({"TTL": 30}).to_string())
        .json();
    let id = grant["ID"].as_str().expect("a lease id").to_string();
    let hex = format!("{:x}", id.parse::<i64>().expect("a number"));
    t.alias(id.clone(), "LEASE");
    t.alias(b64(&format!("job/{hex}")), "LOCK_KEY");
    t.alias(b64(&format!("boss/{hex}")), "LEADER_KEY");
    let locked = call(
        &mut t,
        target,
        "/v3/lock/lock",
        &json!({"name": b64("job"), "lease": id}),
    );
    // What is left of the TTL depends on the second it is read in: checked, not compared.
    let mut ttl = target
        .post(
            "/v3/lease/timetolive",
            &json!({"ID": id, "keys": true}).to_string(),
        )
        .json();
    let left: i64 = ttl["TTL"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1);
    assert!((25..=30).contains(&left), "{ttl}");
    ttl["TTL"] = json!("…");
    t.record_json("/v3/lease/timetolive", &ttl);
    call(
        &mut t,
        target,
        "/v3/lock/unlock",
        &json!({"key": locked["key"]}),
    );
    let won = call(
        &mut t,
        target,
        "/v3/election/campaign",
        &json!({"name": b64("boss"), "lease": id, "value": b64("alpha")}),
    );
    let leader = won["leader"].clone();
    call(
        &mut t,
        target,
        "/v3/election/leader",
        &json!({"name": b64("boss")}),
    );
    call(
        &mut t,
        target,
        "/v3/election/proclaim",
        &json!({"leader": leader, "value": b64("beta")}),
    );
    let observed = GatewayStream::open(
        target.addr,
        "/v3/election/observe",
        &json!({"name": b64("boss")}).to_string(),
    );
    let first = observed.next(Duration::from_secs(10)).expect("the leader");
    t.record_json("observe", &first);
    drop(observed);
    call(
        &mut t,
        target,
        "/v3/election/resign",
        &json!({"leader": leader}),
    );
    let none = target.post(
        "/v3/election/leader",
        &json!({"name": b64("boss")}).to_string(),
    );
    t.record(&format!("leader of nobody {}", none.status), none.text());
    let leases = target.post("/v3/lease/leases", "{}").json();
    t.record(
        "leases",
        leases["leases"].as_array().map_or(0, Vec::len).to_string(),
    );
    call(&mut t, target, "/v3/kv/compaction", &json!({"revision": 2}));
    let compacted = target.post(
        "/v3/kv/range",
        &json!({"key": b64("a"), "revision": 1}).to_string(),
    );
    t.record(
        &format!("below the floor {}", compacted.status),
        compacted.text(),
    );
    t
}
