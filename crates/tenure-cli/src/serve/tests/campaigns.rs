//! This process's own campaigns (`tenure serve --campaign`): the leader check follows its role.

use super::*;

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
