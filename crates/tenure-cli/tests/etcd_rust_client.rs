//! The Rust `etcd-client` crate (its KV, lease, watch, lock and election clients) against
//! `tenure serve --etcd-listen`, side by side with a real etcd (`tests/support/etcd.rs`), on
//! SQLite, PostgreSQL and MariaDB. `etcd::NAME` runs a scenario on the real etcd alone.

mod support;

use etcd_client::{
    Client, Compare, CompareOp, DeleteOptions, EventType, GetOptions, KeyValue, LeaseGrantOptions,
    LeaseTimeToLiveOptions, LockOptions, PutOptions, ResignOptions, SortOrder, SortTarget, Txn,
    TxnOp, TxnOpResponse, WatchFilterType, WatchOptions,
};
use std::future::Future;
use std::time::Duration;
use support::etcd::{Target, Transcript};

side_by_side!(
    kv,
    txn,
    leases,
    keep_alive_stream,
    watch,
    watch_ids_progress_and_cancel,
    lock,
    election,
    cluster
);

/// Runs an async scenario on a runtime of its own.
fn on_runtime<F: Future<Output = Transcript>>(scenario: F) -> Transcript {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(scenario)
}

async fn connect(target: &Target) -> Client {
    Client::connect([target.url()], None)
        .await
        .expect("connect")
}

/// `future`, which must complete within 15 s.
async fn soon<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(15), future)
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 15 s"))
}

/// A lease id in both its spellings (decimal in keys' `lease`, hex in recipe keys).
fn alias_lease(t: &mut Transcript, id: i64, name: &str) {
    t.alias(format!("{id:x}"), name);
    t.alias(id.to_string(), name);
}

/// A key-value as the transcript shows it.
fn show(kv: &KeyValue) -> String {
    format!(
        "{}={} c{} m{} v{} l{}",
        String::from_utf8_lossy(kv.key()),
        String::from_utf8_lossy(kv.value()),
        kv.create_revision(),
        kv.mod_revision(),
        kv.version(),
        kv.lease()
    )
}

fn shows(kvs: &[KeyValue]) -> String {
    kvs.iter().map(show).collect::<Vec<_>>().join(", ")
}

/// A failure as the transcript shows it: the gRPC code and etcd's text.
fn failure(e: etcd_client::Error) -> String {
    match e {
        etcd_client::Error::GRpcStatus(s) => format!("{:?}: {}", s.code(), s.message()),
        other => format!("{other}"),
    }
}

fn revision_of(header: Option<&etcd_client::ResponseHeader>) -> i64 {
    header.map_or(-1, |h| h.revision())
}

