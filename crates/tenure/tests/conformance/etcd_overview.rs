//! What an operator sees of the etcd layer on one backend (`Etcd::overview`): the revision and
//! the floor, the live leases with their TTLs, time left and keys, and the Lock and Election
//! recipes' keys with each prefix's owner — bounded, with counts of the rest.

use crate::common::until_db_passes;
use crate::etcd_support::{current, grant, put, put_leased, Scoped};
use tenure::etcd::proto::etcdserverpb::{CompactionRequest, LeaseGrantRequest};
use tenure::etcd::proto::v3electionpb::CampaignRequest;
use tenure::etcd::proto::v3lockpb::LockRequest;
use tenure::etcd::{Overview, MIN_LEASE_TTL};
use tenure::{DbTime, Store};

fn keys_of(o: &Overview) -> Vec<(String, String, i64, bool)> {
    o.recipe_keys
        .iter()
        .map(|k| {
            (
                String::from_utf8_lossy(&k.prefix).into_owned(),
                String::from_utf8_lossy(&k.key).into_owned(),
                k.lease,
                k.owner,
            )
        })
        .collect()
}

/// A lock with a waiter, an election, leased keys that are no recipe's, a lease without keys:
/// each shows as it is, and the owners are the recipes' (lowest create revision per prefix).
pub(crate) async fn etcd_overview_shows_leases_and_recipe_owners(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    let fresh = etcd.overview(10).await.unwrap();
    assert_eq!((fresh.revision, fresh.floor), (1, 0));
    assert!(fresh.leases.is_empty() && fresh.recipe_keys.is_empty());
    assert!(fresh.is_unused());

    // Random ids (up to 63 bits: the SQL's hex must match Rust's) and a given one.
    let holder = grant(etcd, 60).await;
    let waiter = grant(etcd, 90).await;
    let leader = etcd
        .lease_grant(&LeaseGrantRequest { ttl: 30, id: 0xabc })
        .await
        .unwrap()
        .id;
    let idle = grant(etcd, 120).await;
    let locked = etcd
        .lock(&LockRequest {
            name: b"jobs/nightly".to_vec(),
            lease: holder,
        })
        .await
        .unwrap();
    let token = current(etcd).await;
    assert_eq!(locked.key, format!("jobs/nightly/{holder:x}").into_bytes());
    // The waiter's key, as its Lock puts it before it waits.
    let queued = put_leased(etcd, &format!("jobs/nightly/{waiter:x}"), "", waiter).await;
    etcd.campaign(&CampaignRequest {
        name: b"web".to_vec(),
        lease: leader,
        value: b"10.0.0.1".to_vec(),
    })
    .await
    .unwrap();
    // Leased keys of another shape, and a plain key: no recipe's.
    put_leased(etcd, "config", "x", holder).await;
    put_leased(etcd, &format!("other/{holder:x}"), "x", waiter).await;
    put_leased(etcd, &format!("other/{waiter:x}x"), "x", waiter).await;
    put(etcd, "plain", "x").await;

    let o = etcd.overview(10).await.unwrap();
    assert_eq!(o.revision, current(etcd).await);
    assert!(!o.is_unused());
    let leases: Vec<(i64, i64, u64)> = o
        .leases
        .iter()
        .map(|l| (l.id, l.granted_ttl, l.keys))
        .collect();
    // Earliest end first.
    assert_eq!(
        leases,
        [
            (leader, 30, 1),
            (holder, 60, 2),
            (waiter, 90, 3),
            (idle, 120, 0)
        ]
    );
    for l in &o.leases {
        let ttl = std::time::Duration::from_secs(l.granted_ttl.unsigned_abs());
        assert!(l.remaining <= ttl && l.remaining > ttl / 2, "{l:?}");
    }
    assert_eq!((o.more_leases, o.more_recipe_keys), (0, 0));
    let mut expected = vec![
        (
            "jobs/nightly/".to_string(),
            format!("jobs/nightly/{holder:x}"),
            holder,
            true,
        ),
        (
            "jobs/nightly/".to_string(),
            format!("jobs/nightly/{waiter:x}"),
            waiter,
            false,
        ),
        ("web/".to_string(), "web/abc".to_string(), leader, true),
    ];
    expected.sort_by(|a, b| a.1.cmp(&b.1));
    assert_eq!(keys_of(&o), expected);
    let revisions: Vec<(bool, i64)> = o
        .recipe_keys
        .iter()
        .filter(|k| k.prefix == b"jobs/nightly/")
        .map(|k| (k.owner, k.create_revision))
        .collect();
    assert!(
        revisions.contains(&(true, token)),
        "the lock's fencing token"
    );
    assert!(revisions.contains(&(false, queued)));

    // Bounded: the first of each, and how many more.
    let one = etcd.overview(1).await.unwrap();
    assert_eq!((one.leases.len(), one.more_leases), (1, 3));
    assert_eq!(one.leases[0].id, leader);
    assert_eq!((one.recipe_keys.len(), one.more_recipe_keys), (1, 2));
    assert_eq!(keys_of(&one)[0], expected[0]);

    // A compaction moves the floor, not the revision.
    let revision = o.revision;
    etcd.compact(&CompactionRequest {
        revision: revision - 1,
        physical: false,
    })
    .await
    .unwrap();
    let compacted = etcd.overview(10).await.unwrap();
    assert_eq!(
        (compacted.revision, compacted.floor),
        (revision, revision - 1)
    );
    s.drop_tables().await;
}

