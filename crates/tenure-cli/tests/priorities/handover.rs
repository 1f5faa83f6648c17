//! An operator's handover (issue 35, item 8): to a lower-priority candidate it stands for the
//! tenure it begins (priorities do not hand it back), and the next tenure follows priorities
//! again; to a target that is not a live candidate (a typo) it is refused with a one-line
//! error and exit 64, changing nothing, unless `--unregistered` says the target is a process
//! not yet started.

use crate::registry::Registry;
use crate::running;
use crate::support::child::mono_ns;
use crate::support::leaders::{backend, Children, Tenure};
use crate::support::BackendKind;
use std::time::Duration;

const BOUND: Duration = Duration::from_secs(30);

pub(crate) fn an_operator_handover_stands_for_its_tenure(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let registry = Registry::of(&b);
    let mut kids = Children::new(&b.log());
    let _a = Tenure(b.run(
        "chosen",
        "A",
        &["--priority", "5", "--keep-campaigning"],
        "forever",
        0,
    ));
    kids.wait_until(BOUND, "A leads", |i| running(i, "A").is_some());
    let _c = Tenure(b.run(
        "chosen",
        "C",
        &["--priority", "1", "--keep-campaigning"],
        "forever",
        0,
    ));
    registry.until_seen("chosen", "C", Duration::from_millis(500));
    let out = b
        .tenure(&["handover", "chosen", "C"])
        .output()
        .expect("tenure handover");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = kids.wait_until(BOUND, "C leads", |i| running(i, "C").is_some());
    let started = running(&all, "C").unwrap().start;
    // Six of A's renew intervals (500 ms at ttl 2 s): priority would have handed back at the
    // first.
    let held = 3_000_000_000;
    let all = kids.wait_until(BOUND, "three seconds of C's tenure", |_| {
        mono_ns() >= started + held
    });
    let c = running(&all, "C");
    assert!(
        c.is_some_and(|c| c.start == started),
        "{kind}: the chosen candidate's tenure was handed back by priority: {all:#?}"
    );
    // The next tenure follows priorities again.
    let out = b.tenure(&["demote", "chosen"]).output().expect("demote");
    assert!(out.status.success());
    kids.wait_until(BOUND, "A leads again", |i| running(i, "A").is_some());
    kids.assert_disjoint();
}

pub(crate) fn a_handover_to_a_candidate_that_is_not_live_is_refused(kind: BackendKind) {
    let Some(b) = backend(kind) else { return };
    let registry = Registry::of(&b);
    let mut kids = Children::new(&b.log());
    let _a = Tenure(b.run("typo", "A", &["--keep-campaigning"], "forever", 0));
    kids.wait_until(BOUND, "A leads", |i| running(i, "A").is_some());
    registry.until_seen("typo", "A", Duration::ZERO);
    let history = |b: &crate::support::leaders::Backend| {
        let out = b.tenure(&["history", "typo", "--json"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    for now in [false, true] {
        let mut args = vec!["handover", "typo", "tpyo"];
        if now {
            args.push("--now");
        }
        let out = b.tenure(&args).output().expect("tenure handover");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{kind} {args:?}: {stderr}");
        // One line says what was wrong (besides the line naming the database).
        let said: Vec<&str> = stderr
            .lines()
            .filter(|l| !l.starts_with("tenure: database "))
            .collect();
        assert_eq!(said.len(), 1, "{stderr}");
        assert!(
            said[0].contains("\"tpyo\"") && said[0].contains("live candidate"),
            "{stderr}"
        );
    }
    assert!(
        !history(&b).contains("handed_over") && !history(&b).contains("forced"),
        "{kind}: a refused handover changed the lease: {}",
        history(&b)
    );
    assert!(running(&kids.intervals(), "A").is_some());
    // A process not yet started: accepted with --unregistered; the leader steps down.
    let out = b
        .tenure(&["handover", "typo", "later", "--unregistered"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kids.wait_until(BOUND, "A steps down for the handover", |i| {
        running(i, "A").is_none()
    });
    kids.assert_disjoint();
}