fn kv(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        for (k, v) in [
            ("a", "1"),
            ("b", "2"),
            ("c", "3"),
            ("b", "22"),
            ("d", "4"),
            ("a", "11"),
        ] {
            let put = c
                .put(k, v, Some(PutOptions::new().with_prev_key()))
                .await
                .expect("put");
            t.record(
                &format!("put {k}"),
                format!(
                    "{} prev {:?}",
                    revision_of(put.header()),
                    put.prev_key().map(show)
                ),
            );
        }
        let cases: Vec<(&str, GetOptions)> = vec![
            ("all", GetOptions::new().with_all_keys()),
            ("prefix", GetOptions::new().with_prefix()),
            ("range a..c", GetOptions::new().with_range("c")),
            ("from b", GetOptions::new().with_from_key()),
            ("limit 2", GetOptions::new().with_all_keys().with_limit(2)),
            (
                "count only",
                GetOptions::new().with_all_keys().with_count_only(),
            ),
            (
                "keys only",
                GetOptions::new().with_all_keys().with_keys_only(),
            ),
            (
                "at revision 4",
                GetOptions::new().with_all_keys().with_revision(4),
            ),
            (
                "by version desc",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Version, SortOrder::Descend),
            ),
            (
                "by create desc",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Create, SortOrder::Descend),
            ),
            (
                "by mod asc",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Mod, SortOrder::Ascend),
            ),
            (
                "by value desc",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Value, SortOrder::Descend),
            ),
            (
                "by key desc, limit 2",
                GetOptions::new()
                    .with_all_keys()
                    .with_sort(SortTarget::Key, SortOrder::Descend)
                    .with_limit(2),
            ),
            (
                "min mod 4",
                GetOptions::new().with_all_keys().with_min_mod_revision(4),
            ),
            (
                "max mod 4",
                GetOptions::new().with_all_keys().with_max_mod_revision(4),
            ),
            (
                "min create 3, max create 3",
                GetOptions::new()
                    .with_all_keys()
                    .with_min_create_revision(3)
                    .with_max_create_revision(3),
            ),
            (
                "serializable",
                GetOptions::new().with_prefix().with_serializable(),
            ),
        ];
        for (what, options) in cases {
            let key = if what == "prefix" { "" } else { "a" };
            let key = if what == "from b" { "b" } else { key };
            match c.get(key, Some(options)).await {
                Ok(got) => t.record(
                    what,
                    format!(
                        "{} count {} more {} [{}]",
                        revision_of(got.header()),
                        got.count(),
                        got.more(),
                        shows(got.kvs())
                    ),
                ),
                Err(e) => t.record(what, failure(e)),
            }
        }
        let gone = c
            .delete(
                "b",
                Some(DeleteOptions::new().with_range("d").with_prev_key()),
            )
            .await
            .expect("delete");
        t.record(
            "delete b..d",
            format!(
                "{} deleted {} [{}]",
                revision_of(gone.header()),
                gone.deleted(),
                shows(gone.prev_kvs())
            ),
        );
        let none = c.delete("zz", None).await.expect("delete");
        t.record(
            "delete nothing",
            format!("{} deleted {}", revision_of(none.header()), none.deleted()),
        );
        for (what, r) in [
            ("empty key", c.get("", None).await.map(|_| ())),
            (
                "future",
                c.get("a", Some(GetOptions::new().with_revision(100)))
                    .await
                    .map(|_| ()),
            ),
        ] {
            t.record(what, r.map_or_else(failure, |()| "answered".into()));
        }
        t.record(
            "ignore_value on absent",
            c.put("zz", "", Some(PutOptions::new().with_ignore_value()))
                .await
                .map_or_else(failure, |_| "answered".into()),
        );
        t.record(
            "ignore_lease",
            c.put("a", "12", Some(PutOptions::new().with_ignore_lease()))
                .await
                .map_or_else(failure, |p| revision_of(p.header()).to_string()),
        );
        let compacted = c.compact(5, None).await;
        t.record(
            "compact 5",
            compacted.map_or_else(failure, |r| revision_of(r.header()).to_string()),
        );
        t.record(
            "get at 4",
            c.get("a", Some(GetOptions::new().with_revision(4)))
                .await
                .map_or_else(failure, |_| "answered".into()),
        );
        t.record(
            "get at 5",
            c.get("a", Some(GetOptions::new().with_revision(5)))
                .await
                .map_or_else(failure, |g| shows(g.kvs())),
        );
        t.record(
            "compact 3",
            c.compact(3, None)
                .await
                .map_or_else(failure, |_| "answered".into()),
        );
        t
    })
}

