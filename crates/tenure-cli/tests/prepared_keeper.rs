//! A follower's keeper, started ahead of its tenure (so that a handover's new command starts
//! with one exec): it starts nothing before the tenure begins, dies with its `tenure run`, is
//! replaced if it died while waiting, and the command it starts gets the tenure's own
//! environment; and a keeper's end: tenure goes on (releases, exits) once the keeper or its
//! init tells that the tree is gone, not once they have exited. Both isolations, on SQLite (supervision does not depend on the backend; the
//! handover tests of `run.rs` and the trees of `escape.rs` run it on every backend).

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
mod support;

use std::time::{Duration, Instant};
use support::leaders::{alive, backend, stop, Backend, Children};
use support::BackendKind;

/// The processes whose parent is `pid`, as `/proc` shows them now.
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|stat| {
                stat.rsplit(')')
                    .next()
                    .and_then(|after| after.split_whitespace().nth(1))
                    .and_then(|ppid| ppid.parse::<i32>().ok())
                    == Some(pid)
            })
        })
        .filter(|&p| alive(p))
        .collect()
}

fn is_keeper(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|&b| b == 0).nth(1) == Some(b"__keep".as_slice()))
}

/// How many processes wait below a keeper started ahead of its tenure: its init in a PID
/// namespace, none as a subreaper (the keeper itself waits for the go message).
fn waiting_below(isolation: &str) -> usize {
    usize::from(isolation == "pid-namespace")
}

/// `tenure`'s keeper and the processes under it, once it has at least `below` of them (panics
/// after 10 s).
fn wait_for_keeper(tenure: i32, below: usize, what: &str) -> (i32, Vec<i32>) {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(keeper) = children_of(tenure).into_iter().find(|&p| is_keeper(p)) {
            let under = children_of(keeper);
            if under.len() >= below {
                return (keeper, under);
            }
        }
        assert!(
            Instant::now() < until,
            "{what}: no keeper with {below} process(es) below it within 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn wait_gone(pids: &[i32], what: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|&p| alive(p)) {
        assert!(
            Instant::now() < until,
            "{what}: {pids:?} still alive after 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn pid_of(child: &std::process::Child) -> i32 {
    i32::try_from(child.id()).expect("a pid fits in i32")
}

/// `A` leading `name` (its child started) and its children's log: the scene every test here
/// starts from, before its follower `B` comes.
fn a_leads(b: &Backend, name: &str, extra: &[&str]) -> (Children, std::process::Child) {
    let mut kids = Children::new(&b.log());
    let a = b.run(name, "A", extra, "forever", 0);
    kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1);
    (kids, a)
}

/// A leads; B follows with its keeper ready and nothing started; SIGKILL of B ends its keeper
/// (and, in a PID namespace, the keeper's init) without anything having run.
fn dies_with_its_tenure(isolation: &str) {
    let Some(b) = backend(BackendKind::Sqlite) else {
        return;
    };
    let extra = ["--isolation", isolation];
    let (mut kids, a) = a_leads(&b, "prep-kill", &extra);
    let mut follower = b.run("prep-kill", "B", &extra, "forever", 0);
    let (keeper, below) = wait_for_keeper(pid_of(&follower), waiting_below(isolation), "B");
    assert_eq!(
        below.len(),
        waiting_below(isolation),
        "only the keeper's init (in a PID namespace) waits below it: {below:?}"
    );
    // Give a wrongly started command time to show itself: B's next campaigns come and go.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        kids.intervals().len(),
        1,
        "B's keeper started nothing: {:#?}",
        kids.intervals()
    );
    kill(Pid::from_raw(pid_of(&follower)), Signal::SIGKILL).unwrap();
    let _ = follower.wait();
    let mut tree = below;
    tree.push(keeper);
    wait_gone(&tree, "B's keeper after B's SIGKILL");
    assert_eq!(kids.intervals().len(), 1, "{:#?}", kids.intervals());
    stop(a);
}

/// B's keeper is SIGKILLed while B follows; when A is demoted, B starts its command anyway
/// (under a new keeper), with the next term in its environment.
fn replaced_if_dead(isolation: &str) {
    let Some(b) = backend(BackendKind::Sqlite) else {
        return;
    };
    let extra = ["--isolation", isolation];
    let (mut kids, a) = a_leads(&b, "prep-dead", &extra);
    let follower = b.run("prep-dead", "B", &extra, "forever", 0);
    let (keeper, below) = wait_for_keeper(pid_of(&follower), waiting_below(isolation), "B");
    kill(Pid::from_raw(keeper), Signal::SIGKILL).unwrap();
    let mut tree = below;
    tree.push(keeper);
    wait_gone(&tree, "B's killed keeper");
    demote(&b, "prep-dead");
    let all = kids.wait_until(Duration::from_secs(15), "B's child start", |i| {
        i.iter().any(|c| c.label == "B")
    });
    let first = all.iter().find(|c| c.label == "A").unwrap();
    let second = all.iter().find(|c| c.label == "B").unwrap();
    assert_eq!(second.term, first.term + 1, "{all:#?}");
    kids.assert_disjoint();
    stop(follower);
    stop(a);
}

