//! The admin calls: the bearer token, bad bodies, demote, pause, resume and handover taking
//! effect and recorded with their actor (a handover to no live candidate refused unless
//! `unregistered`), and a server without a token refusing them all.

use super::*;

on_every_backend!(admin_calls_need_the_token_and_are_recorded);

async fn admin_calls_need_the_token_and_are_recorded(db: &TestDb) {
    // A handover reads the registry.
    db.store().migrate().await.expect("the registry's table");
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
    // node-b is no live candidate of alpha (a typo, or a process not yet started): refused,
    // nothing changes, unless the body says it is not started yet.
    let typo = call(
        &app,
        post("/v1/handover/alpha", Some(TOKEN), r#"{"to":"node-b"}"#),
    )
    .await;
    assert_error(&typo, StatusCode::BAD_REQUEST, "live candidate");
    let leader = get(&app, "/v1/leader/alpha").await;
    assert_eq!(leader.body["leader"]["handover_to"], Value::Null);
    let handover = call(
        &app,
        post(
            "/v1/handover/alpha",
            Some(TOKEN),
            r#"{"to":"node-b","unregistered":true}"#,
        ),
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
