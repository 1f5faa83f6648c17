//! A watcher's task on a real room (SQLite): what it sends when it starts late.

use super::watcher::{self, Watch};
use crate::serve::etcd::call::Outbox;
use crate::serve::etcd::{Member, Room, Settings};
use std::time::Duration;
use tenure_etcd_proto::etcdserverpb::{PutRequest, WatchCreateRequest, WatchResponse};
use tonic::Status;

/// A room on a fresh SQLite database whose hub reads at every commit of this process (and
/// otherwise every `poll`).
async fn room(dir: &tempfile::TempDir, poll: Duration) -> Room {
    let url = format!("sqlite://{}", dir.path().join("watch.db").display());
    let store = tenure::Store::connect(&url).await.expect("connect");
    let settings = Settings {
        member: Member::new("test".into(), vec!["http://127.0.0.1:2379".into()]),
        cluster_id: 1,
        token: None,
        poll,
        member_ttl: Duration::from_secs(60),
        retention: 0,
        watch_buffer: 16,
    };
    Room::start(store, settings).await
}

async fn put(room: &Room, key: &str) -> i64 {
    let put = PutRequest {
        key: key.as_bytes().to_vec(),
        value: b"v".to_vec(),
        ..PutRequest::default()
    };
    let answer = room.etcd().put(&put).await.expect("put");
    answer.header.expect("header").revision
}

/// Waits (at most 30 s) until the hub has published through `revision`.
async fn published(room: &Room, revision: i64) {
    let started = std::time::Instant::now();
    while room.0.hub.position() < revision {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the hub did not publish {revision} (at {})",
            room.0.hub.position()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The revisions of each response the watcher sends, until `events` events came (at most
/// 30 s).
async fn responses(
    answers: &mut tokio::sync::mpsc::Receiver<Result<WatchResponse, Status>>,
    events: usize,
) -> Vec<Vec<i64>> {
    let mut seen = Vec::new();
    let mut count = 0;
    while count < events {
        let answer = tokio::time::timeout(Duration::from_secs(30), answers.recv())
            .await
            .unwrap_or_else(|_| panic!("{count} of {events} events came: {seen:?}"))
            .expect("the watcher still sends")
            .expect("an answer");
        let revisions: Vec<i64> = answer
            .events
            .iter()
            .map(|e| e.kv.as_ref().map_or(0, |kv| kv.mod_revision))
            .collect();
        count += revisions.len();
        seen.push(revisions);
    }
    seen
}

fn prefix_watch() -> Watch {
    Watch::new(
        0,
        &WatchCreateRequest {
            key: b"w/".to_vec(),
            range_end: b"w0".to_vec(),
            ..WatchCreateRequest::default()
        },
    )
}

/// A watch created at revision `r` from `r + 1` on is synced in etcd from its creation: every
/// later revision comes in a response of its own. Its task may start after the hub published
/// the first writes (a loaded machine; a client that writes as soon as it reads `created`):
/// it then reads them from the log, and still sends one response a revision (the JSON
/// gateway's clients, as Patroni, and tests count responses).
#[tokio::test]
async fn a_watcher_that_starts_late_still_sends_one_revision_a_response() {
    let dir = tempfile::tempdir().expect("tempdir");
    let room = room(&dir, Duration::from_secs(60)).await;
    let created = room.etcd().revisions().await.expect("revision").revision;
    let a = put(&room, "w/a").await;
    let b = put(&room, "w/b").await;
    put(&room, "x").await;
    published(&room, b + 1).await;
    let (outbox, mut answers) = Outbox::for_test(room.clone());
    let task = tokio::spawn(watcher::run(
        room.clone(),
        prefix_watch(),
        created + 1,
        created,
        outbox,
    ));
    assert_eq!(responses(&mut answers, 2).await, [vec![a], vec![b]]);
    task.abort();
    room.stop();
}

/// A watch from a revision at or below the current one is not synced in etcd: what it
/// catches up on comes in responses of many revisions (up to etcd's 1000 a response).
#[tokio::test]
async fn a_watch_from_the_past_catches_up_many_revisions_a_response() {
    let dir = tempfile::tempdir().expect("tempdir");
    let room = room(&dir, Duration::from_secs(60)).await;
    let a = put(&room, "w/a").await;
    let b = put(&room, "w/b").await;
    published(&room, b).await;
    let (outbox, mut answers) = Outbox::for_test(room.clone());
    let task = tokio::spawn(watcher::run(room.clone(), prefix_watch(), a, b, outbox));
    assert_eq!(responses(&mut answers, 2).await, [vec![a, b]]);
    task.abort();
    room.stop();
}
