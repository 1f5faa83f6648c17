//! The router driven in process: with `oneshot` (no socket) for the API's answers, and on a real
//! loopback socket for the thousand waiting clients, whose database reads are counted by a
//! [`CountingBackend`] around the real one.
//!
//! SQLite always; PostgreSQL and MariaDB where `TENURE_TEST_POSTGRES_URL` /
//! `TENURE_TEST_MYSQL_URL` (default the local servers) answer, with a fresh table prefix per
//! test. An unreachable server prints `SKIPPED: …`, or fails under `CI=true`.

use super::*;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use serde_json::{json, Value};
use std::time::Instant;
use tenure::backend::{Backend, CountingBackend};
use tenure::{Applied, BackendKind};
use tenure::{Op, StoreOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

// === test databases ===

#[path = "../../tests/support/databases.rs"]
mod databases;

/// One test's database: the backend (tables created), counted, and how to clean up.
struct TestDb {
    kind: BackendKind,
    url: String,
    prefix: String,
    /// The real backend, for setup and checks that must not be counted.
    inner: Arc<dyn Backend>,
    /// The real backend, with every call counted: what the router is given.
    counting: Arc<CountingBackend>,
    _dir: tempfile::TempDir,
}

impl TestDb {
    async fn new(kind: BackendKind) -> Option<TestDb> {
        let dir = tempfile::tempdir().expect("temp dir");
        let prefix = databases::fresh_prefix();
        let url = databases::url_for(kind, dir.path());
        let options = StoreOptions::default()
            .table_prefix(prefix.clone())
            .timeout(Duration::from_secs(5));
        let inner = match tenure::backend::connect(&url, &options).await {
            Ok(b) => b,
            Err(e) => return databases::unreachable(kind, e),
        };
        Some(TestDb {
            kind,
            url,
            prefix,
            counting: Arc::new(CountingBackend::new(inner.clone())),
            inner,
            _dir: dir,
        })
    }

    /// A store whose reads are counted.
    fn store(&self) -> Store {
        Store::from_backend(self.counting.clone(), Duration::from_secs(5))
    }

    /// Writes through the real backend, uncounted.
    async fn campaign(&self, name: &str, who: &str, ttl_ms: u64) -> Applied {
        let op = databases::campaign_op(who, ttl_ms);
        self.inner.apply(name, &op, who).await.expect("campaign")
    }

    async fn apply(&self, name: &str, op: Op) -> Applied {
        self.inner.apply(name, &op, "test").await.expect("apply")
    }

    async fn drop_tables(&self) {
        databases::drop_tables(self.kind, &self.url, &self.prefix).await;
    }
}

// === helpers ===

const TOKEN: &str = "test-token-0123456789";

fn state(db: &TestDb, poll: Duration, campaigns: BTreeMap<String, Campaign>) -> AppState {
    let store = db.store();
    AppState::new(Shared {
        watcher: Watcher::spawn(store.clone(), poll),
        store,
        campaigns,
        token: Some(Token::new(TOKEN).unwrap()),
        metrics: None,
        max_wait: Duration::from_secs(600),
        consul: ConsulNode::spawn(
            db.store(),
            "test-node".into(),
            Duration::from_secs(10),
            Duration::from_millis(100),
        ),
    })
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: Value,
}

impl Reply {
    fn index(&self) -> u64 {
        self.headers
            .get("x-tenure-index")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no X-Tenure-Index in {:?}", self.headers))
    }
}

async fn call(app: &Router, request: Request<Body>) -> Reply {
    let response = app.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    Reply {
        status,
        headers,
        body,
    }
}

async fn get(app: &Router, uri: &str) -> Reply {
    call(app, Request::get(uri).body(Body::empty()).unwrap()).await
}

fn post(uri: &str, token: Option<&str>, body: impl Into<Body>) -> Request<Body> {
    let mut request = Request::builder().method(Method::POST).uri(uri);
    if let Some(t) = token {
        request = request.header("authorization", format!("Bearer {t}"));
    }
    request.body(body.into()).unwrap()
}

/// Panics unless `reply` is `status` with a JSON error mentioning `needle`.
fn assert_error(reply: &Reply, status: StatusCode, needle: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    let message = reply.body["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no JSON error: {}", reply.body));
    assert!(message.contains(needle), "{message:?} lacks {needle:?}");
}

