//! A watch through an asynchronous failover that lost commits (issue 38), on MariaDB, with the
//! promotion simulated as `tests/epochs.rs` does it in the library: the last write's revision,
//! log row and key taken out, and another server id in the epoch row.
//!
//! A watcher that saw the lost revision, or waits for an event only it held (an `etcdctl lock`
//! waiter watching the deletion of a lost key), would wait for ever: nothing of the lost
//! history ever happens again. `tenure serve` ends every watch with etcd's compacted cancel
//! at the first revision of the new history, whether it notices the loss before the next
//! write (the revision went back) or with it (a new epoch past a gap, the log without the
//! revision it published).

mod support;

use etcd_client::{Client, WatchOptions, WatchResponse, WatchStream};
use std::time::Duration;
use support::etcd::{tenure_target_with, Target};
use support::serve::Db;
use support::BackendKind;

/// Long enough that nothing but a write through the server wakes its watch hub.
const NEVER: &str = "1h";
/// Short, so that the hub reads the log without a write.
const OFTEN: &str = "200ms";

/// The next message of `watch`, within a bound generous for a busy machine.
async fn next(watch: &mut WatchStream, what: &str, log: &dyn Fn() -> String) -> WatchResponse {
    tokio::time::timeout(Duration::from_secs(20), watch.message())
        .await
        .unwrap_or_else(|_| panic!("{what}: no message within 20 s\n{}", log()))
        .expect("message")
        .unwrap_or_else(|| panic!("{what}: the stream ended\n{}", log()))
}

/// Takes out the last write (revision `lost`, of key `key`) and makes this the history of a
/// newly promoted server.
async fn lose_and_promote(db: &Db, lost: i64, key: &str) {
    let p = &db.prefix;
    db.execute_script(&format!(
        "UPDATE {p}etcd_revision SET idx = idx - 1 WHERE id = 1;\n\
         DELETE FROM {p}etcd_event WHERE revision = {lost};\n\
         DELETE FROM {p}etcd_kv WHERE kv_key = '{key}';\n\
         UPDATE {p}epoch SET server_id = server_id + 1000 WHERE id = 1;"
    ))
    .await;
}

/// Puts `a`, starts a watch of every key, puts `b` (seen by the watcher): the watch and the
/// revision of `b`.
async fn watch_a_write(client: &mut Client, log: &dyn Fn() -> String) -> (WatchStream, i64) {
    client.put("a", "1", None).await.expect("put a");
    let mut watch = client
        .watch("\0", Some(WatchOptions::new().with_from_key()))
        .await
        .expect("watch");
    let created = next(&mut watch, "created", log).await;
    assert!(created.created(), "{created:?}");
    let put = client.put("b", "2", None).await.expect("put b");
    let lost = put.header().expect("header").revision();
    let seen = next(&mut watch, "the put of b", log).await;
    assert_eq!(seen.events().len(), 1, "{seen:?}");
    assert_eq!(seen.events()[0].kv().expect("kv").mod_revision(), lost);
    (watch, lost)
}

/// A server with watch-hub poll `poll` on a fresh MariaDB database, and a client of it.
fn on_mariadb(poll: &str) -> Option<(tokio::runtime::Runtime, Db, Target, Client)> {
    let runtime = support::runtime();
    let db = runtime.block_on(Db::new(BackendKind::MySql))?;
    let server = tenure_target_with(&db, &["--poll-interval", poll]);
    let client = runtime
        .block_on(Client::connect([server.url()], None))
        .expect("connect");
    Some((runtime, db, server, client))
}

/// `response` is the cancel of a watcher that saw revision `lost`, at `resume`.
fn assert_cancelled(response: &WatchResponse, lost: i64, resume: i64, log: &str) {
    assert!(
        response.canceled(),
        "the watcher that saw revision {lost}, which the database lost, must end: \
         {response:?}\n{log}"
    );
    assert_eq!(response.compact_revision(), resume, "{response:?}");
}

