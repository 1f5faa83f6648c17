//! Leadership follows health (`--health-cmd`), as real processes: an unhealthy leader steps
//! down to a healthy candidate with the reason in the history, does not campaign while
//! unhealthy, and leads again once healthy; a hanging check counts as a failure; a running
//! check never delays a stop; bad values are refused before anything connects.
//!
//! Each child appends `start`/`stop` lines with a CLOCK_MONOTONIC timestamp (see
//! `support::leaders`); the intervals of different children must be disjoint.

mod support;

use nix::sys::signal::{kill, Signal};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;
use support::child::{child_program, mono_ns};
use support::leaders::{alive, backend, ms, wait_exit, Backend, Children, Tenure, TTL_MS};
use support::BackendKind;

/// `--health-cmd CHECK` with a short interval and timeout, and two failures to step down.
fn health(check: &str, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    args.extend(
        [
            "--health-cmd",
            check,
            "--health-interval",
            "300ms",
            "--health-timeout",
            "300ms",
            "--health-failures",
            "2",
        ]
        .map(String::from),
    );
    args
}

fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// The `released` events of NAME's history.
fn released(b: &Backend, name: &str) -> Vec<Value> {
    let out = b.tenure(&["history", name, "--json"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("history JSON");
    v["events"]
        .as_array()
        .expect("events")
        .iter()
        .filter(|e| e["event"] == "released")
        .cloned()
        .collect()
}

/// The pids a check wrote to `file` (`echo $$ >> FILE`).
fn pids_in(file: &Path) -> Vec<i32> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// A leader whose check starts failing loses the lead to the healthy `--keep-campaigning`
/// candidate, with the reason in the history; it does not campaign while unhealthy (the lease
/// stays vacant after the other one leaves), and leads again once its check passes.
fn unhealthy_leader_steps_down(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let mut kids = Children::new(&b.log());
    let flag_a = b.dir.path().join("a.unhealthy");
    let flag_b = b.dir.path().join("b.unhealthy");
    let check = |flag: &Path| format!("test ! -e '{}'", flag.display());
    let args_a = health(&check(&flag_a), &["--keep-campaigning"]);
    let args_b = health(&check(&flag_b), &["--keep-campaigning"]);
    let mut a = Tenure(b.run("health", "A", &refs(&args_a), "forever", 0));
    kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1);
    let mut other = Tenure(b.run("health", "B", &refs(&args_b), "forever", 0));
    // Healthy checks change nothing: A keeps the lead.
    std::thread::sleep(Duration::from_millis(1500));
    let first = kids.running();
    assert_eq!(first.len(), 1, "one child runs: {first:?}");
    assert_eq!(first[0].label, "A");
    assert!(released(&b, "health").is_empty());

    std::fs::write(&flag_a, "").unwrap();
    let all = kids.wait_until(Duration::from_secs(15), "B's child start", |i| {
        i.iter().any(|c| c.label == "B")
    });
    kids.assert_disjoint();
    let second = all.iter().find(|c| c.label == "B").unwrap().clone();
    assert!(second.term > first[0].term);
    let events = released(&b, "health");
    let ours = events
        .iter()
        .find(|e| e["holder"] == "A" && e["term"] == first[0].term)
        .unwrap_or_else(|| panic!("A's release in the history: {events:?}"));
    assert_eq!(
        ours["detail"], "health check failed 2 times: exit status 1",
        "{ours}"
    );
    let log = b.stderr_of("A");
    assert!(
        log.contains("health check failed") && log.contains("failures=2 of=2"),
        "each failure is logged with its count: {log}"
    );
    assert!(
        log.contains("not campaigning until the health check passes"),
        "{log}"
    );

    // B leaves; A, still unhealthy, must not take the lease.
    kill(other.pid(), Signal::SIGTERM).unwrap();
    assert_eq!(wait_exit(&mut other.0, Duration::from_secs(10)), 0);
    std::thread::sleep(Duration::from_millis(2 * TTL_MS));
    let running = kids.running();
    assert!(
        running.is_empty(),
        "a child runs while A is unhealthy: {running:?}"
    );
    let out = b.tenure(&["leader", "health", "--json"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"leader\":null"), "nobody leads: {text}");

    // Healthy again: A campaigns and leads.
    let healthy_at = mono_ns();
    std::fs::remove_file(&flag_a).unwrap();
    let all = kids.wait_until(Duration::from_secs(10), "A's second child", |i| {
        i.len() == 3 && i.iter().filter(|c| c.stop.is_none()).count() == 1
    });
    let third = all.iter().find(|c| c.stop.is_none()).unwrap();
    assert_eq!(third.label, "A");
    assert!(third.term > second.term);
    eprintln!(
        "{kind}: A led again {} ms after its check passed",
        ms(third.start - healthy_at)
    );
    assert!(b.stderr_of("A").contains("health check passes again"));
    kids.assert_disjoint();
    kill(a.pid(), Signal::SIGTERM).unwrap();
    assert_eq!(wait_exit(&mut a.0, Duration::from_secs(10)), 0);
}

/// A check that hangs counts as a failure once its timeout passes, and its whole process group
/// (here a grandchild too) is killed; without `--keep-campaigning` tenure exits 75.
fn hanging_check_fails(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let mut kids = Children::new(&b.log());
    let pids = b.dir.path().join("check.pids");
    let check = format!(
        "echo $$ >> '{0}'; sleep 60 & echo $! >> '{0}'; wait",
        pids.display()
    );
    let args = health(&check, &[]);
    let mut a = Tenure(b.run("hang", "A", &refs(&args), "forever", 0));
    kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1);
    assert_eq!(
        wait_exit(&mut a.0, Duration::from_secs(15)),
        75,
        "{}",
        b.stderr_of("A")
    );
    kids.wait_until(Duration::from_secs(1), "the child's stop", |i| {
        i[0].stop.is_some()
    });
    let events = released(&b, "hang");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0]["detail"], "health check failed 2 times: timed out after 300ms",
        "{events:?}"
    );
    let pids = pids_in(&pids);
    assert_eq!(
        pids.len(),
        4,
        "two checks, each a shell and a sleep: {pids:?}"
    );
    let until = mono_ns() + 2_000_000_000;
    while pids.iter().any(|&p| alive(p)) {
        assert!(mono_ns() < until, "a check process survived: {pids:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A check that is still running when leadership is lost (demote) does not hold up the stop:
/// the command is stopped, tenure exits 75 long before the check's timeout, and the check is
/// killed.
fn running_check_never_delays_a_stop(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let mut kids = Children::new(&b.log());
    let pids = b.dir.path().join("check.pids");
    let check = format!("echo $$ >> '{}'; sleep 60", pids.display());
    let args = [
        "--health-cmd",
        &check,
        "--health-interval",
        "8s",
        "--health-timeout",
        "8s",
    ];
    let mut a = Tenure(b.run("busy-check", "A", &args, "forever", 0));
    kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1);
    let until = mono_ns() + 20_000_000_000;
    while pids_in(&pids).is_empty() {
        assert!(
            mono_ns() < until,
            "the check never ran: {}",
            b.stderr_of("A")
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let demoted = mono_ns();
    let out = b.tenure(&["demote", "busy-check"]).output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        wait_exit(&mut a.0, Duration::from_secs(5)),
        75,
        "{}",
        b.stderr_of("A")
    );
    eprintln!(
        "{kind}: stopped {} ms after the demote, the check still running",
        ms(mono_ns() - demoted)
    );
    assert!(kids.intervals()[0].stop.is_some());
    let pids = pids_in(&pids);
    assert_eq!(pids.len(), 1, "{pids:?}");
    let until = mono_ns() + 2_000_000_000;
    while alive(pids[0]) {
        assert!(mono_ns() < until, "the check survived tenure");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `tenure lock` steps down the same way: exit 75, the reason in the lock's history.
fn lock_steps_down(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let mut kids = Children::new(&b.log());
    let log = b.log();
    let mut args = vec!["lock".to_string(), "L".into(), "--ttl".into()];
    args.push(format!("{TTL_MS}ms"));
    args.extend(health("exit 3", &[]));
    args.push("--".into());
    args.extend(
        [
            child_program().to_str().unwrap(),
            log.to_str().unwrap(),
            "L",
            "forever",
            "0",
        ]
        .map(String::from),
    );
    let mut lock = Tenure(
        b.tenure(&refs(&args))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    kids.wait_until(Duration::from_secs(10), "the child's start", |i| {
        i.len() == 1
    });
    assert_eq!(wait_exit(&mut lock.0, Duration::from_secs(15)), 75);
    assert!(kids.intervals()[0].stop.is_some(), "the child was stopped");
    let events = released(&b, "L");
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(
        events[0]["detail"],
        "health check failed 2 times: exit status 3"
    );
}

per_backend!(
    unhealthy_leader_steps_down,
    hanging_check_fails,
    running_check_never_delays_a_stop,
    lock_steps_down
);

/// Bad health values are refused with exit 64 and a one-line message naming the value, before
/// anything connects (the SQLite file is never created).
#[test]
fn bad_values_are_refused() {
    let Some(b) = backend(BackendKind::Sqlite) else {
        return;
    };
    let db = b.dir.path().join("t.db");
    // `backend` ran `tenure status`, which created the file: start from none.
    std::fs::remove_file(&db).unwrap();
    let cases: [(&[&str], &str); 6] = [
        (
            &["--health-cmd", "true", "--health-failures", "0"],
            "invalid --health-failures 0",
        ),
        (
            &["--health-cmd", "true", "--health-interval", "0s"],
            "invalid --health-interval 0s",
        ),
        (
            &["--health-cmd", "true", "--health-timeout", "0s"],
            "invalid --health-timeout 0s",
        ),
        (
            &[
                "--health-cmd",
                "true",
                "--health-interval",
                "1s",
                "--health-timeout",
                "2s",
            ],
            "invalid --health-timeout 2s: it must not exceed --health-interval (1s)",
        ),
        (&["--health-cmd", ""], "invalid --health-cmd \"\""),
        (
            &["--health-cmd", "true", "--health-interval", "soon"],
            "'soon'",
        ),
    ];
    for command in ["run", "lock"] {
        for (flags, message) in &cases {
            let mut args = vec![command, "x"];
            args.extend_from_slice(flags);
            args.extend_from_slice(&["--", "true"]);
            let out = b.tenure(&args).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
            let lines: Vec<&str> = stderr
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
                .collect();
            assert_eq!(lines.len(), 1, "{args:?}: one line: {stderr}");
            assert!(lines[0].contains(message), "{args:?}: {stderr}");
        }
        // A health flag without a check.
        let out = b
            .tenure(&[command, "x", "--health-failures", "2", "--", "true"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{stderr}");
        assert!(stderr.contains("--health-cmd"), "{stderr}");
    }
    assert!(!db.exists(), "the SQLite file was created");
}
