//! `tenure run --priority` as real processes, on SQLite, PostgreSQL, MariaDB and through
//! PgBouncer in transaction mode: the best live candidate leads. A better candidate started
//! later takes the lead by a graceful handover (the old leader's child stopped before the new
//! one starts, the reason in `tenure history`); when the best one is SIGKILLed, the next best —
//! not the lowest — leads within ttl + 1 s; `tenure candidates --json` lists them all.
//!
//! Each child appends `start`/`stop` lines with a CLOCK_MONOTONIC timestamp, its term and pid
//! to a shared file (see `support/leaders.rs`); the intervals must be disjoint.
//!
//! Issue 35: a dead or stopped better candidate costs the leader its cadence at most
//! (`priorities/gone.rs`), a crash-looping one does not pull the lead (`priorities/flap.rs`),
//! an operator's handover stands and a typo is refused (`priorities/handover.rs`).

mod support;

#[path = "priorities/flap.rs"]
mod flap;
#[path = "priorities/gone.rs"]
mod gone;
#[path = "priorities/handover.rs"]
mod handover;
#[path = "priorities/registry.rs"]
mod registry;

use flap::{
    a_crash_looping_better_candidate_with_new_ids, a_crash_looping_better_candidate_with_one_id,
};
use gone::{a_dead_better_candidate, a_stopped_better_candidate_with_a_longer_ttl};
use handover::{
    a_handover_to_a_candidate_that_is_not_live_is_refused,
    an_operator_handover_stands_for_its_tenure,
};

use nix::sys::signal::{kill, Signal};
use std::time::Duration;
use support::child::mono_ns;
use support::leaders::{backend, ms, pgbouncer, Backend, Children, Interval, Tenure, TTL_MS};
use support::BackendKind;

// Four tests at once: each waits on its processes and their ttls (22 tests took 150 s two at
// a time in CI, the machine about 95 % idle).
tests_at_once!(4);

/// How long a start or a handover may take on a busy machine (an upper bound, not a figure).
const SETTLE_BOUND: Duration = Duration::from_secs(30);

fn priorities(kind: BackendKind) {
    if let Some(b) = backend(kind) {
        priorities_on(&b);
    }
}

/// The running child of candidate `id`, if any.
pub(crate) fn running<'a>(all: &'a [Interval], id: &str) -> Option<&'a Interval> {
    all.iter().find(|i| i.label == id && i.stop.is_none())
}

fn priorities_on(b: &Backend) {
    let kind = b.kind;
    let mut kids = Children::new(&b.log());
    let start = |id: &str, priority: &str| {
        Tenure(b.run(
            "prio",
            id,
            &["--priority", priority, "--keep-campaigning"],
            "forever",
            0,
        ))
    };

    // Each better candidate, started later, takes the lead from the one before by handover.
    let _p1 = start("P1", "1");
    kids.wait_until(SETTLE_BOUND, "P1 leads", |i| running(i, "P1").is_some());
    let _p2 = start("P2", "2");
    kids.wait_until(SETTLE_BOUND, "P2 takes over from P1", |i| {
        running(i, "P2").is_some()
    });
    let p3 = start("P3", "3");
    let all = kids.wait_until(SETTLE_BOUND, "P3 takes over from P2", |i| {
        running(i, "P3").is_some()
    });
    kids.assert_disjoint();
    let terms: Vec<u64> = ["P1", "P2", "P3"]
        .iter()
        .map(|id| all.iter().find(|i| i.label == *id).unwrap().term)
        .collect();
    assert!(terms[0] < terms[1] && terms[1] < terms[2], "{terms:?}");

    let history = b
        .tenure(&["history", "prio", "--json"])
        .output()
        .expect("tenure history");
    let history = String::from_utf8_lossy(&history.stdout);
    for (better, worse) in [("P3", "P2"), ("P2", "P1")] {
        let reason = format!("'{better}' (priority ");
        assert!(
            history.contains(&reason) && history.contains(&format!("over '{worse}'")),
            "no handover for priority from {worse} to {better} in the history: {history}"
        );
    }

    // SIGKILL the best: the next best leads within ttl + 1 s, never the lowest.
    let best = running(&all, "P3").unwrap().clone();
    let killed_at = mono_ns();
    kill(p3.pid(), Signal::SIGKILL).unwrap();
    drop(p3);
    kids.wait_until(
        Duration::from_secs(1),
        "the killed leader's child's death",
        |i| i.iter().all(|c| c.pid != best.pid || c.stop.is_some()),
    );
    let all = kids.wait_until(
        Duration::from_millis(TTL_MS + 1000),
        "a failover to the next best",
        |i| i.iter().any(|c| c.stop.is_none()),
    );
    let next = all.iter().find(|c| c.stop.is_none()).unwrap();
    assert_eq!(next.label, "P2", "the next best must lead: {all:#?}");
    assert!(next.term > best.term);
    eprintln!(
        "{kind}: the next best led {} ms after SIGKILL",
        ms(next.start - killed_at)
    );
    kids.assert_disjoint();

    // The registry: all three with their priorities; the killed one no longer live.
    let out = b
        .tenure(&["candidates", "prio", "--json"])
        .output()
        .expect("tenure candidates");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let roster: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let seen: Vec<(String, i64, bool, bool)> = roster["candidates"]
        .as_array()
        .expect("candidates")
        .iter()
        .map(|c| {
            (
                c["candidate"].as_str().unwrap().to_string(),
                c["priority"].as_i64().unwrap(),
                c["live"].as_bool().unwrap(),
                c["leader"].as_bool().unwrap(),
            )
        })
        .collect();
    let want = |id: &str, p: i64, live: bool, leader: bool| (id.to_string(), p, live, leader);
    assert_eq!(
        seen,
        [
            want("P3", 3, false, false),
            want("P2", 2, true, true),
            want("P1", 1, true, false),
        ],
        "{roster}"
    );
    assert_eq!(roster["leader"], "P2");
}

per_backend!(
    priorities,
    a_dead_better_candidate,
    a_stopped_better_candidate_with_a_longer_ttl,
    a_crash_looping_better_candidate_with_one_id,
    a_crash_looping_better_candidate_with_new_ids,
    an_operator_handover_stands_for_its_tenure,
    a_handover_to_a_candidate_that_is_not_live_is_refused,
);

#[test]
fn priorities_through_pgbouncer() {
    if let Some(b) = pgbouncer(false) {
        priorities_on(&b);
    }
}
