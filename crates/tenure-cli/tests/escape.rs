//! Nothing the supervised command started outlives its tenure: trees that try to escape, on
//! SQLite, PostgreSQL and MariaDB.
//!
//! Each leader runs one tree that holds every way out at once: a grandchild started by
//! `sh -c` (`NAME.sh`), a `setsid` grandchild (`NAME.setsid`), a double-forked daemon in a
//! session of its own (`NAME.daemon`), a descendant that ignores SIGTERM (`NAME.stubborn`), a
//! chain three deep (`NAME.nest.1..3`), and the command's own child `NAME` that `sh` waits for.
//! Every one logs its start (and its stop, when it can) with CLOCK_MONOTONIC and its outer pid.
//!
//! For each way a tenure ends — SIGKILL of tenure, the database becoming unreachable, a demote,
//! the command's normal exit — the test checks that the whole tree of the first leader is dead
//! no later than the instant another leader could start, and that the trees of two leaders
//! never overlap.

use nix::sys::signal::{kill, Signal};
mod support;

use std::time::Duration;
use support::child::{child_program, mono_ns};
use support::leaders::{backend, ms, wait_exit, Backend, Children, Interval, Tenure, TTL_MS};
use support::outage::{host_port, Cut, SqliteLock};
use support::BackendKind;

/// Processes in one tree: NAME, .sh, .setsid, .daemon, .stubborn, .nest.1, .nest.2, .nest.3.
const TREE_SIZE: usize = 8;

const TREE: &str = r#"C=$1 L=$2 N=$3
"$C" "$L" "$N.sh" forever 0 &
setsid "$C" "$L" "$N.setsid" forever 0 &
"$C" "$L" "$N.daemon" daemon 0
"$C" "$L" "$N.stubborn" ignore-term 0 &
"$C" "$L" "$N.nest" nest3 0 &
"$C" "$L" "$N" "$4" "$5"
"#;

#[derive(Clone, Copy, Debug, PartialEq)]
enum End {
    /// SIGKILL of the leading tenure.
    Kill,
    /// The database becomes unreachable for the leader.
    Unreachable,
    /// `tenure demote`.
    Demote,
    /// The command exits by itself (status 7), leaving the rest of its tree running.
    Exit,
}

fn tree(b: &Backend, name: &str, mode: &str, code: i32) -> Vec<String> {
    [
        "sh",
        "-c",
        TREE,
        "tree",
        child_program().to_str().unwrap(),
        b.log().to_str().unwrap(),
        name,
        mode,
        &code.to_string(),
    ]
    .map(String::from)
    .to_vec()
}

fn of(all: &[Interval], name: &str) -> Vec<Interval> {
    all.iter()
        .filter(|i| i.label == name || i.label.starts_with(&format!("{name}.")))
        .cloned()
        .collect()
}

fn spawn(
    b: &Backend,
    isolation: &str,
    name: &str,
    mode: &str,
    code: i32,
    url: Option<&str>,
) -> Tenure {
    let argv = tree(b, name, mode, code);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut command = b.run_command("escape", name, &["--isolation", isolation], &argv);
    if let Some(url) = url {
        command.env("TENURE_DATABASE_URL", url);
    }
    Tenure(command.spawn().expect("spawn tenure run"))
}

