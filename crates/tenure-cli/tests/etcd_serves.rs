//! Several `tenure serve --etcd-listen` on one database are one etcd, on SQLite, PostgreSQL
//! and MariaDB: a lock taken through one excludes a locker on another; a watch on one sees
//! writes made through another (within the poll interval where the database has no change
//! signal); both are members; killing one loses nothing, and a client given both endpoints
//! carries on with the other. And one server's metrics count its calls and watchers.

mod support;

use etcd_client::{Client, GetOptions, LockOptions, PutOptions, WatchOptions};
use nix::sys::signal::Signal;
use std::time::{Duration, Instant};
use support::etcd::{etcdctl_at, etcdctl_command_at, tenure_target, tenure_target_with, Target};
use support::serve::Db;
use support::{BackendKind, Background};

// Two tests at once (libtest's default here), not four: each runs two `tenure serve` on one
// database, and four at once took PostgreSQL past its 100 connections ("too many clients
// already") in a CI run beside a CPU load.

per_backend!(
    abandoned_streams_leave_no_watcher_and_every_call_is_counted,
    many_watchers_of_a_busy_log_read_only_the_feed,
    keep_alives_sent_together_on_one_stream_share_transactions,
    etcd_writes_do_not_make_the_lease_view_read_again,
    a_lock_through_one_excludes_a_locker_on_the_other,
    a_watch_on_one_sees_writes_through_the_other,
    a_watch_sees_another_servers_write_long_before_a_slow_poll_interval,
    a_native_lock_waiter_wakes_long_before_a_slow_poll_interval,
    both_are_members_and_killing_one_loses_nothing
);

/// The poll interval of the servers: how late a watcher on MySQL (no change signal) may be.
const POLL: &str = "200ms";

/// Two servers on one database (the second shares the first's tables).
fn two(kind: BackendKind) -> Option<(tokio::runtime::Runtime, Db, Target, Target)> {
    two_polling(kind, POLL)
}

/// [`two`] with the poll interval `poll`.
fn two_polling(
    kind: BackendKind,
    poll: &str,
) -> Option<(tokio::runtime::Runtime, Db, Target, Target)> {
    if !support::etcd::etcd_installed() {
        return None;
    }
    let runtime = support::runtime();
    let db = runtime.block_on(Db::new(kind))?;
    let a = tenure_target_with(&db, &["--poll-interval", poll, "--etcd-name", "a"]);
    let b = tenure_target_with(&db, &["--poll-interval", poll, "--etcd-name", "b"]);
    Some((runtime, db, a, b))
}

fn a_lock_through_one_excludes_a_locker_on_the_other(kind: BackendKind) {
    let Some((runtime, db, a, b)) = two(kind) else {
        return;
    };
    let first = Background::spawn(etcdctl_command_at(&a.url()).args(["lock", "shared"]));
    let held = first
        .next_line(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("the lock through a:\n{}", a.log()));
    let second = Background::spawn(etcdctl_command_at(&b.url()).args(["lock", "shared"]));
    let deadline = Instant::now() + Duration::from_secs(15);
    while etcdctl_at(
        &b.url(),
        &["get", "shared/", "--prefix", "--keys-only", "-w", "json"],
    )
    .json()["count"]
        != 2
    {
        assert!(Instant::now() < deadline, "the locker on b never queued");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        second.next_line(Duration::from_secs(2)),
        None,
        "b's locker waits while a's holds"
    );
    let released = Instant::now();
    first.signal(Signal::SIGINT);
    let next = second
        .next_line(Duration::from_secs(15))
        .unwrap_or_else(|| panic!("b's locker never got the lock:\n{}\n{}", a.log(), b.log()));
    assert_ne!(next, held);
    eprintln!(
        "{kind}: the lock passed from a's holder to b's locker in {:?}",
        released.elapsed()
    );
    second.signal(Signal::SIGINT);
    drop((a, b));
    runtime.block_on(db.drop_tables());
}

