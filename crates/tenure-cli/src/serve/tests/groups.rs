//! `GET /v1/groups`: every spreading group's assignment, as `tenure status --json` shows it.

use super::*;
use tenure::Spread;

on_every_backend!(groups_show_each_members_shards_and_the_unowned);

async fn groups_show_each_members_shards_and_the_unowned(db: &TestDb) {
    db.store().migrate().await.expect("the registry's table");
    let app = app(state(db, Duration::from_millis(50), BTreeMap::new()));
    let reply = get(&app, "/v1/groups").await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body, json!({ "groups": [] }));

    // One member, at most 2 of 5 shards: 3 stay unowned.
    let member = Spread::new(db.store(), "jobs", 5)
        .unwrap()
        .member("m-1")
        .max_per_member(2)
        .ttl(Duration::from_secs(4))
        .join()
        .await
        .unwrap();
    let owned = member.owned();
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let reply = get(&app, "/v1/groups").await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        let mine = reply.body["groups"][0]["members"]["m-1"]
            .as_array()
            .map(Vec::len);
        if mine == Some(2) && owned.borrow().len() == 2 {
            break reply.body;
        }
        assert!(Instant::now() < deadline, "never settled: {}", reply.body);
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let held: Vec<u32> = owned.borrow().iter().copied().collect();
    // The unowned shards as ranges of consecutive ones.
    let mut ranges: Vec<[u32; 2]> = Vec::new();
    for i in (0..5).filter(|i| !held.contains(i)) {
        match ranges.last_mut() {
            Some(r) if r[1] + 1 == i => r[1] = i,
            _ => ranges.push([i, i]),
        }
    }
    assert_eq!(
        body,
        json!({ "groups": [{
            "group": "jobs",
            "shards": 5,
            "paused": false,
            "members": { "m-1": held },
            "unowned": { "count": 3, "ranges": ranges },
        }]})
    );

    // Left: no live members, no group.
    member.leave().await;
    let reply = get(&app, "/v1/groups").await;
    assert_eq!(reply.body, json!({ "groups": [] }));
}
