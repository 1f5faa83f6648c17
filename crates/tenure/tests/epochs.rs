//! Epochs on the engines that have them (issue 27): PostgreSQL's timeline, read in the
//! campaign's own statement; MySQL/MariaDB's epoch row, where a server that did not begin the
//! current epoch (a promoted replica) begins a new one whose terms lie above every term before.
//! The layers' counters (etcd's revision, Consul's index) start a new epoch the same way.
//! A promotion is simulated on MariaDB by writing another server id into the epoch row; real
//! failovers are the fault suite's `ha` profile (`lossy-failover-async`, `mariadb-async-*`).

mod common;

use common::{connect, mysql_url, options, postgres_url, raw_sql, unique};
use std::time::Duration;
use tenure::model::{Epoch, TIMELINE_BITS};
use tenure::{BackendKind, LockOptions, Locks, Op, Purpose, Store, StoreOptions};

async fn campaign(store: &Store, name: &str, who: &str) -> tenure::Applied {
    let op = Op::Campaign {
        candidate: who.to_string(),
        term: None,
        ttl_ms: 60_000,
        metadata: None,
        purpose: Purpose::Election,
    };
    store.apply(name, &op, who).await.expect("campaign")
}

fn term(applied: &tenure::Applied) -> u64 {
    applied.lease.as_ref().expect("a row").term
}

/// A store on MariaDB with tables of its own (the epoch row is per prefix).
async fn mysql_store(prefix: &str, options: StoreOptions) -> Option<Store> {
    connect(
        BackendKind::MySql,
        &mysql_url(),
        options.table_prefix(prefix),
    )
    .await
}

async fn drop_prefix(store: &Store, prefix: &str) {
    for table in ["lease", "history", "tick", "schema", "epoch"] {
        raw_sql(store, &format!("DROP TABLE IF EXISTS {prefix}{table}")).await;
    }
    for routine in ["lock_acquire_v2", "lock_acquire_v3", "lock_release_v1"] {
        raw_sql(
            store,
            &format!("DROP PROCEDURE IF EXISTS {prefix}{routine}"),
        )
        .await;
    }
}

