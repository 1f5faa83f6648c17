//! `GET /v1/candidates/{name}`: the registry of real electors, best first, with the leader and
//! the observer marked.

use super::*;
use tenure::{Elector, Timing};

on_every_backend!(candidates_lists_every_elector_best_first);

async fn candidates_lists_every_elector_best_first(db: &TestDb) {
    db.store().migrate().await.expect("the registry's table");
    let timing = Timing::from_ttl(Duration::from_secs(4)).unwrap();
    let elector = |id: &str, priority: i32| {
        Elector::builder(db.store(), "alpha")
            .timing(timing)
            .candidate(id)
            .priority(priority)
            .metadata(format!("{id}.example:80"))
    };
    let best = elector("best", 5).spawn().unwrap();
    let low = elector("low", -2).spawn().unwrap();
    let watcher = elector("watcher", 9).observe().spawn().unwrap();
    let app = app(state(db, Duration::from_millis(50), BTreeMap::new()));

    // Wait (bounded) until all three are registered and the best one leads.
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let reply = get(&app, "/v1/candidates/alpha").await;
        let ready = reply.status == StatusCode::OK
            && reply.body["leader"] == "best"
            && reply.body["candidates"].as_array().map(Vec::len) == Some(3);
        if ready {
            break reply.body;
        }
        assert!(Instant::now() < deadline, "never settled: {}", reply.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ids: Vec<&str> = body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["candidate"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["best", "low", "watcher"], "{body}");
    let first = &body["candidates"][0];
    assert_eq!(
        (
            &first["priority"],
            &first["leader"],
            &first["live"],
            &first["observer"]
        ),
        (&json!(5), &json!(true), &json!(true), &json!(false))
    );
    assert_eq!(first["metadata"], "best.example:80");
    assert_eq!(body["candidates"][1]["priority"], -2);
    assert_eq!(body["candidates"][1]["leader"], false);
    assert_eq!(body["candidates"][2]["observer"], true);

    // A clean stop leaves the registry at once.
    low.shutdown().await;
    let reply = get(&app, "/v1/candidates/alpha").await;
    let ids: Vec<&str> = reply.body["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["candidate"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["best", "watcher"], "{}", reply.body);

    assert_error(
        &get(&app, "/v1/candidates/beta").await,
        StatusCode::NOT_FOUND,
        "\"beta\"",
    );
    assert_error(
        &get(&app, "/v1/candidates/a%7Fb").await,
        StatusCode::BAD_REQUEST,
        "control",
    );
    best.shutdown().await;
    watcher.shutdown().await;
}
