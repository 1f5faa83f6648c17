//! Debian's etcdctl 3.4 (`ETCDCTL_API=3`) against both sides.

use crate::side_by_side;
use crate::support::etcd::*;
use crate::support::Background;
use nix::sys::signal::Signal;
use std::time::Duration;

side_by_side!(kv, txn, lease, watch, lock, elect, members);

/// The current revision, as `get` reports it.
fn revision(target: &Target) -> i64 {
    let json = etcdctl(target, &["get", "revision-probe", "-w", "json"]).json();
    json["header"]["revision"].as_i64().expect("a revision")
}

fn kv(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    for (key, value) in [
        ("a", "1"),
        ("a/b", "2"),
        ("a/c", "3"),
        ("b", "4"),
        ("a", "11"),
    ] {
        t.record_run(
            &format!("put {key} {value}"),
            &etcdctl(target, &["put", key, value]),
        );
    }
    let a = etcdctl(target, &["get", "a", "-w", "json"]).json();
    assert_eq!(a["kvs"][0]["version"], 2, "{a}");
    t.record_json("get a", &a);
    for args in [
        &["get", "a"][..],
        &["get", "a", "--print-value-only"],
        &["get", "a", "--prefix"],
        &["get", "a", "--prefix", "--keys-only"],
        &["get", "a", "--prefix", "--limit=1", "-w", "json"],
        &["get", "a/b", "--from-key"],
        &["get", "a", "--rev=2"],
        &["get", "a", "--prefix", "--rev=3"],
        &[
            "get",
            "a",
            "--prefix",
            "--sort-by=MODIFY",
            "--order=DESCEND",
        ],
        &["get", "a", "--prefix", "--sort-by=VALUE", "--order=ASCEND"],
        &["get", "a", "--prefix", "--keys-only", "-w", "json"],
        &["get", "", "--prefix", "-w", "json"],
        &["get", "a", "c"],
        &["get", "nothing", "-w", "json"],
    ] {
        let out = etcdctl(target, args);
        if args.contains(&"json") {
            t.record_json(&format!("{args:?}"), &out.json());
        } else {
            t.record_run(&format!("{args:?}"), &out);
        }
    }
    t.record_run(
        "put --prev-kv",
        &etcdctl(target, &["put", "b", "5", "--prev-kv"]),
    );
    t.record_run(
        "put --ignore-value",
        &etcdctl(target, &["put", "b", "--ignore-value"]),
    );
    t.record_run(
        "put --ignore-value absent",
        &etcdctl(target, &["put", "zz", "--ignore-value"]),
    );
    t.record_run("del a/b", &etcdctl(target, &["del", "a/b"]));
    t.record_run("del absent", &etcdctl(target, &["del", "absent"]));
    t.record_run(
        "del --prefix --prev-kv",
        &etcdctl(target, &["del", "a", "--prefix", "--prev-kv"]),
    );
    t.record_json(
        "after",
        &etcdctl(target, &["get", "", "--from-key", "-w", "json"]).json(),
    );
    t.record_run("compaction 4", &etcdctl(target, &["compaction", "4"]));
    t.record_run(
        "get --rev=3 (compacted)",
        &etcdctl(target, &["get", "a", "--rev=3"]),
    );
    t.record_run(
        "get --rev=99 (future)",
        &etcdctl(target, &["get", "a", "--rev=99"]),
    );
    t.record_run("compaction 4 again", &etcdctl(target, &["compaction", "4"]));
    t.record_run(
        "compaction 99 (future)",
        &etcdctl(target, &["compaction", "99"]),
    );
    t
}

fn txn(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    t.record_run("put k 1", &etcdctl(target, &["put", "k", "1"]));
    // (etcdctl 3.4 cannot parse a lease compare: the Rust client's scenarios have it.)
    let cases: [(&str, &str); 6] = [
        (
            "version equal",
            "version(\"k\") = \"1\"\n\nput k 2\nget k\n\nput k no\n\n",
        ),
        (
            "value not equal",
            "value(\"k\") != \"2\"\n\nput k no\n\ndel k --prev-kv\nput j 1\n\n",
        ),
        (
            "create 0 (absent)",
            "create(\"k\") = \"0\"\n\nput k 3\n\n\n",
        ),
        (
            "mod greater",
            "mod(\"k\") > \"0\"\nmod(\"j\") < \"100\"\n\nget k\nget j\n\n\n",
        ),
        (
            "range compare",
            "value(\"j\") = \"1\"\n\nget j --prefix\n\n\n",
        ),
        ("delete all", "\n\ndel --prefix \"\"\n\n\n"),
    ];
    for (what, input) in cases {
        let out = etcdctl_input(target, &["txn", "-w", "json"], Some(input.as_bytes()));
        assert_eq!(out.code, Some(0), "{what}: {out:?}");
        t.record_json(what, &out.json());
    }
    let plain = etcdctl_input(
        target,
        &["txn"],
        Some(b"create(\"q\") = \"0\"\n\nput q 1\n\n\n"),
    );
    t.record_run("plain", &plain);
    t.record_json(
        "after",
        &etcdctl(target, &["get", "", "--prefix", "-w", "json"]).json(),
    );
    t
}