fn escape(kind: BackendKind, end: End, isolation: &str) {
    let Some(b) = backend(kind) else { return };
    let mut kids = Children::new(&b.log());
    // The leader reaches a server through a relay the test can cut.
    let cut = (end == End::Unreachable && kind != BackendKind::Sqlite)
        .then(|| Cut::start(&host_port(&b.url)));
    let a_url = cut.as_ref().map(|c| c.url(&b.url));
    let mode = if end == End::Exit { "1.5" } else { "forever" };
    let mut a = spawn(&b, isolation, "A", mode, 7, a_url.as_deref());
    kids.wait_until(Duration::from_secs(10), "A's whole tree started", |i| {
        of(i, "A").len() == TREE_SIZE
    });
    // Its tenure logs the supervision after the spawn, which the tree's start may precede.
    b.stderr_once_it_holds("A", &format!("supervision=\"{isolation}\""));
    let other = spawn(&b, isolation, "B", "forever", 0, None);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        of(&kids.intervals(), "B").is_empty(),
        "B waits while A leads"
    );

    let t0 = mono_ns();
    let mut outage = None;
    // The latest instant by which A's whole tree must be dead: before the database could let
    // anyone else lead. After a SIGKILL, A's lease lasts until its last renewal (at most one
    // renew interval, ttl/4, before the kill) + ttl: 1 s is well inside. When the database is
    // unreachable, A's local deadline is at most ttl after its last renewal (before t0).
    let bound = match end {
        End::Kill => {
            kill(a.pid(), Signal::SIGKILL).unwrap();
            let _ = a.0.wait();
            Some(t0 + 1_000_000_000)
        }
        End::Unreachable => {
            match &cut {
                Some(cut) => cut.cut(),
                None => outage = Some(SqliteLock::take(&b.url)),
            }
            Some(t0 + i64::try_from(TTL_MS).unwrap() * 1_000_000)
        }
        End::Demote => {
            let out = b.tenure(&["demote", "escape"]).output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            Some(t0 + i64::try_from(TTL_MS).unwrap() * 1_000_000)
        }
        End::Exit => None,
    };
    let within = match bound {
        Some(bound) => Duration::from_nanos(u64::try_from(bound - mono_ns()).unwrap_or(0)),
        None => Duration::from_secs(10),
    };
    let all = kids.wait_until(within, "the death of A's whole tree", |i| {
        of(i, "A").iter().all(|c| c.stop.is_some())
    });
    let a_end = of(&all, "A").iter().filter_map(|c| c.stop).max().unwrap();
    eprintln!(
        "{kind} {end:?}: A's whole tree dead {} ms after t0",
        ms(a_end - t0)
    );
    if let Some(bound) = bound {
        assert!(
            a_end <= bound,
            "A's tree outlived its bound by {} ms",
            ms(a_end - bound)
        );
    }
    if end == End::Unreachable {
        // Hold the outage past A's deadline, then let B take over.
        std::thread::sleep(Duration::from_millis(500));
        drop(outage);
        if let Some(cut) = &cut {
            cut.restore();
        }
    }
    if end == End::Exit {
        assert_eq!(
            wait_exit(&mut a.0, Duration::from_secs(10)),
            7,
            "A exits with its command's status"
        );
    }

    let all = kids.wait_until(
        Duration::from_millis(3 * TTL_MS),
        "B's whole tree started",
        |i| of(i, "B").len() == TREE_SIZE,
    );
    let b_start = of(&all, "B").iter().map(|c| c.start).min().unwrap();
    let a_end = of(&all, "A").iter().filter_map(|c| c.stop).max().unwrap();
    assert!(
        a_end <= b_start,
        "A's tree ran {} ms into B's: {all:#?}",
        ms(a_end - b_start)
    );
    assert!(of(&all, "B").iter().all(|c| c.term > of(&all, "A")[0].term));
    eprintln!(
        "{kind} {end:?}: B's tree started {} ms after A's ended",
        ms(b_start - a_end)
    );

    // B stops normally (SIGTERM, forwarded): it exits only once its whole tree is gone.
    let mut other = other;
    kill(other.pid(), Signal::SIGTERM).unwrap();
    wait_exit(&mut other.0, Duration::from_secs(10));
    // Read right after the exit: a process seen dead now was dead when tenure exited.
    let left = of(&kids.running(), "B");
    assert!(left.is_empty(), "B's tree outlived B: {left:#?}");
}

#[test]
fn the_readme_demo_leaves_nothing_behind() {
    let Some(b) = backend(BackendKind::Sqlite) else {
        return;
    };
    let mut kids = Children::new(&b.log());
    // The README's demo, with the test child as its `sleep`: sh waits for it.
    let script = r#""$1" "$2" demo forever 0; echo done"#;
    let log = b.log();
    let argv = [
        "sh",
        "-c",
        script,
        "demo",
        child_program().to_str().unwrap(),
        log.to_str().unwrap(),
    ];
    let a = Tenure(b.run_command("demo", "A", &[], &argv).spawn().unwrap());
    kids.wait_until(Duration::from_secs(10), "the demo's start", |i| {
        i.len() == 1
    });
    kill(a.pid(), Signal::SIGKILL).unwrap();
    kids.wait_until(
        Duration::from_secs(1),
        "the demo's death after kill -9 of tenure",
        |i| i[0].stop.is_some(),
    );
}

/// Each end, in both supervision modes (`auto` is `pid-namespace` here: the tests run as root).
macro_rules! per_end {
    ($($test:ident, $subreaper:ident: $end:expr),*) => {
        mod sqlite { use super::End; $(
            #[test] fn $test() { super::escape(super::BackendKind::Sqlite, $end, "pid-namespace") }
            #[test] fn $subreaper() { super::escape(super::BackendKind::Sqlite, $end, "subreaper") }
        )* }
        mod postgres { use super::End; $(
            #[test] fn $test() { super::escape(super::BackendKind::Postgres, $end, "pid-namespace") }
            #[test] fn $subreaper() { super::escape(super::BackendKind::Postgres, $end, "subreaper") }
        )* }
        mod mysql { use super::End; $(
            #[test] fn $test() { super::escape(super::BackendKind::MySql, $end, "pid-namespace") }
            #[test] fn $subreaper() { super::escape(super::BackendKind::MySql, $end, "subreaper") }
        )* }
    };
}

per_end!(
    sigkill_of_tenure, sigkill_of_tenure_subreaper: End::Kill,
    database_unreachable, database_unreachable_subreaper: End::Unreachable,
    demote, demote_subreaper: End::Demote,
    command_exits, command_exits_subreaper: End::Exit
);
