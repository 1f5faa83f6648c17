//! MariaDB's lock-cycle procedures (`backend/mysql/one_statement.rs`): `migrate` installs them,
//! a lock's uncontested cycle is one `CALL` per operation, and without them every operation
//! runs the model's transaction. (That their answers are the model's is the model-based test's
//! work, `tests/model.rs`, which runs every operation through them.)

mod common;

use sqlx::MySqlPool;
use tenure::{BackendKind, LockOptions, Locks, Store};

/// The tests here change or read the server's global state (its call counter, `read_only`):
/// one at a time.
static SERVER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A store on tables of its own (so, procedures of its own), and an admin pool.
async fn scoped_store() -> Option<(Store, String, MySqlPool)> {
    let url = common::mysql_url();
    let prefix = format!("mr_{}_", common::unique("t").replace('-', "_"));
    let store = common::connect(
        BackendKind::MySql,
        &url,
        common::options().table_prefix(prefix.clone()),
    )
    .await?;
    let admin = MySqlPool::connect(&url).await.expect("admin pool");
    Some((store, prefix, admin))
}

async fn procedures(admin: &MySqlPool, prefix: &str) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT CONVERT(ROUTINE_NAME USING utf8mb4) FROM information_schema.ROUTINES \
         WHERE ROUTINE_SCHEMA = DATABASE() AND ROUTINE_NAME LIKE ? ORDER BY ROUTINE_NAME",
    )
    .bind(format!("{prefix}%"))
    .fetch_all(admin)
    .await
    .unwrap()
}

async fn calls(admin: &MySqlPool) -> i64 {
    let (_, value): (String, String) =
        sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Com_call_procedure'")
            .fetch_one(admin)
            .await
            .unwrap();
    value.parse().unwrap()
}

async fn drop_all(admin: &MySqlPool, prefix: &str) {
    for routine in ["lock_acquire_v3", "lock_release_v1"] {
        sqlx::raw_sql(&format!("DROP PROCEDURE IF EXISTS {prefix}{routine}"))
            .execute(admin)
            .await
            .unwrap();
    }
    for table in [
        "consul_kv",
        "consul_session",
        "consul_index",
        "history",
        "tick",
        "schema",
        "epoch",
        "lease",
    ] {
        sqlx::raw_sql(&format!("DROP TABLE IF EXISTS {prefix}{table}"))
            .execute(admin)
            .await
            .unwrap();
    }
}

async fn cycle(locks: &Locks, name: &str) -> u64 {
    let guard = locks
        .try_lock(name, LockOptions::default())
        .await
        .unwrap()
        .expect("free");
    let term = guard.term();
    guard.release().await.unwrap();
    term
}

#[tokio::test]
async fn procedures_serve_lock_cycles_and_their_absence_costs_only_speed() {
    let _alone = SERVER.lock().await;
    let Some((store, prefix, admin)) = scoped_store().await else {
        return;
    };
    assert_eq!(
        procedures(&admin, &prefix).await,
        vec![
            format!("{prefix}lock_acquire_v3"),
            format!("{prefix}lock_release_v1")
        ],
        "migrate installed both"
    );
    let locks = Locks::with_holder(store.clone(), "a").unwrap();
    let name = common::unique("routine");
    // The first take of a new name runs the transaction (the row is created); then each
    // operation of a cycle is one CALL.
    assert_eq!(cycle(&locks, &name).await, 1);
    let before = calls(&admin).await;
    assert_eq!(cycle(&locks, &name).await, 2);
    assert_eq!(
        calls(&admin).await - before,
        2,
        "an uncontested cycle: two CALLs"
    );

    // Without the procedures (a DBA dropped them, an older schema): the same cycle works
    // through the transaction, for a store that had them and for a new one.
    for routine in ["lock_acquire_v3", "lock_release_v1"] {
        sqlx::raw_sql(&format!("DROP PROCEDURE {prefix}{routine}"))
            .execute(&admin)
            .await
            .unwrap();
    }
    assert_eq!(cycle(&locks, &name).await, 3);
    assert_eq!(cycle(&locks, &name).await, 4);
    let no_create = Store::connect_with(
        &common::mysql_url(),
        common::options()
            .table_prefix(prefix.clone())
            .auto_create(false),
    )
    .await
    .unwrap();
    let other = Locks::with_holder(no_create, "b").unwrap();
    assert_eq!(cycle(&other, &name).await, 5);
    assert!(procedures(&admin, &prefix).await.is_empty());
    drop_all(&admin, &prefix).await;
}

/// A read-only server (a demoted primary, say) is never written through the procedures, even
/// by a user whose privileges would let it (`root` here): the lock is refused with the reason.
#[tokio::test]
async fn a_read_only_server_is_not_written_through_the_procedures() {
    let _alone = SERVER.lock().await;
    let Some((store, prefix, admin)) = scoped_store().await else {
        return;
    };
    let locks = Locks::with_holder(store, "a").unwrap();
    let name = common::unique("readonly");
    assert_eq!(cycle(&locks, &name).await, 1, "the row exists, vacant");
    sqlx::query("SET GLOBAL read_only = 1")
        .execute(&admin)
        .await
        .unwrap();
    // Off again whatever happens inside.
    let attempt = tokio::spawn(async move { locks.try_lock(&name, LockOptions::default()).await });
    let outcome = attempt.await;
    sqlx::query("SET GLOBAL read_only = 0")
        .execute(&admin)
        .await
        .unwrap();
    match outcome.expect("no panic") {
        Err(tenure::Error::ReadOnly { .. }) => {}
        Ok(Some(guard)) => panic!("took term {} on a read-only server", guard.term()),
        other => panic!("expected ReadOnly, got {other:?}"),
    }
    drop_all(&admin, &prefix).await;
}
