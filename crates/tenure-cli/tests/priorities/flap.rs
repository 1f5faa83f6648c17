//! A crash-looping better candidate does not pull the lead from a healthy one (issue 35,
//! item 2): B (priority 5) lives 1 s per run and is restarted at once — with the same
//! `--candidate` id (systemd's `Restart=always`) or a new one each time — beside a healthy A
//! (priority 1, `--settle 2.4s`, ttl 4 s). Every restart begins a new run that must settle
//! again, so A leads throughout; before, B's registration kept its `since` across restarts
//! (same id) or A handed over to B's dead registrations (new ids), and B's runs took the lead.

use crate::registry::ran;
use crate::running;
use crate::support::child::mono_ns;
use crate::support::leaders::{backend, Children, Tenure};
use crate::support::BackendKind;
use nix::sys::signal::{kill, Signal};
use std::time::Duration;

/// How long B crash-loops.
const LOOPING: Duration = Duration::from_secs(16);
/// The share of that time A's child must run: most of it (its own start-up is excluded).
const SHARE: f64 = 0.8;

fn crash_loop(kind: BackendKind, what: &str, id: fn(u32) -> String) {
    let Some(b) = backend(kind) else { return };
    let mut kids = Children::new(&b.log());
    let healthy = ["--priority", "1", "--settle", "2.4s", "--keep-campaigning"];
    let _a = Tenure(b.run_ttl(4_000, "flap", "A", &healthy, "forever", 0));
    kids.wait_until(Duration::from_secs(40), "A leads", |i| {
        running(i, "A").is_some()
    });
    let from = mono_ns();
    let mut run = 0;
    while mono_ns() - from < i64::try_from(LOOPING.as_nanos()).unwrap() {
        run += 1;
        let id = id(run);
        let b_run = Tenure(b.run_ttl(4_000, "flap", &id, &["--priority", "5"], "forever", 0));
        std::thread::sleep(Duration::from_secs(1));
        kill(b_run.pid(), Signal::SIGKILL).unwrap();
        drop(b_run);
    }
    let to = mono_ns();
    let all = kids.intervals();
    let share = ran(&all, "A", from, to) as f64 / (to - from) as f64;
    eprintln!(
        "{kind}, {what}: A's child ran {:.0} % of {run} runs of B",
        share * 100.0
    );
    assert!(
        share >= SHARE,
        "{kind}, {what}: A's child ran {:.0} % of the time B crash-looped (at least {:.0} % \
         expected): {all:#?}",
        share * 100.0,
        SHARE * 100.0
    );
    kids.assert_disjoint();
}

pub(crate) fn a_crash_looping_better_candidate_with_one_id(kind: BackendKind) {
    crash_loop(kind, "the same id", |_| "B".to_string());
}

pub(crate) fn a_crash_looping_better_candidate_with_new_ids(kind: BackendKind) {
    crash_loop(kind, "a new id per run", |run| format!("B-{run}"));
}
