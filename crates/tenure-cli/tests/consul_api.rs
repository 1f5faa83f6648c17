//! Consul's API on `tenure serve`, as a real process on SQLite, PostgreSQL and MariaDB:
//!
//! - the leader-election guide's flow verbatim with `curl` (`tests/consul/guide_flow.sh`),
//!   bad input included, and what tenure's own views make of it: the lock is the key's lease
//!   (status, leader, history with the client's address as actor), its `LockIndex` the term,
//!   and the fence statement accepts the holder's session and LockIndex and nobody else's;
//! - a real Consul client, py-consul from PyPI (`tests/consul/py_consul_check.py`): election
//!   with a SIGKILLed leader taking over after TTL + lock-delay, a blocking watcher, Consul's
//!   semaphore recipe, LockIndex rising.
//!
//! - the names rule (issue 35.5): an acquire of a live spreading group's name or shard is
//!   Consul's `false`, with tenure's reason in `X-Tenure-Refused`.
//!
//! curl must be installed. py-consul comes from PyPI (`.ci/run` installs it); without it the
//! client test prints `SKIPPED: …`, unless `TENURE_TEST_REQUIRE_PYCONSUL=1` (set by `.ci/run`).

mod support;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use support::serve::*;
use tenure::consul::{PutMode, Reply as Answered, Request};

// Four tests at once: each waits on its `tenure serve` and its Consul clients (12 tests: 60 s
// two at a time, 34 s four at a time, quiet).
tests_at_once!(4);

per_backend!(
    async guide_flow_with_curl,
    py_consul_client,
    a_stopping_server_leaves,
    a_live_groups_names_are_refused_with_a_reason
);

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/consul")
        .join(name)
}

fn put(server: &Server, path: &str, body: &str) -> Reply {
    http(
        server.addr,
        "PUT",
        path,
        &[("X-Consul-Token", TOKEN)],
        body.as_bytes(),
    )
}

/// Runs the fence statement (`tenure fence-sql`) outside any transaction: one row while
/// `holder` holds `term` of `name`.
async fn fence_holds(db: &Db, name: &str, holder: &str, term: u64) -> bool {
    let sql = db.store.fence_sql().expect("fence sql").to_string();
    let term = i64::try_from(term).expect("a term fits in BIGINT");
    match db.kind {
        BackendKind::Postgres => {
            let pool = sqlx::PgPool::connect(&db.url).await.expect("pg");
            let row = sqlx::query(&sql).bind(name).bind(holder).bind(term);
            let held = row.fetch_optional(&pool).await.expect("fence").is_some();
            pool.close().await;
            held
        }
        BackendKind::MySql => {
            let pool = sqlx::MySqlPool::connect(&db.url).await.expect("mysql");
            let row = sqlx::query(&sql).bind(name).bind(holder).bind(term);
            let held = row.fetch_optional(&pool).await.expect("fence").is_some();
            pool.close().await;
            held
        }
        _ => {
            let pool = sqlx::SqlitePool::connect(&db.url).await.expect("sqlite");
            let row = sqlx::query(&sql).bind(name).bind(holder).bind(term);
            let held = row.fetch_optional(&pool).await.expect("fence").is_some();
            pool.close().await;
            held
        }
    }
}

