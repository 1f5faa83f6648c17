//! What Consul's clients count on from an agent, as a real `tenure serve` answers it (issue 36,
//! Patroni's Consul DCS): a blocking read of one key waits for that key, not for any change; a
//! session TTL out of range is refused with Consul's status and words, and `/v1/agent/self`
//! tells the minimum; agent endpoints tenure does not have answer 404 saying so.

mod support;

use serde_json::Value;
use std::time::{Duration, Instant};
use support::serve::*;

per_backend!(async a_blocked_key_read_waits_for_its_own_key);

fn put(server: &Server, path: &str, body: &str) -> Reply {
    http(
        server.addr,
        "PUT",
        path,
        &[("X-Consul-Token", TOKEN)],
        body.as_bytes(),
    )
}

fn index_of(reply: &Reply) -> u64 {
    reply
        .header("x-consul-index")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no X-Consul-Index: {:?}", reply.headers))
}

/// Patroni's replicas block on the leader key with that key's own `ModifyIndex`. Another
/// key's writes must not end the wait (the loop of 126 requests a second per replica that an
/// idle cluster made when the store-wide index answered); a write of the key itself ends it
/// at once, with the key's new index.
async fn a_blocked_key_read_waits_for_its_own_key(kind: BackendKind) {
    let Some(db) = Db::new(kind).await else {
        return;
    };
    let server = db.serve(&["--ttl", "2s", "--poll-interval", "100ms"]);
    assert_eq!(put(&server, "/v1/kv/svc/leader", "node-1").status, 200);
    assert_eq!(put(&server, "/v1/kv/svc/status", "1").status, 200);
    let first = server.get("/v1/kv/svc/leader");
    let leader_index = index_of(&first);
    let entries: Value = first.json();
    assert_eq!(entries[0]["ModifyIndex"].as_u64(), Some(leader_index));

    // Other keys change during the wait: it still runs its whole 2 s, and answers the same.
    let addr = server.addr;
    let waited = std::thread::spawn(move || {
        let started = Instant::now();
        let reply = http(
            addr,
            "GET",
            &format!("/v1/kv/svc/leader?index={leader_index}&wait=2s"),
            &[],
            b"",
        );
        (started.elapsed(), reply)
    });
    for i in 0..5 {
        assert_eq!(
            put(&server, "/v1/kv/svc/status", &i.to_string()).status,
            200
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let (took, reply) = waited.join().expect("the waiting client");
    assert_eq!(reply.status, 200);
    assert_eq!(
        index_of(&reply),
        leader_index,
        "the leader key did not change"
    );
    assert!(
        took >= Duration::from_secs(2),
        "the wait ended after {took:?} though only another key changed"
    );

    // The key itself changes: the waiting read answers at once with its new index.
    let waited = std::thread::spawn(move || {
        let started = Instant::now();
        let reply = http(
            addr,
            "GET",
            &format!("/v1/kv/svc/leader?index={leader_index}&wait=60s"),
            &[],
            b"",
        );
        (started.elapsed(), reply)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(put(&server, "/v1/kv/svc/leader", "node-2").status, 200);
    let (took, reply) = waited.join().expect("the waiting client");
    assert!(index_of(&reply) > leader_index);
    let entries: Value = reply.json();
    assert_eq!(entries[0]["Value"], "bm9kZS0y", "node-2, base64");
    assert!(
        took < Duration::from_secs(50),
        "the key's own change ended the wait ({took:?})"
    );
}

/// Patroni at `ttl: 10` asks for a 5 s session. Consul refuses a TTL below its minimum with a
/// 500 whose text Patroni matches ("Invalid Session TTL"), and Patroni then reads the minimum
/// from `/v1/agent/self` (`Config.SessionTTLMin`, nanoseconds); with the minimum lowered
/// (`--session-ttl-min`), the session is created and lives twice its TTL.
#[tokio::test]
async fn a_session_ttl_out_of_range_is_refused_as_consul_refuses_it() {
    let Some(db) = Db::new(BackendKind::Sqlite).await else {
        return;
    };
    let server = db.serve(&[]);
    let body = r#"{"ttl": "5.0s", "behavior": "delete", "lockdelay": "0.001s", "checks": []}"#;
    let refused = put(&server, "/v1/session/create", body);
    assert_eq!(refused.status, 500, "{}", refused.text());
    assert_eq!(
        refused.text(),
        "Invalid Session TTL '5000000000', must be between [10s=24h0m0s]"
    );
    let me: Value = server.get("/v1/agent/self").json();
    assert_eq!(me["Config"]["SessionTTLMin"], 10_000_000_000u64);
    assert_eq!(me["DebugConfig"]["SessionTTLMin"], "10s");

    let register = put(&server, "/v1/agent/service/register", r#"{"Name": "pg"}"#);
    assert_eq!(register.status, 404);
    assert!(
        register.text().contains("service registration"),
        "{}",
        register.text()
    );
    drop(server);

    let server = db.serve(&["--session-ttl-min", "5s"]);
    let me: Value = server.get("/v1/agent/self").json();
    assert_eq!(me["Config"]["SessionTTLMin"], 5_000_000_000u64);
    let created = put(&server, "/v1/session/create", body);
    assert_eq!(created.status, 200, "{}", created.text());
    let id = created.json()["ID"].as_str().expect("an ID").to_string();
    let info: Value = server.get(&format!("/v1/session/info/{id}")).json();
    assert_eq!(info[0]["TTL"], "5s");
    assert_eq!(info[0]["Behavior"], "delete");
}

/// `--session-ttl-min` below the database timeout is refused at start, naming both.
#[test]
fn a_session_ttl_min_below_the_database_timeout_is_refused() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_tenure"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--session-ttl-min",
            "1s",
        ])
        .args(["--database-url", "sqlite::memory:"])
        .output()
        .expect("tenure serve");
    assert_eq!(output.status.code(), Some(64));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--session-ttl-min 1s") && stderr.contains("2s"),
        "{stderr}"
    );
}
