//! `tenure every` and `tenure lock -n` as real processes, on every backend.

mod support;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use support::child::{child_program, mono_ns};
use support::{runtime, BackendKind, TestDb};

fn db(kind: BackendKind) -> Option<TestDb> {
    runtime().block_on(TestDb::new(kind))
}

fn spawn(db: &TestDb, args: &[&str], id: &str) -> Child {
    let stderr = std::fs::File::create(db.dir().join(format!("{id}.stderr"))).unwrap();
    db.tenure()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("spawn tenure")
}

fn stop(children: Vec<Child>) {
    for mut c in children {
        let _ = kill(
            Pid::from_raw(i32::try_from(c.id()).expect("a pid fits in i32")),
            Signal::SIGTERM,
        );
        let _ = c.wait();
    }
}

fn logs(db: &TestDb) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(db.dir()).unwrap().flatten() {
        if entry.path().extension().is_some_and(|e| e == "stderr") {
            out += &format!(
                "--- {}\n{}",
                entry.path().display(),
                std::fs::read_to_string(entry.path()).unwrap_or_default()
            );
        }
    }
    out
}

/// Four nodes run `tenure every 1s` on one name for about 10 s; the leader is SIGKILLed once
/// (between two ticks). Every tick from the first to the last ran exactly once.
///
/// A 3 s ttl: its database timeout (600 ms) bounds each node's first connection too, and with
/// 2 s (400 ms) three of the four nodes of a loaded machine exited at start ("database did not
/// answer within 400ms"), leaving no one to take over from the killed leader.
fn every_tick_exactly_once(kind: BackendKind) {
    let Some(db) = db(kind) else { return };
    let log = db.dir().join("ticks.log");
    let line = format!(
        "echo \"$TENURE_TICK_MS $TENURE_TERM $TENURE_CANDIDATE\" >> {}",
        log.display()
    );
    let mut nodes: BTreeMap<String, Child> = BTreeMap::new();
    for i in 0..4 {
        let id = format!("n{i}");
        let args = [
            "every",
            "1s",
            "ticks",
            "--ttl",
            "3s",
            "--candidate",
            &id,
            "--",
            "sh",
            "-c",
            &line,
        ];
        nodes.insert(id.clone(), spawn(&db, &args, &id));
    }
    std::thread::sleep(Duration::from_millis(4000));
    // Kill the leader half-way between two ticks, so that no tick is interrupted mid-run (an
    // interrupted tick is run again by design: at least once for interrupted runs).
    let into_second = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_millis();
    std::thread::sleep(Duration::from_millis(((1500 - into_second) % 1000) as u64));
    let leader = db.run(&["leader", "ticks", "--json"]).json()["leader"]["holder"]
        .as_str()
        .expect("a leader")
        .to_string();
    let mut victim = nodes.remove(&leader).unwrap();
    kill(
        Pid::from_raw(i32::try_from(victim.id()).expect("a pid fits in i32")),
        Signal::SIGKILL,
    )
    .unwrap();
    let _ = victim.wait();
    std::thread::sleep(Duration::from_millis(6000));
    stop(nodes.into_values().collect());

    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let mut ticks: Vec<(i64, u64, String)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].to_string(),
            )
        })
        .collect();
    let runs = ticks.len();
    ticks.sort();
    ticks.dedup_by_key(|t| t.0);
    assert_eq!(ticks.len(), runs, "a tick ran twice: {text}\n{}", logs(&db));
    assert!(ticks.len() >= 8, "too few ticks: {text}\n{}", logs(&db));
    for w in ticks.windows(2) {
        assert_eq!(
            w[1].0 - w[0].0,
            1000,
            "a tick was skipped: {text}\n{}",
            logs(&db)
        );
        assert!(w[1].1 >= w[0].1, "terms went back: {text}");
    }
    let runners: std::collections::BTreeSet<&str> = ticks.iter().map(|t| t.2.as_str()).collect();
    assert!(
        runners.contains(leader.as_str()) && runners.len() >= 2,
        "the ticks moved to a new leader: {text}"
    );
    eprintln!(
        "{kind}: {} ticks, each once, run by {runners:?}",
        ticks.len()
    );
}

