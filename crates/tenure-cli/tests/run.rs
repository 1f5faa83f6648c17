//! `tenure run` as real processes, on SQLite, PostgreSQL and MariaDB.
//!
//! Each child appends `start`/`stop` lines with a CLOCK_MONOTONIC timestamp, its term and pid to
//! a shared file; children killed without a chance to write `stop` end when the test saw them
//! gone (an upper bound). The intervals of different children must be disjoint.

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
mod support;

use std::time::Duration;
use support::child::mono_ns;
use support::leaders::{
    alive, backend, ms, pgbouncer, stop, wait_exit, Backend, Children, Tenure, TTL_MS,
};
use support::BackendKind;

// Four tests at once: each waits on its `tenure run` processes and their ttls (24 tests: 62 s
// two at a time, 33 s four at a time, quiet).
tests_at_once!(4);

/// Two `tenure run` on one name: one child; SIGKILL the leader's tenure → its child dies
/// within 1 s (parent-death signal) and the other child starts within ttl + 1 s.
fn crash_failover(kind: BackendKind) {
    if let Some(b) = backend(kind) {
        crash_failover_on(&b);
    }
}

fn crash_failover_on(b: &Backend) {
    let kind = b.kind;
    let mut kids = Children::new(&b.log());
    let mut a = b.run("crash", "A", &[], "forever", 0);
    kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1);
    let mut other = b.run("crash", "B", &[], "forever", 0);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(kids.intervals().len(), 1, "exactly one child runs");
    let first = kids.running().remove(0);

    let killed_at = mono_ns();
    kill(
        Pid::from_raw(i32::try_from(a.id()).expect("a pid fits in i32")),
        Signal::SIGKILL,
    )
    .unwrap();
    let _ = a.wait();
    kids.wait_until(Duration::from_secs(1), "the orphaned child's death", |i| {
        i.iter().all(|c| c.pid != first.pid || c.stop.is_some())
    });
    let all = kids.wait_until(Duration::from_millis(TTL_MS + 1000), "failover", |i| {
        i.len() == 2
    });
    let second = &all.iter().find(|c| c.pid != first.pid).unwrap();
    assert!(second.term > first.term);
    eprintln!(
        "{kind}: failover after SIGKILL took {} ms",
        ms(second.start - killed_at)
    );
    kids.assert_disjoint();
    other.kill().ok();
    let _ = other.wait();
}

/// The leader's child exits → the other child starts, woken at once (PostgreSQL's NOTIFY, the
/// doorbells of SQLite and MySQL), not by its next poll; behind a pooler without a notify URL
/// by that poll. The first tenure exits with the child's status.
fn exit_hands_over(kind: BackendKind) {
    if let Some(b) = backend(kind) {
        exit_hands_over_on(&b);
    }
}

fn exit_hands_over_on(b: &Backend) {
    let kind = b.kind;
    let mut kids = Children::new(&b.log());
    // Where the database wakes followers, a ttl of 40 s: the follower's next poll comes a
    // renew interval (10 s) after its first campaign, so a takeover seconds after the exit
    // can only be the wake-up, however slow the machine. Elsewhere the usual ttl: it polls.
    let ttl = if b.pushes() { 40_000 } else { TTL_MS };
    let mut a = b.run_ttl(ttl, "exit", "A", &[], "1.25", 7);
    kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1);
    let other = b.run_ttl(ttl, "exit", "B", &[], "forever", 0);
    assert_eq!(
        wait_exit(&mut a, Duration::from_secs(10)),
        7,
        "A exits with its child's status"
    );
    let all = kids.wait_until(Duration::from_secs(15), "B's child start", |i| i.len() == 2);
    let (first, second) = (&all[0].clone(), &all[1].clone());
    let (first, second) = if first.label == "A" {
        (first, second)
    } else {
        (second, first)
    };
    let gap = ms(second.start - first.stop.unwrap());
    // PostgreSQL wakes the follower by NOTIFY, SQLite and MySQL by their doorbells: well
    // before its poll, 10 s after its last campaign. Behind a transaction pooler without
    // --notify-url it polls every renew interval (plus a round trip, and slack for a busy
    // machine).
    let renew = i64::try_from(ttl).unwrap() / 4;
    let bound = if b.pushes() { renew / 2 } else { renew * 3 };
    eprintln!("{kind}: handover after exit took {gap} ms (bound {bound} ms)");
    assert!(gap <= bound, "handover took {gap} ms");
    assert_eq!(second.term, first.term + 1);
    kids.assert_disjoint();
    stop(other);
}