fn txn(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let lease = c.lease_grant(60, None).await.expect("grant").id();
        t.alias(lease.to_string(), "LEASE");
        c.put("k", "1", None).await.expect("put");
        c.put("held", "x", Some(PutOptions::new().with_lease(lease)))
            .await
            .expect("put");
        c.put("p/1", "a", None).await.expect("put");
        c.put("p/2", "b", None).await.expect("put");
        let txns: Vec<(&str, Txn)> = vec![
            (
                "version = 1",
                Txn::new()
                    .when([Compare::version("k", CompareOp::Equal, 1)])
                    .and_then([TxnOp::put("k", "2", None), TxnOp::get("k", None)])
                    .or_else([TxnOp::get("nothing", None)]),
            ),
            (
                "value != 2 fails",
                Txn::new()
                    .when([Compare::value("k", CompareOp::NotEqual, "2")])
                    .and_then([TxnOp::put("k", "no", None)])
                    .or_else([TxnOp::delete(
                        "p/1",
                        Some(DeleteOptions::new().with_prev_key()),
                    )]),
            ),
            (
                "create > 0 and mod < 100",
                Txn::new()
                    .when([
                        Compare::create_revision("k", CompareOp::Greater, 0),
                        Compare::mod_revision("k", CompareOp::Less, 100),
                    ])
                    .and_then([TxnOp::get(
                        "",
                        Some(GetOptions::new().with_all_keys().with_keys_only()),
                    )]),
            ),
            (
                "lease equal",
                Txn::new()
                    .when([Compare::lease("held", CompareOp::Equal, lease)])
                    .and_then([TxnOp::put(
                        "held",
                        "y",
                        Some(PutOptions::new().with_ignore_lease()),
                    )]),
            ),
            (
                "lease of a key without one",
                Txn::new()
                    .when([Compare::lease("k", CompareOp::Equal, 0)])
                    .and_then([TxnOp::get("k", None)]),
            ),
            (
                "range compare: every p/ key's value > a",
                Txn::new()
                    .when([Compare::value("p/", CompareOp::Greater, "a").with_prefix()])
                    .and_then([TxnOp::put("range", "yes", None)])
                    .or_else([TxnOp::put("range", "no", None)]),
            ),
            (
                "absent key: version = 0",
                Txn::new()
                    .when([Compare::version("absent", CompareOp::Equal, 0)])
                    .and_then([TxnOp::put("absent", "now", None)]),
            ),
            (
                "only reads: no new revision",
                Txn::new().and_then([TxnOp::get("k", None)]),
            ),
            (
                "nested",
                Txn::new().and_then([TxnOp::txn(
                    Txn::new()
                        .when([Compare::value("k", CompareOp::Equal, "2")])
                        .and_then([TxnOp::put("nested", "1", None)]),
                )]),
            ),
            (
                "duplicate key",
                Txn::new().and_then([TxnOp::put("d", "1", None), TxnOp::put("d", "2", None)]),
            ),
            (
                "delete then put the same key",
                Txn::new().and_then([TxnOp::delete("k", None), TxnOp::put("k", "3", None)]),
            ),
            (
                "too many ops",
                Txn::new().and_then(
                    (0..129)
                        .map(|i| TxnOp::put(format!("many/{i}"), "v", None))
                        .collect::<Vec<_>>(),
                ),
            ),
            (
                "unknown lease",
                Txn::new().and_then([TxnOp::put(
                    "u",
                    "v",
                    Some(PutOptions::new().with_lease(4242)),
                )]),
            ),
        ];
        for (what, txn) in txns {
            match c.txn(txn).await {
                Ok(r) => {
                    let ops: Vec<String> = r
                        .op_responses()
                        .into_iter()
                        .map(|op| match op {
                            TxnOpResponse::Put(p) => format!("put {}", revision_of(p.header())),
                            TxnOpResponse::Get(g) => format!("get [{}]", shows(g.kvs())),
                            TxnOpResponse::Delete(d) => {
                                format!("delete {} [{}]", d.deleted(), shows(d.prev_kvs()))
                            }
                            TxnOpResponse::Txn(n) => {
                                format!("txn {} {}", n.succeeded(), n.op_responses().len())
                            }
                        })
                        .collect();
                    t.record(
                        what,
                        format!("{} {} {ops:?}", revision_of(r.header()), r.succeeded()),
                    );
                }
                Err(e) => t.record(what, failure(e)),
            }
        }
        let all = c
            .get("", Some(GetOptions::new().with_all_keys()))
            .await
            .expect("get");
        t.record("after", shows(all.kvs()));
        t
    })
}

fn leases(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let chosen = c.lease_grant(30, None).await.expect("grant");
        t.alias(chosen.id().to_string(), "CHOSEN");
        t.record(
            "grant 30",
            format!("ttl {} {}", chosen.ttl(), chosen.error()),
        );
        let given = c
            .lease_grant(40, Some(LeaseGrantOptions::new().with_id(0x1234)))
            .await
            .expect("grant with id");
        t.record(
            "grant with id",
            format!("{:x} ttl {}", given.id(), given.ttl()),
        );
        t.record(
            "the same id again",
            c.lease_grant(40, Some(LeaseGrantOptions::new().with_id(0x1234)))
                .await
                .map_or_else(failure, |_| "granted".into()),
        );
        t.record(
            "ttl too large",
            c.lease_grant(9_000_000_001, None)
                .await
                .map_or_else(failure, |_| "granted".into()),
        );
        for ttl in [0, -5, 1] {
            let small = c
                .lease_grant(ttl, None)
                .await
                .expect("a small ttl is raised to the minimum");
            t.alias(small.id().to_string(), format!("SMALL{ttl}"));
            t.record(&format!("grant {ttl}"), format!("ttl {}", small.ttl()));
            c.lease_revoke(small.id()).await.expect("revoke");
        }
        c.put("l/1", "v", Some(PutOptions::new().with_lease(0x1234)))
            .await
            .expect("put");
        c.put("l/2", "v", Some(PutOptions::new().with_lease(0x1234)))
            .await
            .expect("put");
        let ttl = c
            .lease_time_to_live(0x1234, Some(LeaseTimeToLiveOptions::new().with_keys()))
            .await
            .expect("ttl");
        assert!((35..=40).contains(&ttl.ttl()), "{}", ttl.ttl());
        // etcd lists a lease's keys in a Go map's order (random); tenure in key order.
        let mut keys: Vec<String> = ttl
            .keys()
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        keys.sort();
        t.record(
            "time to live",
            format!("granted {} keys {keys:?}", ttl.granted_ttl()),
        );
        let mut ids: Vec<String> = c
            .leases()
            .await
            .expect("leases")
            .leases()
            .iter()
            .map(|l| l.id().to_string())
            .collect();
        ids.sort();
        t.record(
            "leases",
            format!("{} {}", ids.len(), ids.contains(&0x1234.to_string())),
        );
        let revoked = c.lease_revoke(0x1234).await.expect("revoke");
        t.record(
            "revoke: one revision for both keys",
            revision_of(revoked.header()).to_string(),
        );
        t.record(
            "keys gone",
            shows(
                c.get("l/", Some(GetOptions::new().with_prefix()))
                    .await
                    .expect("get")
                    .kvs(),
            ),
        );
        t.record(
            "revoke again",
            c.lease_revoke(0x1234)
                .await
                .map_or_else(failure, |_| "revoked".into()),
        );
        let gone = c
            .lease_time_to_live(0x1234, None)
            .await
            .expect("ttl of a revoked lease");
        t.record(
            "time to live of a revoked",
            format!("ttl {} granted {}", gone.ttl(), gone.granted_ttl()),
        );
        t.record(
            "put with a revoked",
            c.put("x", "y", Some(PutOptions::new().with_lease(0x1234)))
                .await
                .map_or_else(failure, |_| "put".into()),
        );
        t
    })
}

