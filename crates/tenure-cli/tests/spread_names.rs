//! A group's name is no election's (issue 29), at the command line, on SQLite, PostgreSQL and
//! MariaDB: `tenure spread` refuses a group named like a held lease (once released, the name
//! gives way: issue 35.5), and `tenure run` / `lock` / `every` / `serve --campaign` refuse a
//! live group's name and its shards' names — each with a one-line error naming the value and
//! exit code 64, changing nothing.

mod support;

use std::time::{Duration, Instant};
use support::leaders::{backend, wait_exit, Backend, Tenure};
use support::BackendKind;

/// Runs `tenure ARGS` to its end: its exit code and stderr.
fn refused(b: &Backend, args: &[&str]) -> (i32, String) {
    let out = b.tenure(args).output().expect("run tenure");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap_or(-1), stderr)
}

/// Asserts a refusal as bad input, in one line naming `value` and `rule`.
fn assert_refused(b: &Backend, args: &[&str], value: &str, rule: &str) {
    let (code, stderr) = refused(b, args);
    assert_eq!(code, 64, "{args:?}: {stderr}");
    let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("invalid")).collect();
    assert_eq!(lines.len(), 1, "{args:?}: {stderr}");
    assert!(
        lines[0].contains(&format!("{value:?}")) && lines[0].contains(rule),
        "{args:?}: {stderr}"
    );
}

/// Waits (bounded) until `tenure status --json` shows `what`.
fn wait_for(b: &Backend, what: &str, shows: impl Fn(&serde_json::Value) -> bool) {
    let start = Instant::now();
    loop {
        let status = b.tenure(&["status", "--json"]).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap_or_default();
        if shows(&v) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no {what}: {v}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn spread_names(kind: BackendKind) {
    let Some(b) = backend(kind) else {
        return;
    };
    // A held lease by the name first: no group may take it.
    let quiet = |c: &mut std::process::Command| {
        c.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
    };
    let mut lock = b.tenure(&["lock", "taken", "--", "sleep", "4"]);
    quiet(&mut lock);
    let mut lock = Tenure(lock.spawn().expect("spawn tenure lock"));
    wait_for(&b, "the lock on taken", |v| {
        v["leases"].as_array().is_some_and(|ls| {
            ls.iter()
                .any(|l| l["name"] == "taken" && !l["holder"].is_null())
        })
    });
    assert_refused(
        &b,
        &["spread", "taken", "--shards", "2", "--", "true"],
        "taken",
        "a group's name must be no lease's name",
    );
    let status = b.tenure(&["status", "--json"]).output().unwrap();
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(!shown.contains("taken/0"), "no shard was taken: {shown}");
    // Released (its command exits), the lease (its row stays) no longer blocks the name: the
    // way back after an election, a lock or a Consul session used it.
    assert_eq!(wait_exit(&mut lock.0, Duration::from_secs(30)), 0);
    let mut group = b.tenure(&[
        "spread", "taken", "--shards", "2", "--ttl", "2s", "--", "sleep", "600",
    ]);
    quiet(&mut group);
    let mut group = Tenure(group.spawn().expect("spawn tenure spread"));
    wait_for(&b, "the group taken", |v| {
        v["groups"][0]["group"] == "taken"
    });
    nix::sys::signal::kill(group.pid(), nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(wait_exit(&mut group.0, Duration::from_secs(20)), 0);

    // A live group: its name and its shards are no election's or lock's.
    let mut member = b
        .tenure(&[
            "spread", "jobs", "--shards", "2", "--ttl", "2s", "--", "sleep", "600",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn tenure spread");
    wait_for(&b, "the group jobs", |v| v["groups"][0]["group"] == "jobs");
    let rule = "an election's or lock's name must be no group's name";
    assert_refused(&b, &["run", "jobs", "--", "true"], "jobs", rule);
    assert_refused(&b, &["lock", "jobs", "--", "true"], "jobs", rule);
    let rule = "only the group's members take it";
    assert_refused(&b, &["lock", "jobs/1", "--", "true"], "jobs/1", rule);
    assert_refused(&b, &["every", "1m", "jobs/0", "--", "true"], "jobs/0", rule);
    // `tenure serve --campaign` too, before it listens (a port of this test's range).
    let mut serve = Tenure(
        b.tenure(&["serve", "--listen", "127.0.0.1:41729", "--campaign", "jobs"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn tenure serve"),
    );
    let code = wait_exit(&mut serve.0, Duration::from_secs(20));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut serve.0.stderr.take().unwrap(), &mut stderr).unwrap();
    assert_eq!(code, 64, "{stderr}");
    assert!(stderr.contains("invalid name \"jobs\""), "{stderr}");
    // Beyond the group's shards, or not a shard's spelling: an ordinary name.
    for other in ["jobs/2", "jobs/01", "jobs/x"] {
        let (code, stderr) = refused(&b, &["lock", other, "--", "true"]);
        assert_eq!(code, 0, "{other}: {stderr}");
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(member.id()).unwrap()),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(wait_exit(&mut member, Duration::from_secs(20)), 0);
}

per_backend!(spread_names);
