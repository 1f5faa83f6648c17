//! The reads: status, leader and history in JSON with an index, bad input, and the route list
//! against the router and its OpenAPI description.

use super::*;

on_every_backend!(reads_answer_in_json_with_an_index);

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

/// Every route of the router is described in `openapi.json`, and nothing else is.
#[tokio::test]
async fn openapi_describes_every_route() {
    let doc = openapi::document(ROOMS);
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
    "GET /v1/candidates/{name}",
    "GET /v1/renewals",
    "GET /v1/groups",
    "GET /v1/etcd",
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
    "GET /v1/agent/self",
    "GET /v1/agent/{path}",
    "PUT /v1/agent/{path}",
];

/// Every route in [`ROUTES`] exists in the router (not a 404 from the fallback), and a path
/// beside them does not.
#[tokio::test]
async fn the_route_list_matches_the_router() {
    let db = TestDb::new(BackendKind::Sqlite).await.unwrap();
    let app = app(state(&db, Duration::from_millis(50), BTreeMap::new()));
    for route in ROUTES {
        let (method, path) = route.split_once(' ').unwrap();
        let uri = ["{name}", "{id}", "{node}", "{key}", "{path}"]
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
