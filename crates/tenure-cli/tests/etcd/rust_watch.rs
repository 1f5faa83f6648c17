//! The Rust `etcd-client`, side by side. Watch: live events a revision a response with prev_kv, a replay from the past joining the live feed, ids on one stream, progress, cancel, the compacted cancel.

use crate::side_by_side;
use crate::support::etcd::*;
use etcd_client::{DeleteOptions, EventType, Txn, TxnOp, WatchFilterType, WatchOptions};
use std::time::Duration;

side_by_side!(watch, watch_ids_progress_and_cancel);

fn watch(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        c.put("w/0", "before", None).await.expect("put");
        let next = revision_of(c.get("w/", None).await.expect("get").header()) + 1;
        let mut stream = c
            .watch(
                "w/",
                Some(
                    WatchOptions::new()
                        .with_prefix()
                        .with_prev_key()
                        .with_start_revision(next),
                ),
            )
            .await
            .expect("watch");
        let created = stream.message().await.expect("message").expect("created");
        t.record(
            "created",
            format!(
                "id {} created {} rev {}",
                created.watch_id(),
                created.created(),
                revision_of(created.header())
            ),
        );
        c.put("w/1", "a", None).await.expect("put");
        c.put("w/0", "after", None).await.expect("put");
        c.put("x", "not watched", None).await.expect("put");
        c.txn(Txn::new().and_then([TxnOp::put("w/2", "b", None), TxnOp::delete("w/1", None)]))
            .await
            .expect("txn");
        c.delete("w/", Some(DeleteOptions::new().with_prefix()))
            .await
            .expect("delete");
        for what in [
            "put w/1",
            "put w/0",
            "txn: one response",
            "delete: one response",
        ] {
            let r = tokio::time::timeout(Duration::from_secs(10), stream.message())
                .await
                .expect(what)
                .expect("message")
                .expect(what);
            let events: Vec<String> = r
                .events()
                .iter()
                .map(|e| {
                    format!(
                        "{:?} {} prev {:?}",
                        e.event_type(),
                        e.kv().map(show).unwrap_or_default(),
                        e.prev_kv().map(show)
                    )
                })
                .collect();
            t.record(what, format!("rev {} {events:?}", revision_of(r.header())));
        }
        // From the past: the history, then live.
        let mut replay = c
            .watch(
                "w/1",
                Some(
                    WatchOptions::new()
                        .with_start_revision(1)
                        .with_filters([WatchFilterType::NoDelete]),
                ),
            )
            .await
            .expect("watch");
        let mut seen = Vec::new();
        while seen.len() < 2 {
            let r = tokio::time::timeout(Duration::from_secs(10), replay.message())
                .await
                .expect("replay")
                .expect("message")
                .expect("replay");
            for e in r.events() {
                seen.push(format!(
                    "{:?} {}",
                    e.event_type(),
                    e.kv().map(show).unwrap_or_default()
                ));
            }
            if r.created() {
                seen.push("created".into());
            }
        }
        c.put("w/1", "live", None).await.expect("put");
        while !seen.iter().any(|s| s.contains("live")) {
            let r = tokio::time::timeout(Duration::from_secs(10), replay.message())
                .await
                .expect("live")
                .expect("message")
                .expect("live");
            for e in r.events() {
                seen.push(format!(
                    "{:?} {}",
                    e.event_type(),
                    e.kv().map(show).unwrap_or_default()
                ));
            }
        }
        t.record("replay without deletes", format!("{seen:?}"));
        assert!(seen
            .iter()
            .all(|s| !s.starts_with(&format!("{:?}", EventType::Delete))));
        t
    })
}

fn watch_ids_progress_and_cancel(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        c.put("v", "1", None).await.expect("put");
        c.put("v", "2", None).await.expect("put");
        c.put("v", "3", None).await.expect("put");
        let (mut watcher, mut stream) = c.watch("v", None).await.expect("watch").split();
        let r = next(&mut stream).await;
        t.record(
            "first watch",
            format!("id {} created {}", r.watch_id(), r.created()),
        );
        watcher.watch("u", None).await.expect("second watch");
        let r = next(&mut stream).await;
        t.record(
            "second watch, same stream",
            format!("id {} created {}", r.watch_id(), r.created()),
        );
        watcher.request_progress().await.expect("progress");
        let r = next(&mut stream).await;
        t.record(
            "progress",
            format!(
                "id {} rev {} events {}",
                r.watch_id(),
                revision_of(r.header()),
                r.events().len()
            ),
        );
        watcher.cancel(0).await.expect("cancel");
        let r = next(&mut stream).await;
        t.record(
            "cancel",
            format!("id {} canceled {}", r.watch_id(), r.canceled()),
        );
        c.compact(3, None).await.expect("compact");
        watcher
            .watch("v", Some(WatchOptions::new().with_start_revision(2)))
            .await
            .expect("below the floor");
        let show = |r: &etcd_client::WatchResponse| {
            format!(
                "id {} created {} canceled {} compact {} reason {:?} events {}",
                r.watch_id(),
                r.created(),
                r.canceled(),
                r.compact_revision(),
                r.cancel_reason(),
                r.events().len()
            )
        };
        for what in ["below the floor: created", "then canceled"] {
            let r = next(&mut stream).await;
            t.record(what, show(&r));
        }
        // Refused at once, created and canceled with etcd's reason: an empty range, an id in
        // use; an id of the client's own choice that is free is taken.
        watcher
            .watch("c", Some(WatchOptions::new().with_range("a")))
            .await
            .expect("an empty range");
        t.record("range_end below key", show(&next(&mut stream).await));
        watcher
            .watch("w", Some(WatchOptions::new().with_watch_id(1)))
            .await
            .expect("an id in use");
        t.record("an id in use", show(&next(&mut stream).await));
        watcher
            .watch("w", Some(WatchOptions::new().with_watch_id(7)))
            .await
            .expect("an id of its own");
        t.record("an id of its own", show(&next(&mut stream).await));
        watcher.watch("w", None).await.expect("the next free id");
        t.record("the next free id", show(&next(&mut stream).await));
        t
    })
}