fn a_watch_on_one_sees_writes_through_the_other(kind: BackendKind) {
    let Some((runtime, db, a, b)) = two(kind) else {
        return;
    };
    runtime.block_on(async {
        let mut on_a = Client::connect([a.url()], None).await.expect("connect a");
        let mut on_b = Client::connect([b.url()], None).await.expect("connect b");
        let mut watch = on_a
            .watch("seen/", Some(WatchOptions::new().with_prefix()))
            .await
            .expect("watch");
        watch.message().await.expect("message").expect("created");
        let mut worst = Duration::ZERO;
        for i in 0..5 {
            let written = Instant::now();
            let put = on_b
                .put(format!("seen/{i}"), "v", None)
                .await
                .expect("put through b");
            let revision = put.header().expect("header").revision();
            let event = tokio::time::timeout(Duration::from_secs(10), watch.message())
                .await
                .unwrap_or_else(|_| panic!("a's watcher missed a write through b:\n{}", a.log()))
                .expect("message")
                .expect("the stream is open");
            let took = written.elapsed();
            worst = worst.max(took);
            assert_eq!(event.events().len(), 1);
            assert_eq!(event.events()[0].kv().expect("kv").mod_revision(), revision);
        }
        eprintln!("{kind}: a write through b reached a watcher on a within {worst:?} (worst of 5)");
        assert!(worst < Duration::from_secs(5), "{worst:?}");
    });
    drop((a, b));
    runtime.block_on(db.drop_tables());
}

/// The hub reads the log at least every quarter second whatever `--poll-interval` says: on
/// MySQL (no change signal between servers) a watcher on one server sees a write through
/// another long before a 60 s poll interval would have it read (it waited the whole interval
/// before: `etcdctl lock`'s handoff between two servers took one).
fn a_watch_sees_another_servers_write_long_before_a_slow_poll_interval(kind: BackendKind) {
    let Some((runtime, db, a, b)) = two_polling(kind, "60s") else {
        return;
    };
    runtime.block_on(async {
        let mut on_a = Client::connect([a.url()], None).await.expect("connect a");
        let mut on_b = Client::connect([b.url()], None).await.expect("connect b");
        let mut watch = on_a
            .watch("slow/", Some(WatchOptions::new().with_prefix()))
            .await
            .expect("watch");
        watch.message().await.expect("message").expect("created");
        for i in 0..3 {
            let revision = on_b
                .put(format!("slow/{i}"), "v", None)
                .await
                .expect("put through b")
                .header()
                .expect("header")
                .revision();
            // Far above the quarter second (a busy machine), far below the 60 s poll.
            let event = tokio::time::timeout(Duration::from_secs(20), watch.message())
                .await
                .unwrap_or_else(|_| {
                    panic!("a's watcher waited for the poll interval:\n{}", a.log())
                })
                .expect("message")
                .expect("the stream is open");
            assert_eq!(event.events()[0].kv().expect("kv").mod_revision(), revision);
        }
    });
    drop((a, b));
    runtime.block_on(db.drop_tables());
}

/// A native `Lock` waiter (jetcd's, the Rust crate's) on one server gets the lock released
/// through another long before a 60 s poll interval: on MySQL nothing signals the release
/// between servers, and the waiter looks again when the watch hub's quarter-second reads find
/// new revisions (it waited the whole poll interval before).
fn a_native_lock_waiter_wakes_long_before_a_slow_poll_interval(kind: BackendKind) {
    let Some((runtime, db, a, b)) = two_polling(kind, "60s") else {
        return;
    };
    runtime.block_on(async {
        let mut on_a = Client::connect([a.url()], None).await.expect("connect a");
        let mut on_b = Client::connect([b.url()], None).await.expect("connect b");
        let first = on_a.lease_grant(60, None).await.expect("grant").id();
        let second = on_b.lease_grant(60, None).await.expect("grant").id();
        let held = on_a
            .lock("native", Some(LockOptions::new().with_lease(first)))
            .await
            .expect("the lock through a")
            .key()
            .to_vec();
        let mut locker = on_b.clone();
        let waiter = tokio::spawn(async move {
            locker
                .lock("native", Some(LockOptions::new().with_lease(second)))
                .await
                .map(|got| got.key().to_vec())
        });
        // The waiter's key is in: it waits behind a's.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let keys = on_b
                .get(
                    "native/",
                    Some(GetOptions::new().with_prefix().with_count_only()),
                )
                .await
                .expect("count")
                .count();
            if keys == 2 {
                break;
            }
            assert!(Instant::now() < deadline, "b's waiter never queued");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!waiter.is_finished(), "b's waiter waits while a holds");
        on_a.unlock(held.clone()).await.expect("unlock through a");
        let released = Instant::now();
        // Far above the quarter second (a busy machine), far below the 60 s poll.
        let got = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .unwrap_or_else(|_| panic!("b's waiter waited for the poll interval:\n{}", b.log()))
            .expect("the waiter's task")
            .expect("the lock through b");
        assert_ne!(got, held);
        eprintln!(
            "{kind}: a native Lock waiter on b got the lock released through a in {:?}",
            released.elapsed()
        );
    });
    drop((a, b));
    runtime.block_on(db.drop_tables());
}