/// A lease id printed in hex, in decimal (as `-w json` prints it).
fn decimal(hex: &str) -> String {
    i64::from_str_radix(hex, 16).map_or_else(|_| hex.to_string(), |n| n.to_string())
}

/// `lease grant`'s id, from `lease 694d7a3cb8bd4c0c granted with TTL(60s)`.
fn granted(out: &Ctl) -> String {
    out.stdout
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no lease id: {out:?}"))
        .to_string()
}

fn lease(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    let grant = etcdctl(target, &["lease", "grant", "60"]);
    let id = granted(&grant);
    t.alias(id.clone(), "LEASE1");
    t.alias(decimal(&id), "LEASE1");
    t.record_run("grant 60", &grant);
    t.record_run(
        "put with it",
        &etcdctl(target, &["put", "k", "v", "--lease", &id]),
    );
    t.record_run(
        "put again",
        &etcdctl(target, &["put", "k2", "v", "--lease", &id]),
    );
    let ttl = etcdctl(
        target,
        &["lease", "timetolive", &id, "--keys", "-w", "json"],
    )
    .json();
    let remaining = ttl["ttl"]
        .as_i64()
        .unwrap_or_else(|| panic!("no ttl: {ttl}"));
    assert!((55..=60).contains(&remaining), "{ttl}");
    // etcd lists a lease's keys in a Go map's order (random); tenure in key order.
    let mut keys: Vec<String> = ttl["keys"]
        .as_array()
        .map(|keys| keys.iter().map(ToString::to_string).collect())
        .unwrap_or_default();
    keys.sort();
    t.record(
        "timetolive granted, keys",
        format!("{} {keys:?}", ttl["granted-ttl"]),
    );
    t.record_run(
        "keep-alive --once",
        &etcdctl(target, &["lease", "keep-alive", "--once", &id]),
    );
    t.record_run("list", &etcdctl(target, &["lease", "list"]));
    let get = etcdctl(target, &["get", "k", "-w", "json"]).json();
    t.record("the key's lease", get["kvs"][0]["lease"].to_string());
    t.record_run("revoke", &etcdctl(target, &["lease", "revoke", &id]));
    t.record_json(
        "keys gone",
        &etcdctl(target, &["get", "k", "--prefix", "-w", "json"]).json(),
    );
    t.record_run("revoke again", &etcdctl(target, &["lease", "revoke", &id]));
    t.record_run(
        "timetolive of a revoked",
        &etcdctl(target, &["lease", "timetolive", &id]),
    );
    t.record_run(
        "keep-alive of a revoked",
        &etcdctl(target, &["lease", "keep-alive", "--once", &id]),
    );
    t.record_run(
        "put with an unknown",
        &etcdctl(target, &["put", "x", "y", "--lease=1234"]),
    );
    t.record_run("list after", &etcdctl(target, &["lease", "list"]));
    // A lease that runs out: its key goes at once, in one revision.
    let short = etcdctl(target, &["lease", "grant", "2"]);
    let short_id = granted(&short);
    t.alias(short_id.clone(), "LEASE2");
    t.record_run("grant 2", &short);
    t.record_run(
        "put e1",
        &etcdctl(target, &["put", "e1", "v", "--lease", &short_id]),
    );
    t.record_run(
        "put e2",
        &etcdctl(target, &["put", "e2", "v", "--lease", &short_id]),
    );
    let before = revision(target);
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let left = etcdctl(
            target,
            &["get", "e", "--prefix", "--keys-only", "-w", "json"],
        )
        .json();
        if left["count"].as_i64().unwrap_or(0) == 0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the keys of a 2 s lease outlived 15 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    t.record(
        "expired in one revision",
        (revision(target) - before).to_string(),
    );
    t.record_run(
        "timetolive of an expired",
        &etcdctl(target, &["lease", "timetolive", &short_id]),
    );
    t
}