/// One `#[tokio::test]` per backend.
macro_rules! on_every_backend {
    ($($test:ident),* $(,)?) => {
        on_every_backend!(@ sqlite, BackendKind::Sqlite, $($test),*);
        on_every_backend!(@ postgres, BackendKind::Postgres, $($test),*);
        on_every_backend!(@ mysql, BackendKind::MySql, $($test),*);
    };
    (@ $module:ident, $kind:expr, $($test:ident),*) => {
        mod $module {
            use super::*;
            $(
                #[tokio::test]
                async fn $test() {
                    if let Some(db) = TestDb::new($kind).await {
                        super::$test(&db).await;
                        db.drop_tables().await;
                    }
                }
            )*
        }
    };
}

on_every_backend!(
    reads_answer_in_json_with_an_index,
    blocking_queries_answer_on_change_or_at_the_wait,
    admin_calls_need_the_token_and_are_recorded,
    thousand_waiting_clients_share_the_reads,
);

// === reads ===

async fn reads_answer_in_json_with_an_index(db: &TestDb) {
    db.campaign("alpha", "node-a", 30_000).await;
    let app = app(state(db, Duration::from_millis(50), BTreeMap::new()));
    assert!(app_state_ready(&app).await);

    let status = get(&app, "/v1/status").await;
    assert_eq!(status.status, StatusCode::OK);
    assert_eq!(status.body["index"], status.index());
    let leases = status.body["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0]["holder"], "node-a");
    assert_eq!(leases[0]["term"], 1);

    let one = get(&app, "/v1/status/alpha").await;
    assert_eq!(one.status, StatusCode::OK);
    assert_eq!(one.body["lease"]["name"], "alpha");
    let left = one.body["lease"]["remaining_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 30_000, "{left}");

    let leader = get(&app, "/v1/leader/alpha").await;
    assert_eq!(leader.status, StatusCode::OK);
    assert_eq!(leader.body["leader"]["holder"], "node-a");
    assert_eq!(leader.body["leader"]["term"], 1);

    let history = get(&app, "/v1/history/alpha?limit=5").await;
    assert_eq!(history.status, StatusCode::OK);
    assert_eq!(history.body["events"][0]["event"], "acquired");
    assert_eq!(history.body["events"][0]["actor"], "node-a");

    // Unknown names, bad names, bad parameters, unknown paths and methods.
    for uri in ["/v1/status/beta", "/v1/leader/beta", "/v1/history/beta"] {
        assert_error(&get(&app, uri).await, StatusCode::NOT_FOUND, "\"beta\"");
    }
    assert_error(
        &get(&app, "/v1/status/a%01b").await,
        StatusCode::BAD_REQUEST,
        "control",
    );
    let long = "n".repeat(192);
    assert_error(
        &get(&app, &format!("/v1/leader/{long}")).await,
        StatusCode::BAD_REQUEST,
        "191",
    );
    assert_error(
        &get(&app, "/v1/status?index=-1").await,
        StatusCode::BAD_REQUEST,
        "\"-1\"",
    );
    assert_error(
        &get(&app, "/v1/status?index=1&wait=forever").await,
        StatusCode::BAD_REQUEST,
        "\"forever\"",
    );
    assert_error(
        &get(&app, "/v1/history/alpha?limit=0").await,
        StatusCode::BAD_REQUEST,
        "\"0\"",
    );
    assert_error(
        &get(&app, "/v1/nothing").await,
        StatusCode::NOT_FOUND,
        "/v1/nothing",
    );
    let delete = call(
        &app,
        Request::delete("/v1/status").body(Body::empty()).unwrap(),
    )
    .await;
    assert_error(&delete, StatusCode::METHOD_NOT_ALLOWED, "method");
    assert!(delete.headers.contains_key("allow"));

    // Health, the page and the description are served.
    let health = get(&app, "/health").await;
    assert_eq!(
        (health.status, &health.body["status"]),
        (StatusCode::OK, &json!("ok"))
    );
    let page = app
        .clone()
        .oneshot(Request::get("/").body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let openapi = get(&app, "/openapi.json").await;
    assert_eq!(openapi.body["openapi"], "3.0.3");
}

async fn app_state_ready(app: &Router) -> bool {
    for _ in 0..100 {
        if get(app, "/health").await.status == StatusCode::OK {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// Every route of the router is described in `openapi.json`, and nothing else is.
#[tokio::test]
async fn openapi_describes_every_route() {
    let doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
    let mut described: Vec<String> = doc["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |method| format!("{} {path}", method.to_uppercase()))
        })
        .collect();
    described.sort();
    let mut routes: Vec<String> = ROUTES.iter().map(|r| r.to_string()).collect();
    routes.sort();
    assert_eq!(described, routes);
}

/// The routes `app` serves (kept beside the router; checked against it below).
const ROUTES: &[&str] = &[
    "GET /",
    "GET /openapi.json",
    "GET /health",
    "GET /metrics",
    "GET /v1/status",
    "GET /v1/status/{name}",
    "GET /v1/leader/{name}",
    "GET /v1/history/{name}",
    "GET /v1/self",
    "GET /v1/self/{name}",
    "GET /v1/leader-check/{name}",
    "POST /v1/demote/{name}",
    "POST /v1/handover/{name}",
    "POST /v1/pause/{name}",
    "POST /v1/resume/{name}",
    "PUT /v1/session/create",
    "PUT /v1/session/renew/{id}",
    "PUT /v1/session/destroy/{id}",
    "GET /v1/session/info/{id}",
    "GET /v1/session/list",
    "GET /v1/session/node/{node}",
    "GET /v1/kv/",
    "DELETE /v1/kv/",
    "GET /v1/kv/{key}",
    "PUT /v1/kv/{key}",
    "DELETE /v1/kv/{key}",
];

/// Every route in [`ROUTES`] exists in the router (not a 404 from the fallback), and a path
/// beside them does not.
#[tokio::test]
async fn the_route_list_matches_the_router() {
    let db = TestDb::new(BackendKind::Sqlite).await.unwrap();
    let app = app(state(&db, Duration::from_millis(50), BTreeMap::new()));
    for route in ROUTES {
        let (method, path) = route.split_once(' ').unwrap();
        let uri = ["{name}", "{id}", "{node}", "{key}"]
            .iter()
            .fold(path.to_string(), |uri, p| uri.replace(p, "x"));
        let request = Request::builder()
            .method(method)
            .uri(&uri)
            .body(Body::empty())
            .unwrap();
        let reply = call(&app, request).await;
        let fallback = reply.body["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("no such endpoint"));
        assert!(!fallback, "{route} is not routed: {}", reply.body);
    }
    let reply = get(&app, "/v1/statuses").await;
    assert!(reply.body["error"]
        .as_str()
        .unwrap()
        .starts_with("no such endpoint"));
}

// === blocking queries ===

async fn blocking_queries_answer_on_change_or_at_the_wait(db: &TestDb) {
    db.campaign("alpha", "node-a", 30_000).await;
    db.campaign("beta", "node-b", 30_000).await;
    let app = app(state(db, Duration::from_millis(50), BTreeMap::new()));
    assert!(app_state_ready(&app).await);
    let first = get(&app, "/v1/status/alpha").await;
    let index = first.index();

    // Nothing changes: the answer comes at the wait, with the same index.
    let started = Instant::now();
    let same = get(&app, &format!("/v1/status/alpha?index={index}&wait=400ms")).await;
    let took = started.elapsed();
    assert_eq!(same.status, StatusCode::OK);
    assert_eq!(same.index(), index);
    assert!(
        took >= Duration::from_millis(400),
        "answered after {took:?}"
    );
    assert!(
        took < Duration::from_millis(2000),
        "answered after {took:?}"
    );

    // Another name changing does not wake a query on alpha, but does wake one on the list.
    let on_alpha = {
        let app = app.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = get(&app, &format!("/v1/status/alpha?index={index}&wait=1500ms")).await;
            (r, started.elapsed())
        })
    };
    let on_list = {
        let app = app.clone();
        let list_index = get(&app, "/v1/status").await.index();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = get(&app, &format!("/v1/status?index={list_index}&wait=5s")).await;
            (r, started.elapsed(), list_index)
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    db.apply("beta", Op::Demote { immediate: true }).await;
    let (list, list_took, list_index) = on_list.await.unwrap();
    assert!(list.index() > list_index);
    assert!(
        list_took < Duration::from_secs(2),
        "list answered after {list_took:?}"
    );
    let beta = list.body["leases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "beta")
        .unwrap()
        .clone();
    assert_eq!(beta["holder"], Value::Null);
    let (alpha, alpha_took) = on_alpha.await.unwrap();
    assert_eq!(alpha.index(), index);
    assert!(
        alpha_took >= Duration::from_millis(1500),
        "alpha answered after {alpha_took:?}"
    );

    // alpha changes: a query on it answers soon after, with the new state.
    let waiting = {
        let app = app.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let r = get(&app, &format!("/v1/status/alpha?index={index}&wait=10s")).await;
            (r, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    db.apply("alpha", Op::Demote { immediate: true }).await;
    db.campaign("alpha", "node-c", 30_000).await;
    let (moved, took) = waiting.await.unwrap();
    assert!(moved.index() > index);
    assert!(took < Duration::from_secs(2), "answered after {took:?}");
    // Both changes may land in one read, or the demote alone first.
    let holder = &moved.body["lease"]["holder"];
    assert!(holder.is_null() || holder == "node-c", "{}", moved.body);

    // An index from the future (a restarted server) answers at once.
    let started = Instant::now();
    let future = get(
        &app,
        &format!("/v1/status/alpha?index={}&wait=10s", index + 1000),
    )
    .await;
    assert_eq!(future.status, StatusCode::OK);
    assert!(started.elapsed() < Duration::from_secs(1));
}

// === admin ===

async fn admin_calls_need_the_token_and_are_recorded(db: &TestDb) {
    db.campaign("alpha", "node-a", 30_000).await;
    let state = state(db, Duration::from_millis(50), BTreeMap::new());
    let app = app(state.clone());

    let none = call(&app, post("/v1/demote/alpha", None, "")).await;
    assert_error(&none, StatusCode::UNAUTHORIZED, "Bearer");
    assert_eq!(none.headers["www-authenticate"], "Bearer realm=\"tenure\"");
    let wrong = call(
        &app,
        post("/v1/demote/alpha", Some("test-token-012345678"), ""),
    )
    .await;
    assert_error(&wrong, StatusCode::UNAUTHORIZED, "wrong");
    let leader = get(&app, "/v1/leader/alpha").await;
    assert_eq!(
        leader.body["leader"]["holder"], "node-a",
        "a refused call changed nothing"
    );

    // Bad bodies and unknown names; nothing changes.
    let bad = call(
        &app,
        post("/v1/demote/alpha", Some(TOKEN), r#"{"immediate":"yes"}"#),
    )
    .await;
    assert_error(&bad, StatusCode::BAD_REQUEST, "JSON");
    let extra = call(&app, post("/v1/pause/alpha", Some(TOKEN), r#"{"x":1}"#)).await;
    assert_error(&extra, StatusCode::BAD_REQUEST, "unknown field");
    let no_target = call(&app, post("/v1/handover/alpha", Some(TOKEN), "")).await;
    assert_error(&no_target, StatusCode::BAD_REQUEST, "JSON body");
    for action in ["demote", "pause", "resume"] {
        let unknown = call(&app, post(&format!("/v1/{action}/ghost"), Some(TOKEN), "")).await;
        assert_error(&unknown, StatusCode::NOT_FOUND, "\"ghost\"");
    }
    let unknown = call(
        &app,
        post("/v1/handover/ghost", Some(TOKEN), r#"{"to":"x"}"#),
    )
    .await;
    assert_error(&unknown, StatusCode::NOT_FOUND, "\"ghost\"");
    assert!(
        db.inner.get("ghost").await.unwrap().leases.is_empty(),
        "ghost was created"
    );

    // Oversized bodies: announced, or sent without a length.
    let big = vec![b' '; MAX_BODY_BYTES + 1];
    let announced = Request::builder()
        .method(Method::POST)
        .uri("/v1/demote/alpha")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-length", big.len())
        .body(Body::from(big.clone()))
        .unwrap();
    assert_error(
        &call(&app, announced).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "too large",
    );
    let unannounced = post("/v1/demote/alpha", Some(TOKEN), big);
    assert_error(
        &call(&app, unannounced).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "too large",
    );
    let leader = get(&app, "/v1/leader/alpha").await;
    assert_eq!(leader.body["leader"]["holder"], "node-a");

    // With the token: pause, resume, handover, demote, each in the history with the actor.
    let paused = call(&app, post("/v1/pause/alpha", Some(TOKEN), "")).await;
    assert_eq!(paused.status, StatusCode::OK, "{}", paused.body);
    assert_eq!(paused.body["effect"], "paused");
    assert_eq!(paused.body["lease"]["paused"], true);
    let resumed = call(&app, post("/v1/resume/alpha", Some(TOKEN), "{}")).await;
    assert_eq!(resumed.body["effect"], "resumed");
    let again = call(&app, post("/v1/resume/alpha", Some(TOKEN), "")).await;
    assert_eq!(
        (again.status, &again.body["changed"]),
        (StatusCode::OK, &json!(false))
    );
    let handover = call(
        &app,
        post("/v1/handover/alpha", Some(TOKEN), r#"{"to":"node-b"}"#),
    )
    .await;
    assert_eq!(
        handover.body["effect"], "handover_requested",
        "{}",
        handover.body
    );
    assert_eq!(handover.body["lease"]["handover_to"], "node-b");
    let demoted = call(
        &app,
        post("/v1/demote/alpha", Some(TOKEN), r#"{"immediate":true}"#),
    )
    .await;
    assert_eq!(demoted.body["effect"], "demoted", "{}", demoted.body);
    assert_eq!(demoted.body["lease"]["holder"], Value::Null);

    let history = get(&app, "/v1/history/alpha").await;
    let events: Vec<(String, String)> = history.body["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["event"].as_str().unwrap().into(),
                e["actor"].as_str().unwrap().into(),
            )
        })
        .collect();
    let http = |e: &str| (e.to_string(), "http:unknown".to_string());
    assert_eq!(
        events,
        [
            http("demoted"),
            http("handed_over"),
            http("resumed"),
            http("paused"),
            ("acquired".to_string(), "node-a".to_string())
        ]
    );

    // A server without a token refuses every admin call.
    let mut open = state.0.as_ref().clone_parts();
    open.token = None;
    let open = app_with(open);
    let refused = call(&open, post("/v1/demote/alpha", Some(TOKEN), "")).await;
    assert_error(&refused, StatusCode::FORBIDDEN, "--token-file");
}

impl Shared {
    fn clone_parts(&self) -> Shared {
        Shared {
            store: self.store.clone(),
            watcher: self.watcher.clone(),
            campaigns: self.campaigns.clone(),
            token: self.token.clone(),
            metrics: self.metrics.clone(),
            max_wait: self.max_wait,
            consul: self.consul.clone(),
        }
    }
}

fn app_with(shared: Shared) -> Router {
    app(AppState::new(shared))
}

// === this process's campaigns ===

#[tokio::test]
async fn leader_check_follows_this_process_role() {
    let db = TestDb::new(BackendKind::Sqlite).await.unwrap();
    let (role, rx) = channel::channel(Role::Unknown);
    let campaigns = BTreeMap::from([(
        "alpha".to_string(),
        Campaign {
            candidate: "me".into(),
            role: rx,
        },
    )]);
    let app = app(state(&db, Duration::from_millis(50), campaigns));
    let check = |name: &'static str| {
        let app = app.clone();
        async move { get(&app, &format!("/v1/leader-check/{name}")).await }
    };

    let unknown = check("alpha").await;
    assert_eq!(unknown.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        unknown.body,
        json!({"name": "alpha", "leader": false, "candidate": "me", "term": null})
    );

    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    role.send_replace(Role::Leader { term: 7, deadline });
    let leads = check("alpha").await;
    assert_eq!(leads.status, StatusCode::OK);
    assert_eq!(
        leads.body,
        json!({"name": "alpha", "leader": true, "candidate": "me", "term": 7})
    );
    let mine = get(&app, "/v1/self/alpha").await;
    assert_eq!(
        (&mine.body["role"], &mine.body["term"]),
        (&json!("leader"), &json!(7))
    );
    assert_eq!(
        get(&app, "/v1/self").await.body["campaigns"][0]["name"],
        "alpha"
    );

    // Not a name this process campaigns for: never 200, whoever leads it.
    assert_eq!(check("beta").await.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_error(
        &get(&app, "/v1/self/beta").await,
        StatusCode::NOT_FOUND,
        "--campaign",
    );

    // A leader role whose local deadline has passed is not believed.
    let past = tokio::time::Instant::now() - Duration::from_millis(1);
    role.send_replace(Role::Leader {
        term: 7,
        deadline: past,
    });
    assert_eq!(check("alpha").await.status, StatusCode::SERVICE_UNAVAILABLE);

    role.send_replace(Role::Follower { leader: None });
    assert_eq!(check("alpha").await.status, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(get(&app, "/v1/self/alpha").await.body["role"], "follower");
    assert_error(&check("a%7Fb").await, StatusCode::BAD_REQUEST, "control");
}

// === a thousand waiting clients ===

const CLIENTS: usize = 1000;

/// One HTTP/1.1 exchange on a fresh connection; returns the status, the index header and the
/// body.
async fn raw_get(addr: SocketAddr, path: &str) -> (u16, Option<u64>, Value) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes).await.expect("read");
    let text = String::from_utf8_lossy(&bytes);
    let (head, body) = text.split_once("\r\n\r\n").expect("a full response");
    let status = head[9..12].parse().expect("status");
    let index = head
        .lines()
        .find_map(|l| l.strip_prefix("x-tenure-index: "))
        .and_then(|v| v.trim().parse().ok());
    (
        status,
        index,
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

async fn thousand_waiting_clients_share_the_reads(db: &TestDb) {
    db.campaign("alpha", "node-a", 60_000).await;
    let poll = Duration::from_millis(200);
    let state = state(db, poll, BTreeMap::new());
    let watcher = state.watcher().clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, state, async {
        let _ = stopped.await;
    }));

    // Before its first read the view knows no name; an index taken then would be stale at once.
    assert!(watcher.first_read(Duration::from_secs(5)).await);
    let (status, index, _) = raw_get(addr, "/v1/status/alpha").await;
    assert_eq!(status, 200);
    let index = index.expect("index");
    let path = format!("/v1/status/alpha?index={index}&wait=30s");
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move {
                let answer = raw_get(addr, &path).await;
                (answer, Instant::now())
            })
        })
        .collect();
    let started = Instant::now();
    while watcher.waiting() < CLIENTS {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "only {} of {CLIENTS} clients are waiting",
            watcher.waiting()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // All wait; the database is read once per poll interval, not once per client.
    let reads_before = db.counting.counts().reads;
    let window = Duration::from_secs(2);
    tokio::time::sleep(window).await;
    let reads = db.counting.counts().reads - reads_before;
    assert_eq!(watcher.waiting(), CLIENTS);
    assert!(
        clients.iter().all(|c| !c.is_finished()),
        "a client was answered without a change"
    );
    let most = window.as_millis() / poll.as_millis() + 2;
    assert!(
        u128::from(reads) <= most,
        "{reads} reads in {window:?} with {CLIENTS} waiting clients (at most {most} expected)"
    );
    eprintln!(
        "{}: {CLIENTS} waiting clients, {reads} database reads in {window:?} ({:.1}/s, poll every {poll:?})",
        db.kind,
        reads as f64 / window.as_secs_f64()
    );

    // One change answers every client, soon, with the new state.
    let changed_at = Instant::now();
    db.apply("alpha", Op::Demote { immediate: true }).await;
    let mut latest = Duration::ZERO;
    for client in clients {
        let ((status, new_index, body), answered) = client.await.expect("client");
        assert_eq!(status, 200, "{body}");
        assert!(new_index.expect("index") > index);
        assert_eq!(body["lease"]["holder"], Value::Null);
        latest = latest.max(answered.duration_since(changed_at));
    }
    let reads = db.counting.counts().reads - reads_before;
    eprintln!(
        "{}: all {CLIENTS} answered within {latest:?} of the change; {reads} reads in all",
        db.kind
    );
    assert!(
        latest < poll * 5,
        "the last client was answered {latest:?} after the change"
    );
    let _ = stop.send(());
    server.await.expect("server task").expect("serve");
}

#[tokio::test]
async fn stopping_the_server_answers_waiting_clients() {
    let db = TestDb::new(BackendKind::Sqlite).await.unwrap();
    db.campaign("alpha", "node-a", 60_000).await;
    let state = state(&db, Duration::from_millis(50), BTreeMap::new());
    let watcher = state.watcher().clone();
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(serve(listener, state, async {
        let _ = stopped.await;
    }));
    let (_, index, _) = raw_get(addr, "/v1/status").await;
    let client = tokio::spawn(async move {
        raw_get(
            addr,
            &format!("/v1/status?index={}&wait=60s", index.unwrap()),
        )
        .await
    });
    while watcher.waiting() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let started = Instant::now();
    let _ = stop.send(());
    let (status, _, _) = client.await.unwrap();
    assert_eq!(status, 200);
    server.await.unwrap().unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// On PostgreSQL the watcher does not wait for its next poll: a NOTIFY wakes it. With a poll
/// interval of a minute, only the notification can answer the waiting client within seconds.
#[tokio::test]
async fn postgres_notifications_wake_the_watcher() {
    let Some(db) = TestDb::new(BackendKind::Postgres).await else {
        return;
    };
    db.campaign("alpha", "node-a", 60_000).await;
    let state = state(&db, Duration::from_secs(60), BTreeMap::new());
    let watcher = state.watcher().clone();
    let app = app(state);
    assert!(watcher.first_read(Duration::from_secs(5)).await);
    let index = get(&app, "/v1/status/alpha").await.index();
    let waiting = {
        let app = app.clone();
        tokio::spawn(async move {
            let r = get(&app, &format!("/v1/status/alpha?index={index}&wait=30s")).await;
            (r, Instant::now())
        })
    };
    while watcher.waiting() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let reads = db.counting.counts().reads;
    let changed = Instant::now();
    db.apply("alpha", Op::Demote { immediate: true }).await;
    let (moved, answered) = waiting.await.unwrap();
    let took = answered.duration_since(changed);
    assert!(moved.index() > index);
    assert_eq!(moved.body["lease"]["holder"], Value::Null);
    assert!(took < Duration::from_secs(3), "answered after {took:?}");
    assert_eq!(
        db.counting.counts().reads - reads,
        1,
        "one read, woken by the notification"
    );
    eprintln!("postgres: answered {took:?} after the change, woken by NOTIFY");
    db.drop_tables().await;
}
