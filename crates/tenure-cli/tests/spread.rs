//! `tenure spread` as real processes (issue 29's "done when"), on SQLite, PostgreSQL and
//! MariaDB: three members of `--shards 12 --ttl 2s` settle at 4/4/4 within 15 s; a SIGKILLed
//! member's shards run on the other two (6/6) within ttl + 3 s; a new member brings it back to
//! 4/4/4 (moving 4 shards, all to it); SIGTERM drains a member (its children stopped, its
//! shards released, exit 0). No shard ever runs in two places, and each shard's terms
//! strictly rise. Also: `tenure pause GROUP` / `resume GROUP`, and a member SIGSTOPped with its
//! commands past its ttl.
//!
//! Every shard's command is the test child (see `support/child.rs`), labelled
//! `MEMBER/SHARD` from `TENURE_CANDIDATE` and `TENURE_SHARD`, which logs its start and stop
//! with its `TENURE_TERM`.

mod support;

use nix::sys::signal::{kill, Signal};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use support::child::{child_program, mono_ns};
use support::leaders::{backend, wait_exit, Backend, Children, Interval, Tenure};
use support::BackendKind;

/// The bounds.
const SETTLE: Duration = Duration::from_secs(15);
const TTL: Duration = Duration::from_secs(2);

/// SIGTERM drains each member: its commands stop, its shards are released, it exits 0.
fn drain<const N: usize>(members: [Tenure; N], kids: &Children) {
    for mut m in members {
        kill(m.pid(), Signal::SIGTERM).unwrap();
        assert_eq!(
            wait_exit(&mut m.0, Duration::from_secs(20)),
            0,
            "{}",
            kids.logs()
        );
    }
}

fn member(b: &Backend, id: &str) -> Tenure {
    let log = b.log();
    let script = format!(
        "exec {} {} \"$TENURE_CANDIDATE/$TENURE_SHARD\" forever 0",
        child_program().display(),
        log.display()
    );
    let stderr = std::fs::File::create(b.dir.path().join(format!("{id}.stderr"))).unwrap();
    let args = [
        "spread",
        "grp",
        "--shards",
        "12",
        "--ttl",
        "2s",
        "--candidate",
        id,
        "--",
        "sh",
        "-c",
        &script,
    ];
    let mut c = b.tenure(&args);
    c.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(stderr)
        .env("RUST_LOG", "info");
    Tenure(c.spawn().expect("spawn tenure spread"))
}

/// (member, shard) of a child's label.
fn owner(i: &Interval) -> (&str, u32) {
    let (member, shard) = i.label.split_once('/').expect("MEMBER/SHARD");
    (member, shard.parse().expect("a shard"))
}

/// Each member's running shards, if every shard runs exactly once.
fn assignment(running: &[Interval]) -> Option<BTreeMap<String, BTreeSet<u32>>> {
    let mut by_member: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
    let mut shards = BTreeSet::new();
    for i in running.iter().filter(|i| i.stop.is_none()) {
        let (member, shard) = owner(i);
        if !shards.insert(shard) {
            return None;
        }
        by_member
            .entry(member.to_string())
            .or_default()
            .insert(shard);
    }
    Some(by_member)
}

/// Whether exactly `members` run `each` shards apiece (all 12 shards, once each).
fn balanced(running: &[Interval], members: &[&str], each: usize) -> bool {
    assignment(running).is_some_and(|a| {
        a.len() == members.len()
            && members
                .iter()
                .all(|m| a.get(*m).is_some_and(|s| s.len() == each))
    })
}

/// No shard ran in two places at once, and each shard's terms rose from one run to the next.
fn check_history(kids: &mut Children) {
    let mut by_shard: BTreeMap<u32, Vec<Interval>> = BTreeMap::new();
    for i in kids.intervals() {
        by_shard.entry(owner(&i).1).or_default().push(i);
    }
    for (shard, mut runs) in by_shard {
        runs.sort_by_key(|i| i.start);
        for pair in runs.windows(2) {
            let (a, b) = (&pair[0], &pair[1]);
            assert!(
                a.stop.is_some_and(|stop| stop <= b.start),
                "shard {shard} ran twice at once: {a:?} and {b:?}\n{}",
                kids.logs()
            );
            assert!(
                a.term < b.term,
                "shard {shard}: term {} then {}",
                a.term,
                b.term
            );
        }
    }
}