fn watch(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    let start = revision(target) + 1;
    let rev = format!("--rev={start}");
    let watcher = Background::spawn(etcdctl_command(target).args([
        "watch",
        "w/",
        "--prefix",
        "--prev-kv",
        &rev,
    ]));
    let plain = Background::spawn(etcdctl_command(target).args(["watch", "w/1", &rev]));
    t.record_run("put w/1", &etcdctl(target, &["put", "w/1", "a"]));
    t.record_run("put w/2", &etcdctl(target, &["put", "w/2", "b"]));
    t.record_run("put other", &etcdctl(target, &["put", "other", "c"]));
    t.record_run("put w/1 again", &etcdctl(target, &["put", "w/1", "d"]));
    let txn = etcdctl_input(target, &["txn"], Some(b"\nput w/3 e\nput w/4 f\n\n\n"));
    t.record_run("txn of two", &txn);
    t.record_run("del --prefix", &etcdctl(target, &["del", "w/", "--prefix"]));
    let within = Duration::from_secs(10);
    // etcdctl prints an event as its type, the previous key and value if any, then the key
    // and value: 3 + 3 + 5 + 3 + 3 lines for the puts, 4 × 5 for the deletes.
    for line in watcher.lines(37, within, "watch --prefix --prev-kv") {
        t.record("watch w/", line);
    }
    for line in plain.lines(3 * 3, within, "watch w/1") {
        t.record("watch w/1", line);
    }
    // A watch from the first revision replays the whole history, then stays.
    let replay = Background::spawn(etcdctl_command(target).args(["watch", "w/1", "--rev=1"]));
    for line in replay.lines(3 * 3, within, "replay") {
        t.record("replay", line);
    }
    t
}

fn lock(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    let first = Background::spawn(etcdctl_command(target).args(["lock", "L"]));
    let key = first
        .next_line(Duration::from_secs(10))
        .expect("the first locker holds L");
    assert!(key.starts_with("L/"), "{key}");
    t.alias(key.clone(), "L/FIRST");
    t.record("first holds", &key);
    let second = Background::spawn(etcdctl_command(target).args(["lock", "L"]));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while etcdctl(
        target,
        &["get", "L/", "--prefix", "--keys-only", "-w", "json"],
    )
    .json()["count"]
        != 2
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the second locker's key did not appear"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    t.record("lock keys", "2, the second waiting");
    assert_eq!(
        second.next_line(Duration::from_secs(2)),
        None,
        "the second waits while L is held"
    );
    first.signal(Signal::SIGINT);
    let next = second
        .next_line(Duration::from_secs(15))
        .expect("the second gets L after the first");
    assert!(next.starts_with("L/") && next != key, "{next}");
    t.alias(next.clone(), "L/SECOND");
    t.record("second holds", &next);
    second.signal(Signal::SIGINT);
    // With a command: run while holding the lock.
    let ran = etcdctl(target, &["lock", "L2", "echo", "held"]);
    t.record_run("lock -- echo", &ran);
    t.record_json(
        "no lock keys left",
        &etcdctl(
            target,
            &["get", "L", "--prefix", "--keys-only", "-w", "json"],
        )
        .json(),
    );
    t
}

fn elect(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    let a = Background::spawn(etcdctl_command(target).args(["elect", "E", "proposal-a"]));
    let elected = a.lines(2, Duration::from_secs(10), "a is elected");
    t.alias(elected[0].clone(), "E/A");
    t.record("a", elected.join(" "));
    let listener = Background::spawn(etcdctl_command(target).args(["elect", "-l", "E"]));
    t.record(
        "listener",
        listener
            .lines(2, Duration::from_secs(10), "the listener sees a")
            .join(" "),
    );
    let b = Background::spawn(etcdctl_command(target).args(["elect", "E", "proposal-b"]));
    assert_eq!(
        b.next_line(Duration::from_secs(2)),
        None,
        "b waits while a leads"
    );
    a.signal(Signal::SIGINT);
    let elected = b.lines(2, Duration::from_secs(15), "b is elected after a resigns");
    t.alias(elected[0].clone(), "E/B");
    t.record("b", elected.join(" "));
    t.record(
        "listener",
        listener
            .lines(2, Duration::from_secs(10), "the listener sees b")
            .join(" "),
    );
    b.signal(Signal::SIGINT);
    t
}

fn members(target: &Target) -> Transcript {
    let mut t = Transcript::new();
    t.alias(target.url(), "ENDPOINT");
    let list = etcdctl(target, &["member", "list", "-w", "json"]).json();
    let members = list["members"].as_array().expect("members");
    t.record("members", members.len().to_string());
    t.record(
        "client URLs",
        (members[0]["clientURLs"][0] == target.url().as_str()).to_string(),
    );
    t.record(
        "named",
        (!members[0]["name"].as_str().unwrap_or("").is_empty()).to_string(),
    );
    // Given as host:port: etcdctl's endpoint commands put the endpoint as it is in HTTP/2's
    // :authority (docs/guides/etcd.md).
    let status = etcdctl_at(
        &target.addr.to_string(),
        &["endpoint", "status", "-w", "json"],
    );
    let status = status.json();
    t.record(
        "status version",
        status[0]["Status"]["version"]
            .as_str()
            .is_some_and(|v| v.starts_with("3.4."))
            .to_string(),
    );
    // The size differs by nature; that there is one does not.
    t.record(
        "status dbSize positive",
        (status[0]["Status"]["dbSize"].as_i64().unwrap_or(0) > 0).to_string(),
    );
    t.record_run(
        "endpoint health",
        &etcdctl(target, &["endpoint", "health"]).without_timing(),
    );
    t
}
