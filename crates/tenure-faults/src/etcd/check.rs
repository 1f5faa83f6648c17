//! The etcd workload's checker: the register's writes in commit order against the revisions
//! they were made under. Pure: no IO, no clock.
//!
//! Every write of a holder's command locks the one register row and takes its next sequence
//! number in the same transaction, so the sequence is the order the writes committed in. The
//! fencing promise: **the revisions of the committed writes never go down** — a holder's writes
//! all land before the next holder's first (it holds a later revision), never after. A write
//! under a lower revision than the one before it is a stale holder's write landing after its
//! successor began; a write under the same revision by another holder is two holders with one
//! token. Written under the fence these are violations; written without it (the negative
//! control) they are what the control exists to show.

use crate::checker::{Verdict, Violation};
use std::collections::HashSet;

/// One committed write: its place in commit order, the holder (one `etcdctl lock` run) and the
/// revision it held the lock at (`$ETCD_LOCK_REV`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Write {
    pub seq: i64,
    pub holder: String,
    pub rev: i64,
    /// `start` or `stop` (the two writes around the holder's work).
    pub phase: String,
}

/// Checks `writes` (any order) of a fenced workload (`fenced`) or of the unfenced control;
/// `refused` writes the fence refused.
pub fn check(writes: &[Write], refused: usize, fenced: bool) -> Verdict {
    let mut sorted = writes.to_vec();
    sorted.sort_by_key(|w| w.seq);
    let mut found = Vec::new();
    for pair in sorted.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if after.rev < before.rev {
            found.push(Violation {
                invariant: "revision order",
                detail: format!(
                    "write {} ({} {} at revision {}) landed after write {} ({} {} at revision {})",
                    after.seq,
                    after.holder,
                    after.phase,
                    after.rev,
                    before.seq,
                    before.holder,
                    before.phase,
                    before.rev
                ),
            });
        } else if after.rev == before.rev && after.holder != before.holder {
            found.push(Violation {
                invariant: "one revision, two holders",
                detail: format!(
                    "writes {} and {}: {} and {} both at revision {}",
                    before.seq, after.seq, before.holder, after.holder, after.rev
                ),
            });
        }
    }
    let mut verdict = Verdict {
        tenures: sorted
            .iter()
            .map(|w| (&w.holder, w.rev))
            .collect::<HashSet<_>>()
            .len(),
        fenced_rejected: refused,
        ..Verdict::default()
    };
    if fenced {
        verdict.fenced_accepted = sorted.len();
        verdict.violations = found;
    } else {
        verdict.control_accepted = sorted.len();
        verdict.control = found;
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(seq: i64, holder: &str, rev: i64, phase: &str) -> Write {
        Write {
            seq,
            holder: holder.into(),
            rev,
            phase: phase.into(),
        }
    }

    /// Three holders in turn, each a start and a stop.
    fn clean() -> Vec<Write> {
        vec![
            w(1, "c0-1", 5, "start"),
            w(2, "c0-1", 5, "stop"),
            w(3, "c1-1", 9, "start"),
            w(4, "c1-1", 9, "stop"),
            w(5, "c2-1", 12, "start"),
            w(6, "c2-1", 12, "stop"),
        ]
    }

    #[test]
    fn holders_in_turn_pass() {
        let v = check(&clean(), 0, true);
        assert!(v.violations.is_empty() && v.control.is_empty());
        assert_eq!((v.fenced_accepted, v.tenures), (6, 3));
    }

    #[test]
    fn a_stale_holder_writing_after_its_successor_is_caught() {
        // c0-1 paused past its ttl; c1-1 took the lock at revision 9 and wrote; c0-1 woke and
        // wrote its stop.
        let mut h = clean();
        h.retain(|x| x.seq != 2);
        h.push(w(7, "c0-1", 5, "stop"));
        let v = check(&h, 0, true);
        assert_eq!(v.violations.len(), 1, "{:?}", v.violations);
        assert_eq!(v.violations[0].invariant, "revision order");
        assert!(v.violations[0].detail.contains("c0-1 stop at revision 5"));
    }

    #[test]
    fn interleaved_holders_are_caught_in_any_input_order() {
        let mut h = vec![
            w(1, "c0-1", 5, "start"),
            w(2, "c1-1", 9, "start"),
            w(3, "c0-1", 5, "stop"),
            w(4, "c1-1", 9, "stop"),
        ];
        h.reverse();
        assert_eq!(check(&h, 0, true).violations.len(), 1);
    }

    #[test]
    fn two_holders_with_one_revision_are_caught() {
        let h = vec![w(1, "c0-1", 5, "start"), w(2, "c1-1", 5, "start")];
        let v = check(&h, 0, true);
        assert_eq!(v.violations[0].invariant, "one revision, two holders");
    }

    #[test]
    fn the_unfenced_controls_findings_are_the_control_not_violations() {
        let mut h = clean();
        h.push(w(7, "c0-1", 5, "stop"));
        let v = check(&h, 0, false);
        assert!(v.violations.is_empty());
        assert_eq!((v.control.len(), v.control_accepted), (1, 7));
        let expect = crate::checker::Expect {
            control_must_fail: true,
            ..Default::default()
        };
        assert!(v.passed(&expect));
        assert!(!check(&clean(), 0, false).passed(&expect));
    }

    #[test]
    fn refusals_are_counted_for_the_pause_scenarios_rule() {
        let expect = crate::checker::Expect {
            fence_must_refuse: true,
            ..Default::default()
        };
        assert!(check(&clean(), 1, true).passed(&expect));
        assert!(!check(&clean(), 0, true).passed(&expect));
    }
}