/// A lease that ends by the database's clock leaves the overview at once, whether or not its
/// keys were reaped yet; when its keys are reaped the next waiter owns the lock.
pub(crate) async fn etcd_overview_follows_the_database_clock(store: Store) {
    let s = Scoped::new(store).await;
    let etcd = &s.etcd;
    let short = grant(etcd, MIN_LEASE_TTL).await;
    let long = grant(etcd, 60).await;
    put_leased(etcd, &format!("lock/{short:x}"), "", short).await;
    put_leased(etcd, &format!("lock/{long:x}"), "", long).await;
    let before = etcd.overview(10).await.unwrap();
    let owners: Vec<(i64, bool)> = before
        .recipe_keys
        .iter()
        .map(|k| (k.lease, k.owner))
        .collect();
    assert_eq!(owners.len(), 2);
    assert!(owners.contains(&(short, true)) && owners.contains(&(long, false)));

    let now = etcd.store().list().await.unwrap().now;
    until_db_passes(etcd.store(), DbTime(now.0 + MIN_LEASE_TTL * 1_000_000)).await;
    let ended = etcd.overview(10).await.unwrap();
    let live: Vec<i64> = ended.leases.iter().map(|l| l.id).collect();
    assert_eq!(live, [long], "an ended lease is gone at once");
    assert_eq!(ended.recipe_keys.len(), 2, "its key stays until a reap");

    assert_eq!(etcd.reap(10).await.unwrap().leases, 1);
    let reaped = etcd.overview(10).await.unwrap();
    let owners: Vec<(i64, bool)> = reaped
        .recipe_keys
        .iter()
        .map(|k| (k.lease, k.owner))
        .collect();
    assert_eq!(owners, [(long, true)], "the next waiter owns the lock");
    s.drop_tables().await;
}

/// The bytes the layer's tables take (`Etcd::size`, etcd's `dbSize` in `Maintenance.Status`):
/// more than nothing from the start, and more after a few hundred kilobytes are written
/// (MySQL's figure is InnoDB's estimate, which its statistics update after the writes: waited
/// for, within 60 s).
pub(crate) async fn etcd_size_counts_the_layers_tables(store: Store) {
    let kind = store.kind();
    let s = Scoped::new(store).await;
    let empty = s.etcd.size().await.expect("size");
    assert!(empty > 0, "{kind}: the empty tables take {empty} bytes");
    let value = "v".repeat(1024);
    for i in 0..300 {
        put(&s.etcd, &format!("size/{i:04}"), &value).await;
    }
    let written = std::time::Instant::now();
    let deadline = written + std::time::Duration::from_secs(60);
    loop {
        let full = s.etcd.size().await.expect("size");
        if full >= empty + 300 * 1024 {
            eprintln!(
                "{kind}: the etcd tables took {empty} bytes empty, {full} with 300 KiB of values \
                 ({:?} after the writes)",
                written.elapsed()
            );
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{kind}: {empty} bytes before 300 KiB of values, {full} after"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    s.drop_tables().await;
}
