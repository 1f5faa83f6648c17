//! What an etcd lock cycle costs through the layer, for the record (ignored: a measurement,
//! not a check): on each backend, sequential lock + unlock cycles of etcd's recipe with one
//! lease, and single Puts, timed from this process.
//!
//! `cargo test -p tenure --test etcd_cycles -- --ignored --nocapture`

mod common;

use std::time::{Duration, Instant};
use tenure::etcd::proto::etcdserverpb::{LeaseGrantRequest, PutRequest};
use tenure::etcd::proto::v3lockpb::{LockRequest, UnlockRequest};
use tenure::etcd::Etcd;
use tenure::BackendKind;

const CYCLES: u32 = 200;

async fn measure(kind: BackendKind) {
    let Some(store) = common::store_of_its_own(kind, "ec").await else {
        return;
    };
    let etcd = Etcd::new(store);
    let lease = etcd
        .lease_grant(&LeaseGrantRequest { ttl: 60, id: 0 })
        .await
        .unwrap()
        .id;
    let started = Instant::now();
    for _ in 0..CYCLES {
        let held = etcd
            .lock(&LockRequest {
                name: b"cycle".to_vec(),
                lease,
            })
            .await
            .unwrap();
        etcd.unlock(&UnlockRequest { key: held.key }).await.unwrap();
    }
    let cycles = started.elapsed();
    let started = Instant::now();
    for i in 0..CYCLES {
        let put = PutRequest {
            key: format!("put/{}", i % 10).into_bytes(),
            value: b"v".to_vec(),
            ..PutRequest::default()
        };
        etcd.put(&put).await.unwrap();
    }
    let puts = started.elapsed();
    let rate = |d: Duration| f64::from(CYCLES) / d.as_secs_f64();
    println!(
        "{kind}: {:.0} lock cycles/s ({:.2} ms each), {:.0} puts/s ({:.2} ms each)",
        rate(cycles),
        cycles.as_secs_f64() * 1000.0 / f64::from(CYCLES),
        rate(puts),
        puts.as_secs_f64() * 1000.0 / f64::from(CYCLES),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run with --ignored --nocapture"]
async fn etcd_lock_cycles_and_puts() {
    for kind in [
        BackendKind::Sqlite,
        BackendKind::Postgres,
        BackendKind::MySql,
    ] {
        measure(kind).await;
    }
}