/// `tenure demote` and `tenure handover NAME A` move the child, never overlapping.
fn demote_and_handover(kind: BackendKind) {
    if let Some(b) = backend(kind) {
        demote_and_handover_on(&b);
    }
}

fn demote_and_handover_on(b: &Backend) {
    let mut kids = Children::new(&b.log());
    let a = b.run("move", "A", &["--keep-campaigning"], "forever", 0);
    kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1);
    let other = b.run("move", "B", &["--keep-campaigning"], "forever", 0);
    std::thread::sleep(Duration::from_millis(500));

    let out = b.tenure(&["demote", "move"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = kids.wait_until(Duration::from_millis(3 * TTL_MS), "a second child", |i| {
        i.len() == 2 && i[0].stop.is_some()
    });
    kids.assert_disjoint();
    let leader = all.iter().find(|c| c.stop.is_none()).unwrap().clone();
    let target = if leader.label == "A" { "B" } else { "A" };

    let out = b.tenure(&["handover", "move", target]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = kids.wait_until(Duration::from_millis(2 * TTL_MS), "the handover", |i| {
        i.len() == 3
            && i.iter()
                .filter(|c| c.stop.is_none())
                .all(|c| c.label == target)
    });
    kids.assert_disjoint();
    let terms: Vec<u64> = all.iter().map(|c| c.term).collect();
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "terms {terms:?}");
    stop(a);
    stop(other);
}

/// SIGSTOP the leader's tenure and its child for 2 × ttl, then SIGCONT: the old child dies and
/// the old tenure exits without claiming leadership; the new term is higher.
fn stopped_leader(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let mut kids = Children::new(&b.log());
    let mut a = b.run("stop", "A", &[], "forever", 0);
    let first =
        kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1)[0].clone();
    let other = b.run("stop", "B", &[], "forever", 0);
    // Stop A between two renewals (every ttl/4 from its start), not inside one: a process
    // stopped inside its transaction is a different fault (the server ends its session after
    // the store's timeout on PostgreSQL and MariaDB; on SQLite it blocks every writer).
    let renew = i64::try_from(TTL_MS).unwrap() / 4;
    let between = first.start + (2 * renew + renew / 2) * 1_000_000;
    std::thread::sleep(Duration::from_nanos(
        u64::try_from(between - mono_ns()).unwrap_or(0),
    ));
    let (tenure_a, child_a) = (
        Pid::from_raw(i32::try_from(a.id()).expect("a pid fits in i32")),
        Pid::from_raw(first.pid),
    );
    kill(tenure_a, Signal::SIGSTOP).unwrap();
    kill(child_a, Signal::SIGSTOP).unwrap();
    let all = kids.wait_until(Duration::from_millis(5 * TTL_MS), "B's child start", |i| {
        i.len() == 2
    });
    let second = all.iter().find(|c| c.label == "B").unwrap().clone();
    assert!(second.term > first.term);
    std::thread::sleep(
        Duration::from_millis(2 * TTL_MS).saturating_sub(Duration::from_millis(TTL_MS)),
    );
    let resumed = mono_ns();
    kill(tenure_a, Signal::SIGCONT).unwrap();
    // The resumed tenure may already have killed its child (a stopped process still dies of
    // SIGKILL): that is the outcome awaited below, not a failure.
    match kill(child_a, Signal::SIGCONT) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => panic!("SIGCONT to the old child: {e}"),
    }
    let code = wait_exit(&mut a, Duration::from_secs(15));
    assert_eq!(
        code,
        75,
        "the old tenure reports lost leadership: {}",
        b.stderr_of("A")
    );
    kids.wait_until(Duration::from_secs(15), "the old child's death", |i| {
        i.iter().any(|c| c.pid == first.pid && c.stop.is_some())
    });
    eprintln!(
        "{kind}: old child stopped {} ms after SIGCONT",
        ms(mono_ns() - resumed)
    );
    let log = b.stderr_of("A");
    assert_eq!(
        log.matches("leadership acquired").count(),
        1,
        "the old tenure claimed leadership again: {log}"
    );
    assert!(alive(second.pid), "the new child keeps running");
    stop(other);
}

