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
