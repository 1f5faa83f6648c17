//! The router driven in process: with `oneshot` (no socket) for the API's answers, and on a real
//! loopback socket for the thousand waiting clients, whose database reads are counted by a
//! [`CountingBackend`] around the real one.
//!
//! SQLite always; PostgreSQL and MariaDB where `TENURE_TEST_POSTGRES_URL` /
//! `TENURE_TEST_MYSQL_URL` (default the local servers) answer, with a fresh table prefix per
//! test. An unreachable server prints `SKIPPED: …`, or fails under `CI=true`.
//!
//! Here: the test databases, the calls and the per-backend macro the files share; then one file
//! per part of the API: [`reads`] (status, leader, history, the route list and its OpenAPI
//! description), [`waiting`] (blocking queries, a thousand waiting clients, stopping while they
//! wait, PostgreSQL's notifications), [`admin`] (the token, the admin calls and their history)
//! and [`campaigns`] (this process's own campaigns, the leader check).

use super::*;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use serde_json::{json, Value};
use std::time::Instant;
use tenure::backend::{Backend, CountingBackend};
use tenure::{Applied, BackendKind};
use tenure::{Op, StoreOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tower::ServiceExt;

// === test databases ===

#[path = "../../../tests/support/databases.rs"]
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
            tenure::consul::MIN_SESSION_TTL,
        ),
    })
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
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

/// Whether the app answers `/health` with 200 within 2 s (its watcher has read once).
async fn app_state_ready(app: &Router) -> bool {
    for _ in 0..100 {
        if get(app, "/health").await.status == StatusCode::OK {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

// The parts of the API, after the macro they use.
mod admin;
mod campaigns;
mod candidates;
mod groups;
mod reads;
mod renewals;
mod waiting;
