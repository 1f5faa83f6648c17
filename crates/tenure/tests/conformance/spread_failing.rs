//! A spreading member whose one transaction fails half-way (issue 37.4): its tick is one
//! transaction — registration, the group's read, renewals, releases and takes — so a failure
//! at any of its calls leaves nothing of it written, and the member believes nothing the
//! failed tick did: no shard is taken, and no shard is believed past the deadline its last
//! committed renewal allowed (its work stops while the lease is still its own in the
//! database, so the member that takes it next starts after).

use crate::common::unique;
use crate::spread::{join, settle, start, Shared, TTL, WITHIN};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure::backend::FailingBackend;
use tenure::{ShardGuard, Spread, Store};
use tokio::time::{sleep, Instant};

/// The calls of a member's tick in a group that has no row yet (as long as each fails, the
/// next is such a tick again): the clock, the group's row locked, created and locked again,
/// the group's view, the member's row, the batch of lease operations (its takes). The very
/// first tick also purges expired members before the batch, so the batch is its eighth call:
/// with `at` = 7 the first tick fails at the purge and every later one at the batch.
const FIRST_TICK_CALLS: u32 = 7;
/// The calls of a later tick: the clock, the group's row locked, the view, the member's row,
/// the batch of renewals.
const TICK_CALLS: u32 = 5;

/// Waits (bounded) until `failing` has failed `more` transactions beyond `from`.
async fn failed(failing: &FailingBackend, from: u64, more: u64) {
    let started = Instant::now();
    while failing.failed() < from + more {
        assert!(started.elapsed() < WITHIN, "no tick failed");
        sleep(Duration::from_millis(10)).await;
    }
}

pub(crate) async fn spread_a_first_tick_failing_half_way_writes_nothing(store: Store) {
    let failing = Arc::new(FailingBackend::new(store.backend().clone()));
    let flaky = Store::from_backend(failing.clone(), Duration::from_secs(10));
    for at in 1..=FIRST_TICK_CALLS {
        let group = unique("first");
        let record = Shared::default();
        failing.fail_at("spread", Some(at));
        let from = failing.failed();
        let a = start(join(&flaky, &group, "a").await, &record);
        failed(&failing, from, 2).await;
        // Nothing of it: no group row, no member, no shard held, nothing handed out.
        assert!(
            !tenure::spread::exists(&store, &group).await.unwrap(),
            "call {at}"
        );
        let seen = Spread::new(store.clone(), &group, 12)
            .unwrap()
            .assignment()
            .await
            .unwrap();
        assert!(seen.members.is_empty(), "call {at}: {seen:?}");
        assert_eq!(seen.unowned_count(), 12, "call {at}: {seen:?}");
        assert!(record.lock().unwrap().starts.is_empty(), "call {at}");
        assert!(a.owned.borrow().is_empty());
        // Healed, it joins as any member does.
        failing.fail_at("spread", None);
        settle(&store, &group, &[&a], 12, &record).await;
        a.leave().await;
    }
}

/// What the work of one shard saw when its tenure ended.
#[derive(Debug)]
struct Loss {
    name: String,
    /// How long after its deadline `lost()` completed.
    late: Duration,
    /// Whether the database still held the lease for this tenure at that instant: the row
    /// read just after shows it with this holder and term, and what it had left then plus
    /// the time the read took to begin is positive.
    still_ours: bool,
}

/// Works on `guard` until it is lost, then records when, and whether its lease was still
/// its own in the database at that instant.
fn watch(store: &Store, guard: ShardGuard, losses: &Arc<Mutex<Vec<Loss>>>) {
    let (store, losses) = (store.clone(), losses.clone());
    tokio::spawn(async move {
        guard.lost().await;
        let lost_at = Instant::now();
        let late = lost_at.saturating_duration_since(guard.deadline());
        let snapshot = store.get(guard.name()).await.unwrap();
        let since_loss = i64::try_from(lost_at.elapsed().as_micros()).unwrap();
        let still_ours = snapshot.leases.first().is_some_and(|l| {
            l.holder.as_deref() == Some(guard.candidate())
                && l.term == guard.term()
                && l.expires_at.0 - snapshot.now.0 + since_loss > 0
        });
        losses.lock().unwrap().push(Loss {
            name: guard.name().to_string(),
            late,
            still_ours,
        });
        drop(guard);
    });
}