async fn guide_flow_with_curl(kind: BackendKind) {
    let Some(db) = Db::new(kind).await else {
        return;
    };
    let server = db.serve(&["--ttl", "2s"]);
    let key = "service/guide/leader";
    let output = Command::new("bash")
        .arg(script("guide_flow.sh"))
        .arg(server.url(""))
        .arg(TOKEN)
        .arg(key)
        .output()
        .expect("run bash");
    assert!(
        output.status.success(),
        "the guide's flow failed on {kind}:\n{}{}\n--- server\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        server.stderr()
    );

    // tenure's own views: the lock is the key's lease, its LockIndex the term.
    let entry = server.get(&format!("/v1/kv/{key}")).json();
    let session = entry[0]["Session"].as_str().expect("held").to_string();
    assert_eq!(entry[0]["LockIndex"], 3);
    // tenure's own routes take a name as one path segment: its slashes percent-encoded.
    let name = key.replace('/', "%2F");
    let leader = server.get(&format!("/v1/leader/{name}")).json();
    assert_eq!(leader["leader"]["holder"], session.as_str());
    assert_eq!(leader["leader"]["term"], 3);
    assert_eq!(leader["leader"]["metadata"], "node-1:8080");
    let status = server.get("/v1/status").json();
    let leases = status["leases"].as_array().expect("leases");
    assert!(
        leases
            .iter()
            .any(|l| l["name"] == key && l["holder"] == session.as_str()),
        "/v1/status (the status page's source) shows the Consul-made lock: {status}"
    );
    let history = server.get(&format!("/v1/history/{name}?limit=50")).json();
    let events: Vec<(&str, &str)> = history["events"]
        .as_array()
        .expect("events")
        .iter()
        .map(|e| (e["event"].as_str().unwrap(), e["actor"].as_str().unwrap()))
        .rev()
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e.0).collect();
    assert_eq!(
        kinds,
        ["acquired", "released", "acquired", "released", "acquired"],
        "{history}"
    );
    assert!(events.iter().all(|e| e.1.starts_with("http:127.0.0.1:")));

    // The fence statement works on the Consul lock: holder = session, term = LockIndex.
    assert!(fence_holds(&db, key, &session, 3).await);
    assert!(
        !fence_holds(&db, key, &session, 2).await,
        "an older LockIndex"
    );
    assert!(!fence_holds(&db, key, "someone-else", 3).await);
    let released = put(&server, &format!("/v1/kv/{key}?release={session}"), "");
    assert_eq!(released.text(), "true");
    assert!(
        !fence_holds(&db, key, &session, 3).await,
        "released: the fence refuses"
    );
    // The session is still listed, on this node.
    let sessions = server.get("/v1/session/list").json();
    assert!(sessions
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["ID"] == session.as_str()));
    let node = sessions[0]["Node"].as_str().unwrap().to_string();
    let of_node: Value = server.get(&format!("/v1/session/node/{node}")).json();
    assert!(!of_node.as_array().unwrap().is_empty());
    assert_eq!(
        server
            .get("/v1/session/node/not-this-node")
            .json()
            .as_array()
            .unwrap()
            .len(),
        0
    );
}