#[test]
fn mysql_a_watch_that_saw_a_lost_revision_is_cancelled_at_the_next_write() {
    let Some((runtime, db, server, mut client)) = on_mariadb(NEVER) else {
        return;
    };
    let log = || server.log();
    runtime.block_on(async {
        let (mut watch, lost) = watch_a_write(&mut client, &log).await;
        lose_and_promote(&db, lost, "b").await;
        // The new primary's first write: a new epoch, far above the lost revision.
        let put = client.put("c", "3", None).await.expect("put c");
        let first = put.header().expect("header").revision();
        assert!(first > lost + 1, "a new epoch: {first} after {lost}");
        let cancel = next(&mut watch, "after the lossy promotion", &log).await;
        assert_cancelled(&cancel, lost, first, &log());
        // A new watch from there sees the new history.
        let options = WatchOptions::new()
            .with_from_key()
            .with_start_revision(first);
        let mut again = client.watch("\0", Some(options)).await.expect("watch");
        assert!(next(&mut again, "created", &log).await.created());
        let replay = next(&mut again, "the put of c", &log).await;
        assert_eq!(replay.events().len(), 1, "{replay:?}");
        assert_eq!(replay.events()[0].kv().expect("kv").key(), b"c");
    });
    drop(server);
    runtime.block_on(db.drop_tables());
}

#[test]
fn mysql_a_watch_that_saw_a_lost_revision_is_cancelled_before_any_write() {
    let Some((runtime, db, server, mut client)) = on_mariadb(OFTEN) else {
        return;
    };
    let log = || server.log();
    runtime.block_on(async {
        let (mut watch, lost) = watch_a_write(&mut client, &log).await;
        lose_and_promote(&db, lost, "b").await;
        // No write: the hub's next poll finds the revision below what it published.
        let cancel = next(&mut watch, "after the lossy promotion", &log).await;
        assert_cancelled(&cancel, lost, lost, &log());
    });
    drop(server);
    runtime.block_on(db.drop_tables());
}

/// The negative control: an epoch change that lost nothing (a planned switchover) cancels no
/// watch, and the watcher sees the new epoch's write.
#[test]
fn mysql_a_new_epoch_that_lost_nothing_cancels_no_watch() {
    let Some((runtime, db, server, mut client)) = on_mariadb(NEVER) else {
        return;
    };
    let log = || server.log();
    runtime.block_on(async {
        let (mut watch, seen) = watch_a_write(&mut client, &log).await;
        let p = &db.prefix;
        db.execute_script(&format!(
            "UPDATE {p}epoch SET server_id = server_id + 1000 WHERE id = 1;"
        ))
        .await;
        let put = client.put("c", "3", None).await.expect("put c");
        let first = put.header().expect("header").revision();
        assert!(first > seen + 1, "a new epoch: {first} after {seen}");
        let event = next(&mut watch, "the put of c", &log).await;
        assert!(!event.canceled(), "{event:?}\n{}", log());
        assert_eq!(event.events().len(), 1, "{event:?}");
        assert_eq!(event.events()[0].kv().expect("kv").mod_revision(), first);
    });
    drop(server);
    runtime.block_on(db.drop_tables());
}

/// How many 64 KiB puts outrun a watcher whose client reads nothing: its stream's buffer (64
/// answers), the server's HTTP/2 send buffer (400 KiB) and the client's stream window (2 MiB)
/// hold about 105 of them; the rest fall behind a feed of one batch (`--etcd-watch-buffer 1`).
const OUTRUN: usize = 160;

/// A server whose watch feed keeps one batch, on a fresh MariaDB database, and two clients:
/// one that reads its watch, one that will not (its own connection).
fn on_mariadb_with_a_short_feed() -> Option<(tokio::runtime::Runtime, Db, Target, Client, Client)> {
    let runtime = support::runtime();
    let db = runtime.block_on(Db::new(BackendKind::MySql))?;
    let server = tenure_target_with(&db, &["--poll-interval", NEVER, "--etcd-watch-buffer", "1"]);
    let (reader, slow) = runtime.block_on(async {
        let reader = Client::connect([server.url()], None)
            .await
            .expect("connect");
        let slow = Client::connect([server.url()], None)
            .await
            .expect("connect");
        (reader, slow)
    });
    Some((runtime, db, server, reader, slow))
}

/// Starts a watch of every key on `slow` that is then left unread, and puts [`OUTRUN`] large
/// values one batch at a time (each seen by `watch`, read, before the next): the slow watcher
/// falls behind the feed. The revision of the last put.
async fn outrun(
    slow: &mut Client,
    reader: &mut Client,
    watch: &mut WatchStream,
    log: &dyn Fn() -> String,
) -> (WatchStream, i64) {
    let mut behind = slow
        .watch("\0", Some(WatchOptions::new().with_from_key()))
        .await
        .expect("watch");
    assert!(next(&mut behind, "created", log).await.created());
    let value = vec![b'v'; 64 * 1024];
    let mut last = 0;
    for i in 0..OUTRUN {
        let put = reader
            .put(format!("big/{i:03}"), value.clone(), None)
            .await
            .expect("put");
        last = put.header().expect("header").revision();
        let seen = next(watch, "a large put", log).await;
        assert_eq!(
            seen.events()
                .last()
                .expect("event")
                .kv()
                .expect("kv")
                .mod_revision(),
            last,
            "{i}"
        );
    }
    (behind, last)
}