/// A semaphore of 3 with 8 contending processes: never more than 3 holders at once, and all 8
/// run. (A 3 s ttl, for its database timeout at start: see `every_tick_exactly_once`.)
fn semaphore_of_three(kind: BackendKind) {
    let Some(db) = db(kind) else { return };
    let log = db.dir().join("children.log");
    let program = child_program().to_str().unwrap().to_string();
    let mut procs = vec![];
    for i in 0..8 {
        let id = format!("p{i}");
        let args = [
            "lock",
            "sem",
            "-n",
            "3",
            "--ttl",
            "3s",
            "--candidate",
            &id,
            "--",
            &program,
            log.to_str().unwrap(),
            &id,
            "0.4",
            "0",
        ];
        procs.push(spawn(&db, &args, &id));
    }
    let until = mono_ns() + 20_000_000_000;
    for p in &mut procs {
        loop {
            if let Some(status) = p.try_wait().unwrap() {
                assert_eq!(status.code(), Some(0), "{}", logs(&db));
                break;
            }
            assert!(mono_ns() < until, "not all ran within 20 s: {}", logs(&db));
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let mut events: Vec<(i64, i32)> = vec![];
    let mut labels = std::collections::BTreeSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let at: i64 = f[1].parse().unwrap();
        events.push((at, if f[0] == "start" { 1 } else { -1 }));
        labels.insert(f[4].to_string());
    }
    // Stops sort before starts at the same instant.
    events.sort();
    let (mut now, mut most) = (0, 0);
    for (_, delta) in &events {
        now += delta;
        most = most.max(now);
    }
    assert_eq!(labels.len(), 8, "all eight ran: {text}");
    assert!(most <= 3, "{most} held the semaphore at once: {text}");
    assert!(most >= 2, "the permits were used in parallel: {text}");
    eprintln!("{kind}: 8 processes ran, at most {most} at once");
}

per_backend!(every_tick_exactly_once, semaphore_of_three);

/// A release that fails is not reported as success: the command exits 0, its lock's release
/// fails (the command renamed the lease table away), and `tenure lock` exits 69 with one line
/// that says the lock stays held.
#[test]
fn lock_release_failure_is_an_error() {
    let Some(db) = db(BackendKind::Sqlite) else {
        return;
    };
    let file = db.url.trim_start_matches("sqlite://").to_string();
    let script = format!(
        "import sqlite3; c = sqlite3.connect({file:?}); \
         c.execute('ALTER TABLE {p}lease RENAME TO {p}gone'); c.commit()",
        p = db.prefix
    );
    let out = db.run(&[
        "lock",
        "nightly",
        "--at-least",
        "1h",
        "--",
        "python3",
        "-c",
        &script,
    ]);
    out.expect_code(69);
    let lines = out.message_lines();
    let last = lines.last().expect("a message");
    assert!(
        last.starts_with("tenure: the command exited with 0, but releasing \"nightly\" failed")
            && last.contains("it stays held until its lease expires"),
        "{out}"
    );
}

/// A command under `tenure lock -n N` fences with the environment it is given: `TENURE_NAME`,
/// `TENURE_CANDIDATE` and `TENURE_TERM` name the lease it holds, the permit `NAME#i` (as
/// `TENURE_LOCK` does), so `TENURE_FENCE_SQL` with them finds its row. `TENURE_NAME` was the
/// semaphore's NAME, whose lease nobody holds, and every fenced write was refused.
#[test]
fn a_permit_holder_fences_with_its_environment() {
    let Some(db) = db(BackendKind::Sqlite) else {
        return;
    };
    let file = db.url.trim_start_matches("sqlite://").to_string();
    let script = format!(
        "import os, sqlite3, sys\n\
         e = os.environ\n\
         c = sqlite3.connect({file:?}, isolation_level=None)\n\
         c.execute('BEGIN')\n\
         row = c.execute(e['TENURE_FENCE_SQL'], (e['TENURE_NAME'], e['TENURE_CANDIDATE'], int(e['TENURE_TERM']))).fetchone()\n\
         c.execute('COMMIT')\n\
         if not row:\n\
         \x20   sys.exit('the fence refused the permit holder: %r' % [e[k] for k in ('TENURE_NAME', 'TENURE_CANDIDATE', 'TENURE_TERM', 'TENURE_LOCK')])\n\
         if e['TENURE_NAME'] != e['TENURE_LOCK']:\n\
         \x20   sys.exit('TENURE_NAME %r is not the lease held, %r' % (e['TENURE_NAME'], e['TENURE_LOCK']))\n"
    );
    let out = db.run(&[
        "lock", "sem", "-n", "2", "--ttl", "5s", "--", "python3", "-c", &script,
    ]);
    out.expect_code(0);
}