fn py_consul_available() -> bool {
    let found = Command::new("python3")
        .args(["-c", "import consul"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        if std::env::var("TENURE_TEST_REQUIRE_PYCONSUL").as_deref() == Ok("1") {
            panic!("py-consul is not installed, and TENURE_TEST_REQUIRE_PYCONSUL=1");
        }
        eprintln!("SKIPPED: py-consul is not installed (pip install py-consul); set TENURE_TEST_REQUIRE_PYCONSUL=1 to make this fail");
    }
    found
}

async fn py_consul_client(kind: BackendKind) {
    if !py_consul_available() {
        return;
    }
    let Some(db) = Db::new(kind).await else {
        return;
    };
    let server = db.serve(&["--ttl", "2s"]);
    let started = Instant::now();
    let output = Command::new("python3")
        .arg(script("py_consul_check.py"))
        .arg(server.addr.ip().to_string())
        .arg(server.addr.port().to_string())
        .arg(TOKEN)
        // Its last check runs `tenure demote` on the server's database.
        .env("TENURE_BIN", env!("CARGO_BIN_EXE_tenure"))
        .env("TENURE_DATABASE_URL", &db.url)
        .env("TENURE_TABLE_PREFIX", &db.prefix)
        .output()
        .expect("run python3");
    eprintln!(
        "py-consul on {kind} took {:?}:\n{}",
        started.elapsed(),
        String::from_utf8_lossy(&output.stdout)
    );
    assert!(
        output.status.success(),
        "py-consul against tenure serve on {kind}:\n{}{}\n--- server\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr),
        server.stderr()
    );
    // The takeover's new leader holds the key's lease with LockIndex 2 as its term.
    let entry = server.get("/v1/kv/service/py-consul/leader").json();
    assert_eq!(entry[0]["LockIndex"], 2);
    assert_eq!(
        db.store
            .get("service/py-consul/leader")
            .await
            .unwrap()
            .leases[0]
            .term,
        2
    );
}

/// A `tenure serve` stopped gracefully leaves like a Consul agent: its sessions without TTL end
/// at once (not a node lease later), their locks released with lock-delay; a TTL session,
/// which does not depend on the node, stays.
async fn a_stopping_server_leaves(kind: BackendKind) {
    let Some(db) = Db::new(kind).await else {
        return;
    };
    // A node lease of 60 s: lapsing would take a minute.
    let mut server = db.serve(&["--ttl", "60s"]);
    let key = "service/leaving/leader";
    let create = |body: &str| {
        let created = put(&server, "/v1/session/create", body);
        assert_eq!(created.status, 200, "{}", created.text());
        created.json()["ID"].as_str().unwrap().to_string()
    };
    let node_bound = create(r#"{"Name": "bound", "LockDelay": "30s"}"#);
    let with_ttl = create(r#"{"Name": "ttl", "TTL": "60s"}"#);
    let acquired = put(&server, &format!("/v1/kv/{key}?acquire={node_bound}"), "me");
    assert_eq!(acquired.text(), "true");

    let status = server.terminate(Duration::from_secs(15)).expect("exits");
    assert!(status.success(), "{status:?}\n{}", server.stderr());

    let consul = tenure::consul::Consul::new(db.store.clone());
    let call = |request: Request| {
        let consul = consul.clone();
        async move {
            consul
                .request(&request, "test")
                .await
                .expect("consul")
                .reply
        }
    };
    let Answered::Sessions(left) = call(Request::Sessions(None)).await else {
        panic!("sessions");
    };
    let ids: Vec<&str> = left.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(
        ids,
        [with_ttl.as_str()],
        "only the TTL session outlives its node"
    );
    let Answered::Entries(entries) = call(Request::Get {
        key: key.into(),
        recurse: false,
    })
    .await
    else {
        panic!("entries");
    };
    assert_eq!(entries[0].session, None, "the lock was released on leaving");
    assert_eq!(db.holder(key).await, None);
    // The lock-delay (30 s) still keeps everyone out.
    let again = call(Request::Put {
        key: key.into(),
        value: b"other".to_vec(),
        flags: 0,
        mode: PutMode::Acquire(with_ttl.clone()),
    })
    .await;
    assert_eq!(again, Answered::Done(false), "within the lock-delay");
}

/// A live spreading group's name and shards are its members' only: Consul's acquire of them
/// is answered `false`, as Consul answers an acquire it cannot grant, with the reason in
/// `X-Tenure-Refused`, and nothing is written; a key beyond the group's shards is granted.
async fn a_live_groups_names_are_refused_with_a_reason(kind: BackendKind) {
    let Some(db) = Db::new(kind).await else {
        return;
    };
    let member = tenure::Spread::new(db.store.clone(), "jobs", 2)
        .unwrap()
        .member("m-1")
        .ttl(Duration::from_secs(4))
        .join()
        .await
        .expect("join");
    let owned = member.owned();
    let started = Instant::now();
    while owned.borrow().len() < 2 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the member took no shard"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let server = db.serve(&[]);
    let created = put(&server, "/v1/session/create", r#"{"Name": "grabber"}"#);
    assert_eq!(created.status, 200, "{}", created.text());
    let session = created.json()["ID"].as_str().unwrap().to_string();
    for key in ["jobs", "jobs/0", "jobs/1"] {
        let refused = put(&server, &format!("/v1/kv/{key}?acquire={session}"), "mine");
        assert_eq!(
            (refused.status, refused.text().as_str()),
            (200, "false"),
            "{key}"
        );
        let reason = refused.header("x-tenure-refused").unwrap_or_default();
        assert!(
            reason.contains(key) && reason.contains("spreading group"),
            "{key}: {reason:?}"
        );
        let got = http(
            server.addr,
            "GET",
            &format!("/v1/kv/{key}"),
            &[("X-Consul-Token", TOKEN)],
            b"",
        );
        assert_eq!(got.status, 404, "{key}: nothing written");
    }
    let granted = put(&server, &format!("/v1/kv/jobs/2?acquire={session}"), "mine");
    assert_eq!(granted.text(), "true");
    assert_eq!(granted.header("x-tenure-refused"), None);
    member.leave().await;
}
