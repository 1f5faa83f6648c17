//! Epochs on the engines that have them (issue 27): PostgreSQL's timeline, read in the
//! campaign's own statement; MySQL/MariaDB's epoch row, where a server that did not begin the
//! current epoch (a promoted replica) begins a new one whose terms lie above every term before.
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