pub(crate) async fn spread_a_renewal_failing_half_way_ends_every_belief_by_its_deadline(
    store: Store,
) {
    let failing = Arc::new(FailingBackend::new(store.backend().clone()));
    let flaky = Store::from_backend(failing.clone(), Duration::from_secs(10));
    for at in 1..=TICK_CALLS {
        let group = unique("renew");
        let losses = Arc::new(Mutex::new(Vec::new()));
        let mut a = join(&flaky, &group, "a").await;
        let started = Instant::now();
        let mut held = 0;
        while held < 12 {
            assert!(started.elapsed() < WITHIN, "a took {held} of 12");
            let guard = tokio::time::timeout(WITHIN, a.next())
                .await
                .unwrap()
                .unwrap();
            watch(&store, guard, &losses);
            held += 1;
        }
        // From now on every tick of a fails at call `at`: nothing renews its shards.
        failing.fail_at("spread", Some(at));
        let from = failing.failed();
        failed(&failing, from, 1).await;
        let until = Instant::now() + WITHIN;
        while losses.lock().unwrap().len() < 12 {
            assert!(
                Instant::now() < until,
                "call {at}: not every shard was lost"
            );
            sleep(Duration::from_millis(20)).await;
        }
        for loss in losses.lock().unwrap().iter() {
            // Its work stopped by its deadline (a loaded scheduler's slack aside), while the
            // lease was still its own: nobody else could have started it.
            let shard = &loss.name;
            assert!(
                loss.late < Duration::from_secs(1),
                "call {at}, {shard}: {loss:?}"
            );
            assert!(loss.still_ours, "call {at}, {shard}: {loss:?}");
        }
        // The failed ticks wrote nothing: a's row was not refreshed, so it drops out of the
        // group once its ttl has passed since its last committed tick.
        let gone_by = Instant::now() + TTL * 2 + WITHIN;
        while tenure::spread::groups(&store)
            .await
            .unwrap()
            .contains_key(&group)
        {
            assert!(Instant::now() < gone_by, "call {at}: a's row was refreshed");
            sleep(Duration::from_millis(50)).await;
        }
        failing.fail_at("spread", None);
        a.leave().await;
    }
}

/// Whether the database shows a transaction waiting for a lock (PostgreSQL's `pg_locks`,
/// MariaDB's `INNODB_LOCK_WAITS`).
async fn a_lock_is_awaited(store: &Store) -> bool {
    use sqlx::Connection;
    let count: i64 = match store.kind() {
        tenure::BackendKind::Postgres => {
            // The server's locks, read directly (not through a pooler).
            let url = crate::common::postgres_url();
            let mut c = sqlx::PgConnection::connect(&url).await.expect("connect");
            sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE NOT granted")
                .fetch_one(&mut c)
                .await
                .expect("pg_locks")
        }
        tenure::BackendKind::MySql => {
            let url = crate::common::mysql_url();
            let mut c = sqlx::MySqlConnection::connect(&url).await.expect("connect");
            sqlx::query_scalar("SELECT count(*) FROM information_schema.INNODB_LOCK_WAITS")
                .fetch_one(&mut c)
                .await
                .expect("lock waits")
        }
        _ => 0,
    };
    count > 0
}

/// Two members take one new shard at once: a's tick inserts its lease row and is held open
/// before it commits; b's tick, which read the shard free, takes it too and waits on a's row;
/// then a commits. b's insert must fail as a conflict — its tick runs again and finds the
/// shard held — rather than overwrite a's tenure (a batch's write of a new lease row is an
/// insert, never an upsert): at no moment do both believe in the shard. A ttl of a minute
/// gives the held tick and b's wait a database timeout of 12 s, far beyond the race's steps.
pub(crate) async fn spread_two_members_creating_one_shard_never_both_own_it(store: Store) {
    let group = unique("race");
    let join = |store: &Store, id: &str| {
        Spread::new(store.clone(), &group, 1)
            .unwrap()
            .member(id)
            .ttl(Duration::from_secs(60))
            .join()
    };
    let holding = Arc::new(FailingBackend::new(store.backend().clone()));
    let held = Store::from_backend(holding.clone(), Duration::from_secs(30));
    let watching = Arc::new(FailingBackend::new(store.backend().clone()));
    let watched = Store::from_backend(watching.clone(), Duration::from_secs(30));
    // SQLite's writers queue before they begin: the race cannot happen there.
    if store.kind() == tenure::BackendKind::Sqlite {
        return;
    }
    // The group's row exists (an operator paused and resumed it), its shard's lease does not:
    // the first ticks do not queue on the group's row, and both insert the shard's.
    let spread = Spread::new(store.clone(), &group, 1).unwrap();
    spread.pause("test").await.unwrap();
    spread.resume("test").await.unwrap();
    assert!(store
        .get(&format!("{group}/0"))
        .await
        .unwrap()
        .leases
        .is_empty());
    let record = Shared::default();
    holding.hold("spread");
    let a = start(join(&held, "a").await.unwrap(), &record);
    tokio::time::timeout(WITHIN, holding.holding())
        .await
        .expect("a's tick held");
    let b = start(join(&watched, "b").await.unwrap(), &record);
    // b's tick reached its batch (the take of shard 0), then waits on a's row.
    let until = Instant::now() + WITHIN;
    while watching.batches_begun() == 0 {
        assert!(Instant::now() < until, "b never tried to take the shard");
        sleep(Duration::from_millis(5)).await;
    }
    let until = Instant::now() + Duration::from_secs(5);
    while !a_lock_is_awaited(&store).await && Instant::now() < until {
        sleep(Duration::from_millis(20)).await;
    }
    holding.let_go();
    // b's tick ends within its database timeout: taken (wrongly) or not.
    let watch_until = Instant::now() + Duration::from_secs(15);
    while Instant::now() < watch_until {
        let (x, y) = (a.owned.borrow().clone(), b.owned.borrow().clone());
        assert!(x.is_disjoint(&y), "both own a shard: {x:?} {y:?}");
        let violations = record.lock().unwrap().violations.clone();
        assert!(violations.is_empty(), "{violations:?}");
        sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(a.count() + b.count(), 1, "one of them owns the shard");
    a.leave().await;
    b.leave().await;
}