/// Pretends that another server began the current epoch (as after a promotion: the epoch row
/// replicated from the old primary names it), keeping the row's floor.
async fn promote(store: &Store, prefix: &str) {
    raw_sql(
        store,
        &format!("UPDATE {prefix}epoch SET server_id = server_id + 1000 WHERE id = 1"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_a_new_server_begins_a_new_epoch_above_every_term() {
    let prefix = format!("ep{}_", unique("").trim_start_matches('-').to_lowercase());
    let Some(store) = mysql_store(&prefix, options()).await else {
        return;
    };
    // The first epoch: floor 0, terms as they always were.
    let first = campaign(&store, "job", "a").await;
    assert_eq!((term(&first), first.epoch), (1, Epoch::ZERO));
    store.release("job", "a", 1, Duration::ZERO).await.unwrap();

    // A promotion: the next term lies above every term of the old epoch, lost ones included
    // (its floor is the database's clock in microseconds).
    promote(&store, &prefix).await;
    let after = campaign(&store, "job", "b").await;
    let floor = after.epoch.floor();
    assert!(
        floor >= u64::try_from(after.now.0).unwrap(),
        "floor {floor} vs now {:?}",
        after.now
    );
    assert_eq!(term(&after), floor);
    store
        .release("job", "b", floor, Duration::ZERO)
        .await
        .unwrap();
    // Within the new epoch, one more per tenure; a new name starts at the floor too.
    let next = campaign(&store, "job", "c").await;
    assert_eq!((term(&next), next.epoch.floor()), (floor + 1, floor));
    assert_eq!(term(&campaign(&store, "fresh", "a").await), floor);

    // A lock's one-statement cycle mints in the new epoch (the procedure checks the row).
    let locks = Locks::with_holder(store.clone(), "locker").unwrap();
    let mut terms = Vec::new();
    for _ in 0..3 {
        let guard = locks
            .try_lock("cycle", LockOptions::default())
            .await
            .unwrap()
            .expect("free");
        terms.push(guard.term());
        guard.release().await.unwrap();
    }
    assert_eq!(terms, vec![floor, floor + 1, floor + 2]);

    // Two lossy promotions in a row: the second new primary never saw the first one's epoch
    // row (it was lost with that server), so it finds the old floor again — and still begins
    // above it, by the clock.
    raw_sql(
        &store,
        &format!("UPDATE {prefix}epoch SET server_id = server_id + 1000, epoch = 0 WHERE id = 1"),
    )
    .await;
    store
        .release("job", "c", floor + 1, Duration::ZERO)
        .await
        .unwrap();
    let again = campaign(&store, "job", "d").await;
    assert!(
        again.epoch.floor() > floor && term(&again) > floor + 1,
        "second epoch {:?}, term {}",
        again.epoch,
        term(&again)
    );
    drop_prefix(&store, &prefix).await;
}

/// The negative: with epochs switched off (the fault suite's control), a promotion continues
/// the old terms by one — after lost commits, a term repeats.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_without_epochs_a_promotion_continues_by_one() {
    let prefix = format!("ep{}_", unique("").trim_start_matches('-').to_lowercase());
    let Some(store) = mysql_store(&prefix, options().without_epochs()).await else {
        return;
    };
    let first = campaign(&store, "job", "a").await;
    store
        .release("job", "a", term(&first), Duration::ZERO)
        .await
        .unwrap();
    // Its epoch row is never written: created by migrate, empty.
    raw_sql(
        &store,
        &format!("INSERT INTO {prefix}epoch VALUES (1, 999999, 0, UTC_TIMESTAMP(6))"),
    )
    .await;
    let after = campaign(&store, "job", "b").await;
    assert_eq!((term(&after), after.epoch), (2, Epoch::ZERO));
    drop_prefix(&store, &prefix).await;
}

/// PostgreSQL reads its timeline in the campaign's own statement: the epoch a campaign reports
/// is the timeline of the server's WAL insert position.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_the_epoch_is_the_timeline() {
    let Some(store) = connect(BackendKind::Postgres, &postgres_url(), options()).await else {
        return;
    };
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(&postgres_url()).await.unwrap();
    let wal: String = sqlx::query_scalar("SELECT pg_walfile_name(pg_current_wal_insert_lsn())")
        .fetch_one(&mut c)
        .await
        .unwrap();
    let tli = u32::from_str_radix(&wal[..8], 16).unwrap();
    let name = unique("timeline");
    let first = campaign(&store, &name, "a").await;
    assert_eq!(first.epoch, Epoch::timeline(tli));
    assert_eq!(
        term(&first),
        Epoch::timeline(tli).floor().max(1),
        "the timeline's first term"
    );
    assert_eq!(first.epoch.end(), u64::from(tli) << TIMELINE_BITS);
    // A lock's one-statement cycle reports the same epoch.
    let locks = Locks::with_holder(store.clone(), "locker").unwrap();
    let guard = locks
        .try_lock(&unique("timeline-lock"), LockOptions::default())
        .await
        .unwrap()
        .expect("free");
    assert_eq!(guard.term(), Epoch::timeline(tli).floor().max(1));
    guard.release().await.unwrap();
}

/// etcd's revisions on MariaDB (issue 38): a lossy promotion — the old primary's last write
/// lost, its revision, event and key with it — is simulated by taking them out and writing
/// another server id into the epoch row. The new primary's writes get revisions above every
/// revision the old one handed out, the lost one included, so that a watcher that saw it reads
/// on from the revision after it and misses nothing, and never sees one revision twice.
/// Returns the revision of the write after the promotion and the one the lost write had.
async fn etcd_write_after_a_lossy_promotion(
    prefix: &str,
    options: StoreOptions,
) -> Option<(i64, i64)> {
    use tenure::etcd::proto::etcdserverpb::{DeleteRangeRequest, PutRequest, RangeRequest};
    use tenure::etcd::Etcd;
    let store = mysql_store(prefix, options).await?;
    let etcd = Etcd::new(store.clone());
    let put = |key: &str| PutRequest {
        key: key.into(),
        value: b"v".to_vec(),
        ..PutRequest::default()
    };
    let revision =
        |r: tenure::etcd::proto::etcdserverpb::PutResponse| r.header.expect("a header").revision;
    revision(etcd.put(&put("a")).await.expect("put a"));
    let lost = revision(etcd.put(&put("b")).await.expect("put b"));
    raw_sql(
        &store,
        &format!("UPDATE {prefix}etcd_revision SET idx = idx - 1 WHERE id = 1"),
    )
    .await;
    raw_sql(
        &store,
        &format!("DELETE FROM {prefix}etcd_event WHERE revision = {lost}"),
    )
    .await;
    raw_sql(
        &store,
        &format!("DELETE FROM {prefix}etcd_kv WHERE kv_key = 'b'"),
    )
    .await;
    promote(&store, prefix).await;

    // A write that changes nothing (a delete of no key) leaves the revision, also as the first
    // write of the new epoch; so does a Txn that only reads.
    let header = |h: Option<tenure::etcd::proto::etcdserverpb::ResponseHeader>| {
        h.expect("a header").revision
    };
    let nothing = DeleteRangeRequest {
        key: b"missing".to_vec(),
        ..DeleteRangeRequest::default()
    };
    let deleted = etcd.delete_range(&nothing).await.expect("delete nothing");
    assert_eq!(header(deleted.header), lost - 1, "a delete of nothing");
    let read = etcd
        .range(&RangeRequest {
            key: b"a".to_vec(),
            ..RangeRequest::default()
        })
        .await
        .expect("range");
    assert_eq!(header(read.header), lost - 1, "the revision after it");

    let after = revision(etcd.put(&put("c")).await.expect("put c"));
    // Read on from the revision after the lost one, as a watcher that saw it does.
    let seen = etcd
        .events(lost + 1, b"\0", b"\0", 100)
        .await
        .expect("the log");
    let keys: Vec<&[u8]> = seen
        .events
        .iter()
        .map(|e| e.kv.as_ref().expect("kv").key.as_slice())
        .collect();
    if after > lost {
        assert_eq!(
            keys,
            [b"c"],
            "the write after the promotion, read on from {lost}"
        );
        // Within the new epoch, one more per write.
        assert_eq!(
            revision(etcd.put(&put("d")).await.expect("put d")),
            after + 1
        );
    }
    drop_layer(store, prefix).await;
    Some((after, lost))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_etcd_revisions_begin_above_the_old_epoch() {
    above_the_lost_one("revision", |prefix, options| async move {
        etcd_write_after_a_lossy_promotion(&prefix, options).await
    })
    .await;
}

/// Runs `write_after` (a layer's write after a simulated lossy promotion, under a prefix of
/// its own) with epochs and without: with them, its value lies above the lost write's; without
/// them (the negative), it is the lost write's again — what the first assertion catches.
async fn above_the_lost_one<T, F, Fut>(what: &str, write_after: F)
where
    T: PartialOrd + std::fmt::Debug,
    F: Fn(String, StoreOptions) -> Fut,
    Fut: std::future::Future<Output = Option<(T, T)>>,
{
    let Some((after, lost)) = write_after(layer_prefix(), options()).await else {
        return;
    };
    assert!(
        after > lost,
        "{what} {after:?} after the promotion, {lost:?} before it (lost): handed out twice"
    );
    let (after, lost) = write_after(layer_prefix(), options().without_epochs())
        .await
        .expect("MariaDB answered a moment ago");
    assert_eq!(after, lost, "without epochs, the lost {what} again");
}

/// Drops a layer test's tables (and the epoch row's) and closes its store.
async fn drop_layer(store: Store, prefix: &str) {
    common::drop_prefixed(BackendKind::MySql, &mysql_url(), prefix)
        .await
        .expect("drop the test's tables");
    store.close().await;
}

/// A table prefix of a test's own for a layer's tables and the epoch row.
fn layer_prefix() -> String {
    format!("el{}_", unique("").trim_start_matches('-').to_lowercase())
}

/// Consul's index on MariaDB, as etcd's revisions above: after a simulated lossy promotion (the
/// old primary's last write lost, its index and key with it) the new primary's write gets an
/// index above the lost one, so that a blocking query that saw it wakes for the new write.
/// Returns the index of the write after the promotion and the one the lost write had.
async fn consul_write_after_a_lossy_promotion(
    prefix: &str,
    options: StoreOptions,
) -> Option<(u64, u64)> {
    use tenure::consul::{Consul, PutMode, Request};
    let store = mysql_store(prefix, options).await?;
    let consul = Consul::new(store.clone());
    let put = |key: &str| Request::Put {
        key: key.to_string(),
        value: b"v".to_vec(),
        flags: 0,
        mode: PutMode::Set { cas: None },
    };
    consul.request(&put("a"), "test").await.expect("put a");
    let lost = consul
        .request(&put("b"), "test")
        .await
        .expect("put b")
        .index;
    // The store's index and the keys' table index (rows 1 and 2) go back with the lost write.
    raw_sql(
        &store,
        &format!("UPDATE {prefix}consul_index SET idx = idx - 1 WHERE id IN (1, 2)"),
    )
    .await;
    raw_sql(
        &store,
        &format!("DELETE FROM {prefix}consul_kv WHERE kv_key = 'b'"),
    )
    .await;
    promote(&store, prefix).await;

    let after = consul
        .request(&put("c"), "test")
        .await
        .expect("put c")
        .index;
    if after > lost {
        // Within the new epoch, one more per write.
        let next = consul.request(&put("d"), "test").await.expect("put d");
        assert_eq!(next.index, after + 1);
    }
    drop_layer(store, prefix).await;
    Some((after, lost))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mysql_consul_indexes_begin_above_the_old_epoch() {
    above_the_lost_one("index", |prefix, options| async move {
        consul_write_after_a_lossy_promotion(&prefix, options).await
    })
    .await;
}
