//! `GET /v1/renewals`: each renewal written to the database, read by the watcher, with the
//! gap and the lease left computed from the database's own instants.

use super::*;
use crate::output::time;
use tenure::Purpose;

on_every_backend!(renewals_chart_what_the_database_wrote);

fn renew(term: u64) -> Op {
    Op::Campaign {
        candidate: "node-1".into(),
        term: Some(term),
        ttl_ms: 10_000,
        metadata: None,
        purpose: Purpose::Election,
    }
}

/// The renewals of `name` in the answer.
fn points(body: &Value, name: &str) -> Vec<Value> {
    body["names"]
        .as_array()
        .expect("names")
        .iter()
        .find(|n| n["name"] == name)
        .unwrap_or_else(|| panic!("{name} is not followed: {body}"))["renewals"]
        .as_array()
        .expect("renewals")
        .clone()
}

async fn renewals_chart_what_the_database_wrote(db: &TestDb) {
    let first = db.campaign("charted", "node-1", 10_000).await;
    db.campaign("quiet", "node-2", 10_000).await;
    let mut previous = first.lease.expect("a lease");
    let app = app(state(db, Duration::from_millis(20), BTreeMap::new()));
    assert!(app_state_ready(&app).await, "the watcher reads");

    for k in 1..=3 {
        let renewed = db.apply("charted", renew(previous.term)).await;
        assert_eq!(renewed.effect, tenure::Effect::Renewed, "{renewed:?}");
        let lease = renewed.lease.expect("a lease");
        // Wait (bounded) until the watcher has read this renewal.
        let deadline = Instant::now() + Duration::from_secs(10);
        let body = loop {
            let reply = get(&app, "/v1/renewals").await;
            assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
            if points(&reply.body, "charted").len() >= k {
                break reply.body;
            }
            assert!(
                Instant::now() < deadline,
                "renewal {k} not seen: {}",
                reply.body
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        let charted = points(&body, "charted");
        assert_eq!(charted.len(), k, "one point per renewal: {body}");
        let point = &charted[k - 1];
        let ms = |us: i64| json!(us / 1000);
        assert_eq!(point["at"], time(lease.renewed_at), "{body}");
        assert_eq!(point["term"], json!(lease.term));
        assert_eq!(
            point["gap_ms"],
            ms(lease.renewed_at.0 - previous.renewed_at.0),
            "{body}"
        );
        assert_eq!(
            point["left_ms"],
            ms(previous.expires_at.0 - lease.renewed_at.0),
            "{body}"
        );
        assert!(point["left_ms"].as_u64() > Some(9_000), "{body}");
        assert!(points(&body, "quiet").is_empty(), "never renewed: {body}");
        assert_eq!(body["left_out"], 0);
        previous = lease;
    }
    let body = get(&app, "/v1/renewals").await.body;
    assert_eq!(body["names"][0]["unplaced"], 0, "{body}");
    assert_eq!(
        body["points_per_name"],
        json!(super::super::renewals::POINTS)
    );
}