/// What the slow watcher sends once its client reads: its events up to the end of the stream's
/// backlog or its cancel.
async fn drain(
    behind: &mut WatchStream,
    log: &dyn Fn() -> String,
) -> (Vec<i64>, Option<WatchResponse>) {
    let mut revisions = Vec::new();
    loop {
        let message = next(behind, "the slow watcher", log).await;
        if message.canceled() {
            return (revisions, Some(message));
        }
        revisions.extend(
            message
                .events()
                .iter()
                .map(|e| e.kv().expect("kv").mod_revision()),
        );
        if message
            .events()
            .iter()
            .any(|e| e.kv().expect("kv").key() == b"end")
        {
            return (revisions, None);
        }
    }
}

/// A watcher that fell behind the feed while the database lost revisions (so that it never
/// took the hub's batch that cancels every watch) ends with the same compacted cancel, not
/// with the new history read from the log as if nothing had been lost.
#[test]
fn mysql_a_watch_that_fell_behind_across_a_lost_revision_is_cancelled() {
    let Some((runtime, db, server, mut reader, mut slow)) = on_mariadb_with_a_short_feed() else {
        return;
    };
    let log = || server.log();
    runtime.block_on(async {
        let (mut watch, _) = watch_a_write(&mut reader, &log).await;
        let (mut behind, _) = outrun(&mut slow, &mut reader, &mut watch, &log).await;
        let put = reader.put("lost", "1", None).await.expect("put lost");
        let lost = put.header().expect("header").revision();
        assert_eq!(
            next(&mut watch, "the put of lost", &log).await.events()[0]
                .kv()
                .expect("kv")
                .mod_revision(),
            lost
        );
        lose_and_promote(&db, lost, "lost").await;
        let put = reader.put("end", "1", None).await.expect("put end");
        let first = put.header().expect("header").revision();
        assert!(first > lost + 1, "a new epoch: {first} after {lost}");
        let cancel = next(&mut watch, "after the lossy promotion", &log).await;
        assert_cancelled(&cancel, lost, first, &log());
        let (revisions, cancel) = drain(&mut behind, &log).await;
        let cancel = cancel.unwrap_or_else(|| {
            panic!(
                "the watcher that fell behind was not cancelled: it sent revisions {:?}..{:?} and \
                 the new history's {first}\n{}",
                revisions.first(),
                revisions.last(),
                log()
            )
        });
        assert_cancelled(&cancel, lost, first, &log());
        assert!(revisions.iter().all(|&r| r < first), "{revisions:?}");
        // It was behind by far more than the feed's one batch when the revision was lost (the
        // control shows these puts outrun it): else the test would prove nothing.
        assert!(
            revisions.len() < OUTRUN && !revisions.contains(&lost),
            "the slow watcher was not behind: it sent {} revisions",
            revisions.len()
        );
    });
    drop(server);
    runtime.block_on(db.drop_tables());
}

/// The control: a watcher that fell behind the feed with nothing lost reads what it missed
/// from the log and sends every revision, in order, without a gap, and is not cancelled.
#[test]
fn mysql_a_watch_that_fell_behind_reads_what_it_missed_from_the_log() {
    let Some((runtime, db, server, mut reader, mut slow)) = on_mariadb_with_a_short_feed() else {
        return;
    };
    let log = || server.log();
    runtime.block_on(async {
        let (mut watch, seen) = watch_a_write(&mut reader, &log).await;
        let (mut behind, last) = outrun(&mut slow, &mut reader, &mut watch, &log).await;
        let put = reader.put("end", "1", None).await.expect("put end");
        let end = put.header().expect("header").revision();
        assert_eq!(end, last + 1);
        let (revisions, cancel) = drain(&mut behind, &log).await;
        assert!(cancel.is_none(), "{cancel:?}\n{}", log());
        let expected: Vec<i64> = (seen + 1..=end).collect();
        assert_eq!(revisions, expected, "every revision once, in order");
        assert!(
            log().contains("fell behind the watch feed"),
            "the slow watcher never fell behind the feed: the test proves nothing\n{}",
            log()
        );
    });
    drop(server);
    runtime.block_on(db.drop_tables());
}
