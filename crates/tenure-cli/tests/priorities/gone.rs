//! A better candidate that dies or stops costs the leader its cadence at most, never a ttl
//! (issue 35, item 1; the documented bound: its renew interval plus its database timeout):
//! - B killed 1 s after its start (ttl 10 s, cadence 4.5 s; the leader settles B in 1 s);
//! - B killed right after the campaign that makes it count (seen campaigning for the leader's
//!   settle time, so that the leader hands over to it): the reservation lapses with B's cadence, and the leader's child runs again within
//!   B's cadence plus the leader's own poll (2.5 s) and 2 s for a loaded machine — 9 s, where
//!   the lease stayed reserved for a whole ttl (10 s and more) before;
//! - B SIGSTOPped, its ttl (16 s) longer than the leader's (4 s): one handover, not one per
//!   renewal until B's registration expires; on SIGCONT B leads again.
//!
//! The test acts right after a campaign of B that it saw in the registry, before the leader's
//! next renewal; where B took the lead first all the same (a very slow machine), there is
//! nothing left to check and the test says so.

use crate::registry::{gaps, Registry};
use crate::running;
use crate::support::child::mono_ns;
use crate::support::leaders::{backend, ms, Backend, Children, Interval, Tenure};
use crate::support::BackendKind;
use nix::sys::signal::{kill, Signal};
use std::time::Duration;

const SECOND: i64 = 1_000_000_000;
/// How long a start or a handover may take on a busy machine (an upper bound, not a figure).
const BOUND: Duration = Duration::from_secs(40);

fn start(b: &Backend, id: &str, ttl_ms: u64, extra: &[&str]) -> Tenure {
    Tenure(b.run_ttl(ttl_ms, "prio", id, extra, "forever", 0))
}

/// Waits until `label`'s child runs and at least `after_ns` have passed since `since`.
fn running_after(kids: &mut Children, label: &str, since: i64, after_ns: i64) -> Vec<Interval> {
    let within = BOUND + Duration::from_nanos(u64::try_from(after_ns).unwrap());
    kids.wait_until(within, "the leader leads again", |i| {
        mono_ns() >= since + after_ns && running(i, label).is_some()
    })
}

/// Whether `label` ever ran a child.
fn ever_ran(kids: &mut Children, label: &str) -> bool {
    kids.intervals().iter().any(|i| i.label == label)
}

pub(crate) fn a_dead_better_candidate(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let registry = Registry::of(&b);
    let mut kids = Children::new(&b.log());
    let _a = start(
        &b,
        "A",
        10_000,
        &["--priority", "1", "--settle", "1s", "--keep-campaigning"],
    );
    kids.wait_until(BOUND, "A leads", |i| running(i, "A").is_some());
    // B's cadence (4.5 s), A's poll (2.5 s) and 2 s for a loaded machine.
    let max_gap = 9 * SECOND;

    // B killed 1 s after its start.
    let b1 = start(&b, "B1", 10_000, &["--priority", "5"]);
    registry.until_seen("prio", "B1", Duration::ZERO);
    std::thread::sleep(Duration::from_secs(1));
    kill(b1.pid(), Signal::SIGKILL).unwrap();
    let all = running_after(&mut kids, "A", mono_ns(), 12 * SECOND);
    for (stop, start) in gaps(&all, "A") {
        assert!(
            start - stop <= max_gap,
            "{kind}: A was without its child {} ms, for a candidate killed 1 s after its start \
             (at most B's cadence 4.5 s + A's poll 2.5 s + 2 s): {all:#?}",
            ms(start - stop)
        );
    }

    // B killed right after the campaign that makes it count for A (seen campaigning for A's
    // settle time): A hands over to it.
    let before = gaps(&all, "A").len();
    let b2 = start(&b, "B2", 10_000, &["--priority", "5"]);
    registry.until_seen("prio", "B2", Duration::from_secs(1));
    kill(b2.pid(), Signal::SIGKILL).unwrap();
    let killed = mono_ns();
    if ever_ran(&mut kids, "B2") {
        eprintln!("{kind}: B2 took the lead before it was killed; nothing left to check");
        return;
    }
    kids.wait_until(BOUND, "A hands over to B2", |i| running(i, "A").is_none());
    let all = running_after(&mut kids, "A", killed, 12 * SECOND);
    let after: Vec<(i64, i64)> = gaps(&all, "A").into_iter().skip(before).collect();
    assert_eq!(
        after.len(),
        1,
        "{kind}: one handover to the dead B2: {all:#?}"
    );
    let (stop, start) = after[0];
    eprintln!(
        "{kind}: A led again {} ms after handing over to the dead B2",
        ms(start - stop)
    );
    assert!(
        start - stop <= max_gap,
        "{kind}: A was without its child {} ms after handing over to a dead candidate (at most \
         B's cadence 4.5 s + A's poll 2.5 s + 2 s; a ttl is 10 s): {all:#?}\n{}",
        ms(start - stop),
        kids.logs()
    );
    kids.assert_disjoint();
}

pub(crate) fn a_stopped_better_candidate_with_a_longer_ttl(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let registry = Registry::of(&b);
    let mut kids = Children::new(&b.log());
    // A: ttl 4 s, renewing every second, settle 1 s. B: ttl 16 s, cadence 4 s + 3.2 s.
    let _a = start(&b, "A", 4_000, &["--priority", "1", "--keep-campaigning"]);
    kids.wait_until(BOUND, "A leads", |i| running(i, "A").is_some());
    let b3 = start(&b, "B", 16_000, &["--priority", "5", "--keep-campaigning"]);
    registry.until_seen("prio", "B", Duration::from_secs(1));
    kill(b3.pid(), Signal::SIGSTOP).unwrap();
    let stopped = mono_ns();
    if ever_ran(&mut kids, "B") {
        let _ = kill(b3.pid(), Signal::SIGCONT);
        eprintln!("{kind}: B took the lead before it was stopped; nothing left to check");
        return;
    }
    kids.wait_until(BOUND, "A hands over to B", |i| running(i, "A").is_none());
    // B's registration stays live for 16 s: A leads again once B's cadence ran out, and does
    // not hand over to it again.
    let all = running_after(&mut kids, "A", stopped, 18 * SECOND);
    let gaps = gaps(&all, "A");
    assert_eq!(
        gaps.len(),
        1,
        "{kind}: A handed over to a stopped candidate more than once: {all:#?}"
    );
    let (stop, start) = gaps[0];
    eprintln!(
        "{kind}: A led again {} ms after handing over to the stopped B",
        ms(start - stop)
    );
    assert!(
        start - stop <= 10 * SECOND,
        "{kind}: A was without its child {} ms (at most B's cadence 7.2 s + A's poll 1 s + 2 s)",
        ms(start - stop)
    );
    // B resumes: it leads again by a handover.
    kill(b3.pid(), Signal::SIGCONT).unwrap();
    kids.wait_until(BOUND, "B leads once resumed", |i| running(i, "B").is_some());
    kids.assert_disjoint();
}