/// `--no-wait` and `--timeout` give up with exit 73 without running the command; SIGTERM to
/// tenure is forwarded, the child stops, the lease is released and tenure exits with the
/// child's status.
fn give_up_and_signals(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let mut kids = Children::new(&b.log());
    let a = b.run("busy", "A", &[], "forever", 0);
    kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1);
    let mut no_wait = b.run("busy", "N", &["--no-wait"], "forever", 0);
    assert_eq!(wait_exit(&mut no_wait, Duration::from_secs(5)), 73);
    let started = mono_ns();
    let mut timed = b.run("busy", "T", &["--timeout", "1s"], "forever", 0);
    assert_eq!(wait_exit(&mut timed, Duration::from_secs(5)), 73);
    assert!(
        ms(mono_ns() - started) >= 1000,
        "gave up before the timeout"
    );
    assert_eq!(kids.intervals().len(), 1, "no other child ran");

    let mut a = a;
    kill(
        Pid::from_raw(i32::try_from(a.id()).expect("a pid fits in i32")),
        Signal::SIGTERM,
    )
    .unwrap();
    assert_eq!(
        wait_exit(&mut a, Duration::from_secs(5)),
        0,
        "the child's own status (it exits 0 on SIGTERM)"
    );
    let all = kids.intervals();
    assert!(all[0].stop.is_some(), "the child got the forwarded SIGTERM");
    let out = b.tenure(&["leader", "busy", "--json"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("\"leader\":null"), "released on exit: {text}");
}

per_backend!(
    crash_failover,
    exit_hands_over,
    demote_and_handover,
    stopped_leader,
    give_up_and_signals
);

/// `tenure run` through PgBouncer in transaction mode (`?pooler=transaction`): leading,
/// failover after a crash, handing over on exit (by polling; with `--notify-url` pushed),
/// demote and handover.
mod pgbouncer {
    use super::*;

    #[test]
    fn crash_failover() {
        if let Some(b) = pgbouncer(false) {
            crash_failover_on(&b);
        }
    }

    #[test]
    fn exit_hands_over_by_polling() {
        if let Some(b) = pgbouncer(false) {
            assert!(!b.pushes());
            exit_hands_over_on(&b);
        }
    }

    #[test]
    fn exit_hands_over_at_once_with_notify_url() {
        if let Some(b) = pgbouncer(true) {
            assert!(b.pushes());
            exit_hands_over_on(&b);
        }
    }

    #[test]
    fn demote_and_handover() {
        if let Some(b) = pgbouncer(false) {
            demote_and_handover_on(&b);
        }
    }