fn spread(kind: BackendKind) {
    let Some(b) = backend(kind) else {
        return;
    };
    let mut kids = Children::new(&b.log());
    let started = Instant::now();
    let m1 = member(&b, "m1");
    let m2 = member(&b, "m2");
    let m3 = member(&b, "m3");
    kids.wait_until(SETTLE, "4/4/4", |r| balanced(r, &["m1", "m2", "m3"], 4));
    eprintln!("{kind}: settled at 4/4/4 in {:?}", started.elapsed());

    kill(m3.pid(), Signal::SIGKILL).unwrap();
    let killed = Instant::now();
    kids.wait_until(TTL + Duration::from_secs(3), "6/6 after a SIGKILL", |r| {
        balanced(r, &["m1", "m2"], 6)
    });
    eprintln!("{kind}: 6/6 in {:?} after the SIGKILL", killed.elapsed());
    drop(m3);

    let joined_ns = mono_ns();
    let joined = Instant::now();
    let m4 = member(&b, "m4");
    let all = kids.wait_until(SETTLE, "4/4/4 after a join", |r| {
        balanced(r, &["m1", "m2", "m4"], 4)
    });
    eprintln!("{kind}: 4/4/4 in {:?} after the join", joined.elapsed());
    // Sticky, no stealing: only the 4 shards the new member needs moved, all to it.
    let moved: Vec<&Interval> = all.iter().filter(|i| i.start > joined_ns).collect();
    assert_eq!(moved.len(), 4, "a join moves 4 shards: {moved:#?}");
    assert!(moved.iter().all(|i| owner(i).0 == "m4"), "{moved:#?}");
    // `tenure status --json` shows the same assignment as the running children.
    let running = assignment(&kids.running()).expect("every shard once");
    let status = b.tenure(&["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let group = &v["groups"][0];
    assert_eq!(group["group"], "grp", "{v}");
    assert_eq!(group["shards"], 12, "{v}");
    assert_eq!(group["paused"], false, "{v}");
    assert_eq!(
        group["unowned"],
        serde_json::json!({"count": 0, "ranges": []}),
        "{v}"
    );
    for (m, shards) in &running {
        let shown: BTreeSet<u32> = serde_json::from_value(group["members"][m].clone()).unwrap();
        assert_eq!(&shown, shards, "{m}: {v}");
    }
    let table = b.tenure(&["status"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("GROUP") && table.contains("m4"), "{table}");
    check_history(&mut kids);

    // SIGTERM drains: the children stop, the shards are released, tenure exits 0.
    drain([m1, m2, m4], &kids);
    assert!(kids.running().is_empty(), "{:#?}", kids.running());
    check_history(&mut kids);
    // Every shard released and every member gone from the registry: no group shown.
    let status = b.tenure(&["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert!(v.get("groups").is_none(), "{v}");
    let leases = v["leases"].as_array().unwrap();
    let shards: Vec<&serde_json::Value> = leases
        .iter()
        .filter(|l| l["name"].as_str().is_some_and(|n| n.starts_with("grp/")))
        .collect();
    assert_eq!(shards.len(), 12, "{v}");
    assert!(shards.iter().all(|l| l["holder"].is_null()), "{v}");
}

/// `tenure pause GROUP` stops every shard's command and keeps every shard free while paused;
/// `tenure resume GROUP` brings it back to 6/6, each shard with a higher term and never two
/// runs at once.
fn spread_pause(kind: BackendKind) {
    let Some(b) = backend(kind) else {
        return;
    };
    let mut kids = Children::new(&b.log());
    let m1 = member(&b, "m1");
    let m2 = member(&b, "m2");
    kids.wait_until(SETTLE, "6/6", |r| balanced(r, &["m1", "m2"], 6));

    let paused = b.tenure(&["pause", "grp", "--json"]).output().unwrap();
    assert!(paused.status.success(), "{paused:?}");
    let answer: serde_json::Value = serde_json::from_slice(&paused.stdout).unwrap();
    assert_eq!(
        answer,
        serde_json::json!({"action": "pause", "group": "grp", "shards": 12, "changed": 12})
    );
    let stopped = |r: &[Interval]| r.iter().all(|i| i.stop.is_some());
    kids.wait_until(TTL * 3, "every shard's command stopped", stopped);
    // While paused (two ttls: several renew intervals of each member) nothing starts again,
    // and the status shows every shard paused and unowned.
    let quiet_until = Instant::now() + TTL * 2;
    while Instant::now() < quiet_until {
        let running = kids.running();
        assert!(running.is_empty(), "started while paused: {running:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = b.tenure(&["status", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    let all = serde_json::json!({"count": 12, "ranges": [[0, 11]]});
    assert_eq!(v["groups"][0]["paused"], true, "{v}");
    assert_eq!(v["groups"][0]["paused_shards"], all, "{v}");
    assert_eq!(v["groups"][0]["unowned"], all, "{v}");
    let table = b.tenure(&["status"]).output().unwrap();
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.contains("(paused)"), "{table}");

    let resumed = b.tenure(&["resume", "grp"]).output().unwrap();
    assert!(resumed.status.success(), "{resumed:?}");
    let said = String::from_utf8_lossy(&resumed.stdout);
    assert!(
        said.contains("grp: resumed the group's 12 shards"),
        "{said}"
    );
    kids.wait_until(SETTLE, "6/6 after the resume", |r| {
        balanced(r, &["m1", "m2"], 6)
    });
    check_history(&mut kids);
    drain([m1, m2], &kids);
}

/// SIGSTOP a member and its shards' commands past its ttl (a paused VM), then SIGCONT: the
/// other two run all 12 shards meanwhile; once resumed, the old member stops its old
/// commands at once and never runs a shard again under an old term; it rejoins and the group
/// settles at 4/4/4. PostgreSQL and MariaDB only: a process stopped inside its own SQLite
/// write transaction blocks every writer until it resumes (docs/guides/databases.md), and a
/// member's transactions come too often to stop it between them reliably.
fn spread_stopped_member(kind: BackendKind) {
    if kind == BackendKind::Sqlite {
        return;
    }
    let Some(b) = backend(kind) else {
        return;
    };
    let mut kids = Children::new(&b.log());
    let m1 = member(&b, "m1");
    let m2 = member(&b, "m2");
    let m3 = member(&b, "m3");
    kids.wait_until(SETTLE, "4/4/4", |r| balanced(r, &["m1", "m2", "m3"], 4));
    let frozen: Vec<Interval> = kids
        .running()
        .into_iter()
        .filter(|i| owner(i).0 == "m3")
        .collect();
    assert_eq!(frozen.len(), 4, "{frozen:#?}");
    let stopped_at = Instant::now();
    kill(m3.pid(), Signal::SIGSTOP).unwrap();
    for i in &frozen {
        kill(nix::unistd::Pid::from_raw(i.pid), Signal::SIGSTOP).unwrap();
    }
    // m1 and m2 run all 12 shards, each once, beside m3's frozen commands.
    let others = |r: &[Interval]| {
        let live: Vec<Interval> = r
            .iter()
            .filter(|i| i.stop.is_none() && owner(i).0 != "m3")
            .cloned()
            .collect();
        balanced(&live, &["m1", "m2"], 6)
    };
    kids.wait_until(TTL * 3 + SETTLE, "6/6 while m3 is stopped", others);
    while stopped_at.elapsed() < TTL * 2 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let resumed = Instant::now();
    kill(m3.pid(), Signal::SIGCONT).unwrap();
    for i in &frozen {
        // The resumed member may already have killed this command (a stopped process still
        // dies of SIGKILL): that is the outcome awaited below, not a failure.
        match kill(nix::unistd::Pid::from_raw(i.pid), Signal::SIGCONT) {
            Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
            Err(e) => panic!("SIGCONT to m3's old command {}: {e}", i.pid),
        }
    }
    let pids: Vec<i32> = frozen.iter().map(|i| i.pid).collect();
    kids.wait_until(Duration::from_secs(10), "m3's old commands stopped", |r| {
        r.iter()
            .filter(|i| pids.contains(&i.pid))
            .all(|i| i.stop.is_some())
    });
    eprintln!(
        "{kind}: m3's old commands stopped {:?} after SIGCONT",
        resumed.elapsed()
    );
    kids.wait_until(SETTLE, "4/4/4 after m3 resumed", |r| {
        balanced(r, &["m1", "m2", "m3"], 4)
    });
    // Apart from the frozen runs (which could not stop while frozen), no shard ran twice at
    // once; every shard's terms rose, the frozen runs' below every later one.
    let all = kids.intervals();
    let mut by_shard: BTreeMap<u32, Vec<&Interval>> = BTreeMap::new();
    for i in &all {
        by_shard.entry(owner(i).1).or_default().push(i);
    }
    for (shard, mut runs) in by_shard {
        runs.sort_by_key(|i| i.start);
        for pair in runs.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert!(a.term < b.term, "shard {shard}: {a:?} then {b:?}");
            if !pids.contains(&a.pid) {
                assert!(
                    a.stop.is_some_and(|stop| stop <= b.start),
                    "shard {shard} ran twice at once: {a:?} and {b:?}"
                );
            }
        }
    }
    drain([m1, m2, m3], &kids);
}

per_backend!(spread, spread_pause, spread_stopped_member);