fn keep_alive_stream(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let lease = c.lease_grant(20, None).await.expect("grant").id();
        t.alias(lease.to_string(), "LEASE");
        // The crate reads the answer to its first keep-alive itself.
        let (mut keeper, mut stream) = c.lease_keep_alive(lease).await.expect("keep alive");
        t.record("keeper", keeper.id().to_string());
        keeper.keep_alive().await.expect("send");
        let first = soon("first", stream.message())
            .await
            .expect("message")
            .expect("an answer");
        t.record("first", format!("{} ttl {}", first.id(), first.ttl()));
        keeper.keep_alive().await.expect("send");
        let again = soon("again", stream.message())
            .await
            .expect("message")
            .expect("an answer");
        t.record("again", format!("{} ttl {}", again.id(), again.ttl()));
        c.lease_revoke(lease).await.expect("revoke");
        // A revoked lease answers TTL 0, and the stream stays open.
        keeper.keep_alive().await.expect("send");
        let revoked = soon("revoked", stream.message())
            .await
            .expect("message")
            .expect("an answer");
        t.record("revoked", format!("{} ttl {}", revoked.id(), revoked.ttl()));
        keeper.keep_alive().await.expect("send");
        let still = soon("still", stream.message())
            .await
            .expect("message")
            .expect("the stream stays open");
        t.record("still open", format!("ttl {}", still.ttl()));
        t
    })
}

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
        for what in ["below the floor: created", "then canceled"] {
            let r = next(&mut stream).await;
            t.record(
                what,
                format!(
                    "id {} created {} canceled {} compact {} reason {:?} events {}",
                    r.watch_id(),
                    r.created(),
                    r.canceled(),
                    r.compact_revision(),
                    r.cancel_reason(),
                    r.events().len()
                ),
            );
        }
        t
    })
}

/// The next answer of a watch stream, within 10 s.
async fn next(stream: &mut etcd_client::WatchResponseStream) -> etcd_client::WatchResponse {
    tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("an answer within 10 s")
        .expect("message")
        .expect("the stream is open")
}