fn both_are_members_and_killing_one_loses_nothing(kind: BackendKind) {
    let Some((runtime, db, mut a, b)) = two(kind) else {
        return;
    };
    let members = etcdctl_at(&a.url(), &["member", "list", "-w", "json"]).json();
    let mut urls: Vec<String> = members["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["clientURLs"][0].as_str().unwrap_or("").to_string())
        .collect();
    urls.sort();
    let mut expected = vec![a.url(), b.url()];
    expected.sort();
    assert_eq!(urls, expected, "both are members: {members}");
    runtime.block_on(async {
        let mut client = Client::connect([a.url(), b.url()], None)
            .await
            .expect("connect both");
        let lease = client.lease_grant(30, None).await.expect("grant").id();
        for i in 0..10 {
            client
                .put(format!("kept/{i}"), "v", None)
                .await
                .expect("put");
        }
        a.server.as_ref().expect("a server").signal_kill();
        // The client carries on with b; every write made through a is there.
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut written = 10;
        while written < 20 {
            match client.put(format!("kept/{written}"), "v", None).await {
                Ok(_) => written += 1,
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "the client did not carry on with b: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
        let mut on_b = Client::connect([b.url()], None).await.expect("connect b");
        let kept = on_b
            .get(
                "kept/",
                Some(GetOptions::new().with_prefix().with_count_only()),
            )
            .await
            .expect("get");
        assert_eq!(kept.count(), 20);
        let ttl = on_b.lease_time_to_live(lease, None).await.expect("ttl");
        assert!(
            ttl.ttl() > 0,
            "the lease outlived the server it was granted through"
        );
    });
    // a leaves the member list once its heartbeat stops.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let members = etcdctl_at(&b.url(), &["member", "list", "-w", "json"]).json();
        if members["members"].as_array().map_or(0, Vec::len) == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the killed member stayed listed: {members}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Some(server) = a.server.as_mut() {
        server.terminate(Duration::from_secs(5));
    }
    drop((a, b));
    runtime.block_on(db.drop_tables());
}

/// The value of the series `name{labels}` in Prometheus text, if present.
fn series(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(name) && l.contains(labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// tenure alone: its metrics (on the house's `/metrics`) count every call by method and code,
/// and the watchers of streams whose clients went away are gone.
fn abandoned_streams_leave_no_watcher_and_every_call_is_counted(kind: BackendKind) {
    let runtime = support::runtime();
    let Some(db) = runtime.block_on(Db::new(kind)) else {
        return;
    };
    let target = tenure_target(&db);
    let server = target.server.as_ref().expect("a server");
    // The clients on a runtime of their own, dropped with it: their connections close
    // without a word, as when a client process dies.
    let clients = tokio::runtime::Runtime::new().expect("runtime");
    clients.block_on(async {
        let mut c = Client::connect([target.url()], None)
            .await
            .expect("connect");
        c.put("m", "1", None).await.expect("put");
        let _ = c
            .put("m", "2", Some(PutOptions::new().with_lease(404)))
            .await;
        let mut watch = c.watch("m", None).await.expect("watch");
        watch.message().await.expect("created");
        let mut other = Client::connect([target.url()], None)
            .await
            .expect("connect");
        let mut second = other
            .watch("n", Some(WatchOptions::new().with_prefix()))
            .await
            .expect("watch");
        second.message().await.expect("created");
        let metrics = server.get("/metrics").text();
        assert_eq!(
            series(&metrics, "tenure_etcd_watchers", ""),
            Some(2.0),
            "{metrics}"
        );
        std::mem::forget((watch, second, c, other));
    });
    drop(clients);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let metrics = server.get("/metrics").text();
        // The revision gauge is the hub's latest read: up to a poll interval behind; the
        // leases gauge is set by the upkeep's first count, after its first beat and reap,
        // which a loaded machine can hold back past the calls above.
        if series(&metrics, "tenure_etcd_watchers", "") == Some(0.0)
            && series(&metrics, "tenure_etcd_revision", "") >= Some(2.0)
            && series(&metrics, "tenure_etcd_leases", "").is_some()
        {
            assert_eq!(
                series(
                    &metrics,
                    "tenure_etcd_calls_total",
                    r#"method="KV.Put",code="Ok""#
                ),
                Some(1.0),
                "{metrics}"
            );
            assert_eq!(
                series(
                    &metrics,
                    "tenure_etcd_calls_total",
                    r#"method="KV.Put",code="NotFound""#
                ),
                Some(1.0),
                "{metrics}"
            );
            assert!(
                series(
                    &metrics,
                    "tenure_etcd_call_seconds_count",
                    r#"method="KV.Put""#
                ) >= Some(2.0),
                "{metrics}"
            );
            assert!(
                series(&metrics, "tenure_etcd_compact_revision", "").is_some(),
                "{metrics}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "within 15 s: watchers left behind, the revision not read, or no leases gauge:\n{metrics}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // A client that stays and drops one stream: the stream is reset, its watcher ends.
    let live = tokio::runtime::Runtime::new().expect("runtime");
    live.block_on(async {
        let mut c = Client::connect([target.url()], None)
            .await
            .expect("connect");
        let mut watch = c.watch("r", None).await.expect("watch");
        watch.message().await.expect("created");
        drop(watch);
        let deadline = Instant::now() + Duration::from_secs(15);
        while series(&server.get("/metrics").text(), "tenure_etcd_watchers", "") != Some(0.0) {
            assert!(
                Instant::now() < deadline,
                "a dropped stream's watcher stayed"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    drop(target);
    runtime.block_on(db.drop_tables());
}

/// Watchers that keep up take every revision from the watch hub's feed: however many there
/// are and however fast the writes come, the database sees the hub's reads, none of theirs
/// (`tenure_etcd_watch_log_reads_total` stays 0). A watcher one batch behind (the hub
/// published the next batch before it looked again) takes that batch from the feed, where it
/// waits, not from the log.
fn many_watchers_of_a_busy_log_read_only_the_feed(kind: BackendKind) {
    const WATCHERS: usize = 16;
    const WRITERS: usize = 4;
    const PUTS: usize = 40;
    let runtime = support::runtime();
    let Some(db) = runtime.block_on(Db::new(kind)) else {
        return;
    };
    let target = tenure_target_with(&db, &["--poll-interval", POLL]);
    let server = target.server.as_ref().expect("a server");
    runtime.block_on(async {
        let client = Client::connect([target.url()], None)
            .await
            .expect("connect");
        let mut watches = Vec::new();
        for _ in 0..WATCHERS {
            let mut watch = client
                .watch_client()
                .watch("busy/", Some(WatchOptions::new().with_prefix()))
                .await
                .expect("watch");
            assert!(watch
                .message()
                .await
                .expect("created")
                .expect("created")
                .created());
            watches.push(watch);
        }
        let mut writers = tokio::task::JoinSet::new();
        for w in 0..WRITERS {
            let mut kv = client.kv_client();
            writers.spawn(async move {
                for i in 0..PUTS {
                    kv.put(format!("busy/{w}/{i}"), "v", None)
                        .await
                        .expect("put");
                }
            });
        }
        while let Some(done) = writers.join_next().await {
            done.expect("writer");
        }
        for (n, watch) in watches.iter_mut().enumerate() {
            let mut seen = 0;
            let mut last = 0;
            while seen < WRITERS * PUTS {
                let message = tokio::time::timeout(Duration::from_secs(30), watch.message())
                    .await
                    .unwrap_or_else(|_| panic!("watcher {n}: {seen} events within 30 s"))
                    .expect("message")
                    .expect("open");
                for event in message.events() {
                    let revision = event.kv().expect("kv").mod_revision();
                    assert!(revision > last, "watcher {n}: {revision} after {last}");
                    last = revision;
                    seen += 1;
                }
            }
        }
    });
    let metrics = server.get("/metrics").text();
    assert_eq!(
        series(&metrics, "tenure_etcd_watch_log_reads_total", "").unwrap_or(0.0),
        0.0,
        "watchers read the log themselves:\n{metrics}"
    );
    drop(target);
    runtime.block_on(db.drop_tables());
}

/// A client that sends many keep-alives on one stream at once (Go's lessor sends every due
/// lease's at each tick) has them renewed in a few of the server's transactions, each
/// answered in order with the granted TTL: the stream reads on while earlier ones are renewed
/// (it renewed them one transaction each before).
fn keep_alives_sent_together_on_one_stream_share_transactions(kind: BackendKind) {
    const SENT: usize = 200;
    let runtime = support::runtime();
    let Some(db) = runtime.block_on(Db::new(kind)) else {
        return;
    };
    let target = tenure_target(&db);
    let server = target.server.as_ref().expect("a server");
    let renewals = || {
        let metrics = server.get("/metrics").text();
        series(
            &metrics,
            "tenure_database_seconds_count",
            r#"op="etcd_keep_alive""#,
        )
        .unwrap_or(0.0)
    };
    runtime.block_on(async {
        let mut c = Client::connect([target.url()], None)
            .await
            .expect("connect");
        let lease = c.lease_grant(60, None).await.expect("grant").id();
        let (mut keeper, mut answers) = c.lease_keep_alive(lease).await.expect("keep alive");
        let before = renewals();
        let sending = tokio::spawn(async move {
            for _ in 0..SENT {
                keeper.keep_alive().await.expect("send");
            }
            keeper
        });
        for i in 0..SENT {
            let answer = tokio::time::timeout(Duration::from_secs(30), answers.message())
                .await
                .unwrap_or_else(|_| panic!("no answer {i} within 30 s"))
                .expect("message")
                .expect("the stream is open");
            assert_eq!((answer.id(), answer.ttl()), (lease, 60), "answer {i}");
        }
        let _keeper = sending.await.expect("the sender");
        let transactions = renewals() - before;
        eprintln!("{kind}: {SENT} keep-alives sent at once on one stream took {transactions} transactions");
        assert!(
            (1.0..=(SENT / 4) as f64).contains(&transactions),
            "{SENT} keep-alives took {transactions} transactions"
        );
    });
    drop(target);
    runtime.block_on(db.drop_tables());
}

/// An etcd write signals its layer's topic, which the house's lease view (`tenure serve`'s
/// blocking queries and status) does not follow: 20 puts leave its reads where they were
/// (each put read every lease again before, on every backend: the signal reaches the
/// server's own watchers).
fn etcd_writes_do_not_make_the_lease_view_read_again(kind: BackendKind) {
    let runtime = support::runtime();
    let Some(db) = runtime.block_on(Db::new(kind)) else {
        return;
    };
    let target = tenure_target_with(&db, &["--poll-interval", "10m"]);
    let server = target.server.as_ref().expect("a server");
    let polls = || {
        series(
            &server.get("/metrics").text(),
            "tenure_serve_polls_total",
            "",
        )
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while polls().unwrap_or(0.0) < 1.0 {
        assert!(Instant::now() < deadline, "the lease view never read");
        std::thread::sleep(Duration::from_millis(20));
    }
    let before = polls().unwrap_or(0.0);
    runtime.block_on(async {
        let mut c = Client::connect([target.url()], None)
            .await
            .expect("connect");
        for i in 0..20 {
            c.put(format!("quiet/{i}"), "v", None).await.expect("put");
        }
    });
    // A read the puts woke would have been counted by the time the watchers saw them.
    let after = polls().unwrap_or(0.0);
    assert!(
        after - before <= 1.0,
        "{kind}: 20 etcd puts made the lease view read {} times",
        after - before
    );
    drop(target);
    runtime.block_on(db.drop_tables());
}