fn demote(b: &Backend, name: &str) {
    let out = b.tenure(&["demote", name]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The prepared keeper starts the command with the tenure's environment: its name, candidate
/// and term, which only the tenure's beginning knows.
#[test]
fn the_command_gets_the_tenures_environment() {
    let Some(b) = backend(BackendKind::Sqlite) else {
        return;
    };
    let out = b.dir.path().join("env");
    let script = format!(
        "echo \"$TENURE_NAME $TENURE_CANDIDATE $TENURE_TERM\" > {0}.tmp && mv {0}.tmp {0}",
        out.display()
    );
    let (mut kids, a) = a_leads(&b, "prep-env", &[]);
    let term_a = kids.intervals()[0].term;
    let mut follower = b
        .run_command("prep-env", "B", &[], &["sh", "-c", &script])
        .spawn()
        .unwrap();
    wait_for_keeper(pid_of(&follower), 0, "B");
    demote(&b, "prep-env");
    let status = support::wait_for_exit(&mut follower, Duration::from_secs(15))
        .unwrap_or_else(|| panic!("B did not exit: {}", b.stderr_of("B")));
    assert!(status.success(), "{}", b.stderr_of("B"));
    let seen = std::fs::read_to_string(&out).unwrap();
    assert_eq!(seen.trim(), format!("prep-env B {}", term_a + 1));
    stop(a);
}

/// The init of the namespace (or the keeper) tells tenure the tree is gone before its own exit:
/// `tenure run` releases and exits with the command's status while the keeper has not exited
/// — in a PID namespace stopped (SIGSTOP) before the command ends, so that it cannot even reap
/// its init; as a subreaper held a minute after its work (`TENURE_TEST_HOLD_EXIT_MS`) — where
/// it used to wait for the keeper's exit.
fn goes_on_once_told_the_end(isolation: &str) {
    let Some(b) = backend(BackendKind::Sqlite) else {
        return;
    };
    let go = b.dir.path().join("go");
    let script = format!(
        "while [ ! -e {0} ]; do sleep 0.02; done; exit 3",
        go.display()
    );
    let mut tenure = b
        .run_command(
            "end-told",
            "A",
            &["--isolation", isolation],
            &["sh", "-c", &script],
        )
        .env("TENURE_TEST_HOLD_EXIT_MS", "60000")
        .spawn()
        .unwrap();
    // The keeper and what runs below it: the init (in a PID namespace) or the command.
    let (keeper, below) = wait_for_keeper(pid_of(&tenure), 1, "A");
    if isolation == "pid-namespace" {
        kill(Pid::from_raw(keeper), Signal::SIGSTOP).unwrap();
    }
    std::fs::write(&go, "").unwrap();
    let status = support::wait_for_exit(&mut tenure, Duration::from_secs(40));
    let mut supervisors = below;
    supervisors.push(keeper);
    for &p in &supervisors {
        let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
    }
    wait_gone(&supervisors, "the held supervisors");
    let status = status.unwrap_or_else(|| {
        panic!(
            "tenure run waited for its keeper's exit: {}",
            b.stderr_of("A")
        )
    });
    assert_eq!(status.code(), Some(3), "{}", b.stderr_of("A"));
    assert!(
        b.stderr_of("A").contains("command exited"),
        "{}",
        b.stderr_of("A")
    );
}

#[test]
fn goes_on_once_told_the_end_in_a_pid_namespace() {
    goes_on_once_told_the_end("pid-namespace");
}

#[test]
fn goes_on_once_told_the_end_as_a_subreaper() {
    goes_on_once_told_the_end("subreaper");
}

#[test]
fn dies_with_its_tenure_in_a_pid_namespace() {
    dies_with_its_tenure("pid-namespace");
}

#[test]
fn dies_with_its_tenure_as_a_subreaper() {
    dies_with_its_tenure("subreaper");
}

#[test]
fn replaced_if_dead_in_a_pid_namespace() {
    replaced_if_dead("pid-namespace");
}

#[test]
fn replaced_if_dead_as_a_subreaper() {
    replaced_if_dead("subreaper");
}