fn lock(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let lease = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, lease, "LEASE1");
        let held = c
            .lock("my-lock", Some(LockOptions::new().with_lease(lease)))
            .await
            .expect("lock");
        let key = String::from_utf8_lossy(held.key()).into_owned();
        t.record("locked", &key);
        let token = c.get(held.key(), None).await.expect("get").kvs()[0].create_revision();
        t.record("fencing token (create revision)", token.to_string());
        let second_lease = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, second_lease, "LEASE2");
        let mut other = connect(target).await;
        let waiting = tokio::spawn(async move {
            other
                .lock("my-lock", Some(LockOptions::new().with_lease(second_lease)))
                .await
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished(), "the second locker waits");
        c.unlock(held.key()).await.expect("unlock");
        let second = tokio::time::timeout(Duration::from_secs(15), waiting)
            .await
            .expect("the second gets it")
            .expect("task")
            .expect("lock");
        t.record("second locked", String::from_utf8_lossy(second.key()));
        // A holder whose lease is revoked loses the lock to the next.
        let third_lease = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, third_lease, "LEASE3");
        let mut third = connect(target).await;
        let waiting = tokio::spawn(async move {
            third
                .lock("my-lock", Some(LockOptions::new().with_lease(third_lease)))
                .await
        });
        c.lease_revoke(second_lease).await.expect("revoke");
        let got = tokio::time::timeout(Duration::from_secs(15), waiting)
            .await
            .expect("the third gets it")
            .expect("task")
            .expect("lock");
        t.record(
            "third locked after the holder's lease went",
            String::from_utf8_lossy(got.key()),
        );
        t.record(
            "unlock of a key that is gone",
            c.unlock(held.key())
                .await
                .map_or_else(failure, |r| revision_of(r.header()).to_string()),
        );
        t.record(
            "lock with an unknown lease",
            c.lock("other", Some(LockOptions::new().with_lease(77)))
                .await
                .map_or_else(failure, |_| "locked".into()),
        );
        t
    })
}

fn election(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        let mut c = connect(target).await;
        let a = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, a, "A");
        let won = c
            .campaign("my-election", "alpha", a)
            .await
            .expect("campaign");
        let leader = won.leader().expect("a leader key").clone();
        t.record(
            "a leads",
            format!("{} rev {}", leader.key_str().unwrap_or(""), leader.rev()),
        );
        let now = c.leader("my-election").await.expect("leader");
        t.record("leader", now.kv().map(show).unwrap_or_default());
        let mut observe = c.observe("my-election").await.expect("observe");
        let seen = soon("observe", observe.message())
            .await
            .expect("observe")
            .expect("a leader");
        t.record("observed", seen.kv().map(show).unwrap_or_default());
        c.proclaim(
            "alpha-2",
            Some(etcd_client::ProclaimOptions::new().with_leader(leader.clone())),
        )
        .await
        .expect("proclaim");
        let seen = tokio::time::timeout(Duration::from_secs(10), observe.message())
            .await
            .expect("proclaimed")
            .expect("observe")
            .expect("a leader");
        t.record(
            "observed the proclamation",
            seen.kv().map(show).unwrap_or_default(),
        );
        let b = c.lease_grant(30, None).await.expect("grant").id();
        alias_lease(&mut t, b, "B");
        let mut other = connect(target).await;
        let waiting = tokio::spawn(async move { other.campaign("my-election", "beta", b).await });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!waiting.is_finished(), "b waits while a leads");
        c.resign(Some(ResignOptions::new().with_leader(leader.clone())))
            .await
            .expect("resign");
        let b_won = tokio::time::timeout(Duration::from_secs(15), waiting)
            .await
            .expect("b leads")
            .expect("task")
            .expect("campaign");
        t.record(
            "b leads",
            b_won
                .leader()
                .map(|l| l.key_str().unwrap_or("").to_string())
                .unwrap_or_default(),
        );
        let seen = tokio::time::timeout(Duration::from_secs(10), observe.message())
            .await
            .expect("observed b")
            .expect("observe")
            .expect("a leader");
        t.record("observed b", seen.kv().map(show).unwrap_or_default());
        t.record(
            "proclaim by a, no longer leader",
            c.proclaim(
                "x",
                Some(etcd_client::ProclaimOptions::new().with_leader(leader)),
            )
            .await
            .map_or_else(failure, |_| "proclaimed".into()),
        );
        t.record(
            "leader of no election",
            c.leader("none")
                .await
                .map_or_else(failure, |r| format!("{:?}", r.kv().map(show))),
        );
        t
    })
}

fn cluster(target: &Target) -> Transcript {
    on_runtime(async {
        let mut t = Transcript::new();
        t.alias(target.url(), "ENDPOINT");
        let mut c = connect(target).await;
        let members = c.member_list().await.expect("members");
        t.record("members", members.members().len().to_string());
        t.record(
            "client URLs",
            format!("{:?}", members.members()[0].client_urls()),
        );
        let status = c.status().await.expect("status");
        t.record(
            "status version",
            status.version().starts_with("3.4.").to_string(),
        );
        t.record(
            "leader is a member",
            members
                .members()
                .iter()
                .any(|m| m.id() == status.leader())
                .to_string(),
        );
        t.record(
            "authenticate",
            Client::connect(
                [target.url()],
                Some(etcd_client::ConnectOptions::new().with_user("root", "x")),
            )
            .await
            .map_or_else(failure, |_| "connected".into()),
        );
        t
    })
}