    /// A `--notify-url` that is not PostgreSQL, or that nothing answers: one clear line
    /// naming it (password hidden), and `tenure run` never starts its command.
    #[test]
    fn a_bad_notify_url_is_one_clear_line() {
        let Some(b) = pgbouncer(false) else { return };
        for (notify, code, says) in [
            (
                "mysql://root@127.0.0.1:3306/test",
                64,
                "notifications come from PostgreSQL",
            ),
            (
                "postgres://postgres:n0tify-s3cret@127.0.0.1:1/test",
                69,
                "cannot connect to postgres://postgres:***@127.0.0.1:1/test (the notify URL)",
            ),
        ] {
            let marker = b.dir.path().join("ran");
            let out = b
                .tenure(&["--notify-url", notify, "run", "bad-notify", "--"])
                .args(["touch", marker.to_str().unwrap()])
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let errors: Vec<&str> = stderr
                .lines()
                .filter(|l| {
                    !l.starts_with("tenure: database ")
                        && !l.starts_with("tenure: notifications from ")
                })
                .collect();
            assert_eq!(out.status.code(), Some(code), "{notify}: {stderr}");
            assert_eq!(errors.len(), 1, "{notify}: one error line: {stderr}");
            assert!(errors[0].contains(says), "{notify}: {stderr}");
            assert!(
                !stderr.contains("n0tify-s3cret"),
                "password shown: {stderr}"
            );
            assert!(!marker.exists(), "the command ran");
        }
    }
}

/// With `NOTIFY_SOCKET`, tenure tells systemd it waits, then `READY=1` and that it leads once
/// the command runs; the command itself does not see the socket.
#[test]
fn systemd_notify() {
    use std::os::unix::net::UnixDatagram;
    let Some(b) = backend(BackendKind::Sqlite) else {
        return;
    };
    let socket_path = b.dir.path().join("notify");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut tenure = b
        .run_command("sd", "A", &[], &["sh", "-c", "test -z \"$NOTIFY_SOCKET\""])
        .env("NOTIFY_SOCKET", &socket_path)
        .spawn()
        .unwrap();
    assert_eq!(
        wait_exit(&mut tenure, Duration::from_secs(10)),
        0,
        "the command does not see NOTIFY_SOCKET: {}",
        b.stderr_of("A")
    );
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while got.len() < 3 {
        let n = socket.recv(&mut buf).expect("a datagram from tenure");
        got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    assert_eq!(
        got,
        [
            "STATUS=waiting for sd",
            "READY=1\nSTATUS=leading sd term 1",
            "STATUS=waiting for sd"
        ]
    );
}

/// `tenure demote` moves the lead: with two `--keep-campaigning` candidates, the one that was
/// demoted holds off and the other one leads afterwards, every time (10 demotes).
fn demote_moves_the_lead(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let mut kids = Children::new(&b.log());
    // Killed (with their trees) if the test fails.
    let mut a = Tenure(b.run("lead", "A", &["--keep-campaigning"], "forever", 0));
    kids.wait_until(Duration::from_secs(10), "A's child start", |i| i.len() == 1);
    let mut other = Tenure(b.run("lead", "B", &["--keep-campaigning"], "forever", 0));
    std::thread::sleep(Duration::from_millis(300));
    for round in 1..=10 {
        let before = kids.running();
        assert_eq!(before.len(), 1, "one child runs: {before:?}");
        let out = b.tenure(&["demote", "lead"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let all = kids.wait_until(Duration::from_millis(3 * TTL_MS), "the next child", |i| {
            i.len() == round + 1 && i.iter().filter(|c| c.stop.is_none()).count() == 1
        });
        let now = all.iter().find(|c| c.stop.is_none()).unwrap();
        assert_ne!(
            now.label, before[0].label,
            "round {round}: the demoted candidate took the lead back"
        );
    }
    kids.assert_disjoint();
    for t in [&mut a, &mut other] {
        kill(t.pid(), Signal::SIGTERM).unwrap();
        wait_exit(&mut t.0, Duration::from_secs(10));
    }
}

mod demote_moves {
    #[test]
    fn sqlite() {
        super::demote_moves_the_lead(super::BackendKind::Sqlite)
    }
    #[test]
    fn postgres() {
        super::demote_moves_the_lead(super::BackendKind::Postgres)
    }
    #[test]
    fn mysql() {
        super::demote_moves_the_lead(super::BackendKind::MySql)
    }
}
