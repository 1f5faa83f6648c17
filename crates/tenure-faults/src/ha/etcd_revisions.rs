//! What `etcd-lock-failover-async` checks beyond the register (`etcd::check`), where the
//! register cannot see: the writes and revisions the failover lost. Pure: no IO, no clock.
//!
//! Its inputs are three histories and the revisions around the failover:
//!
//! - the holders' own log (`holders.tsv`, outside the database): every write as its command
//!   saw it end, with the revision it held the lock at — lost writes included;
//! - the register as the old primary had it, read on it directly just before it was killed
//!   (its clients cut first, so nothing more could commit on it): `old`;
//! - the register as the promoted replica kept it, at the end: `kept`.
//!
//! The checks: no two holders wrote under one revision (the log, lost writes included); the promoted replica kept a
//! prefix of the old primary's register and lost only its tail; every write the log calls
//! committed is in one of the two registers; every write made after the failover (in `kept`,
//! not in `old`) held a revision the replica had (a key created before the WAL stream was cut,
//! which survived) or one above every revision the old primary handed out — never one the
//! failover lost; and a revision written after the failover is above that too.

use crate::checker::Violation;
use crate::etcd::check::Write;
use std::collections::{BTreeMap, BTreeSet, HashSet};

/// One line of the holders' log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// CLOCK_MONOTONIC (ns) when the holder's command saw the write end.
    pub t_ns: u64,
    pub holder: String,
    /// `$ETCD_LOCK_REV`: etcd's revision when etcdctl got the lock (at least its key's create
    /// revision).
    pub rev: i64,
    pub phase: String,
    /// `committed`, `refused` (by the fence) or `error`.
    pub outcome: String,
}

/// The holders' log (`etcd::child::HOLDERS_LOG`); lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<Held> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split('\t').collect();
            let [t, holder, rev, phase, outcome] = f.as_slice() else {
                return None;
            };
            Some(Held {
                t_ns: t.parse().ok()?,
                holder: (*holder).to_string(),
                rev: rev.parse().ok()?,
                phase: (*phase).to_string(),
                outcome: (*outcome).to_string(),
            })
        })
        .collect()
}

/// The revisions around the failover, read by the harness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Around {
    /// The old primary's revision right after its WAL stream was cut: the promoted replica has
    /// at most this one.
    pub at_cut: i64,
    /// The highest revision the old primary handed out at all (read on it directly, its
    /// clients cut, just before it was killed).
    pub before_kill: i64,
    /// A revision written through `tenure serve` after the failover (`etcdctl put -w json`).
    pub probe: i64,
}

/// What the checks found.
#[derive(Debug, Default)]
pub struct Findings {
    pub violations: Vec<Violation>,
    /// The writes the old primary had and the promoted replica lost.
    pub lost: Vec<Write>,
    /// The revisions of locks taken after the failover (above `before_kill`), lowest first.
    pub new_after: Vec<i64>,
}

/// A write's identity across the two registers (its sequence number may be reused).
fn same(a: &Write, b: &Write) -> bool {
    a.seq == b.seq && a.holder == b.holder && a.rev == b.rev && a.phase == b.phase
}

/// Checks the histories of one run (see the module's docs).
pub fn check(log: &[Held], old: &[Write], kept: &[Write], around: &Around) -> Findings {
    let mut found = Findings::default();
    let mut flag = |invariant: &'static str, detail: String| {
        found.violations.push(Violation { invariant, detail });
    };

    // A revision two holders wrote under: handed out twice. Only writes the fence let
    // through: `$ETCD_LOCK_REV` is the revision etcdctl saw when it got the lock, and etcd
    // 3.4's lock recipe also "gets" it when its own key is already gone (it waits only for the
    // keys below its own), so the fence's refusals may share one.
    let mut holders: BTreeMap<i64, BTreeSet<&str>> = BTreeMap::new();
    for h in log.iter().filter(|h| h.outcome == "committed") {
        holders.entry(h.rev).or_default().insert(&h.holder);
    }
    for (rev, by) in &holders {
        if by.len() > 1 {
            let by: Vec<&str> = by.iter().copied().collect();
            flag(
                "revision handed out twice",
                format!("writes of {} under revision {rev}", by.join(" and ")),
            );
        }
    }

    // The replica kept a prefix of the old primary's register.
    let kept_of_old: Vec<&Write> = old
        .iter()
        .filter(|w| kept.iter().any(|k| same(k, w)))
        .collect();
    let last_kept = kept_of_old.iter().map(|w| w.seq).max().unwrap_or(0);
    for w in old.iter().filter(|w| w.seq <= last_kept) {
        if !kept.iter().any(|k| same(k, w)) {
            flag(
                "kept a prefix",
                format!(
                    "write {} ({} {} at revision {}) lost, though write {last_kept} was kept",
                    w.seq, w.holder, w.phase, w.rev
                ),
            );
        }
    }
    found.lost = old.iter().filter(|w| w.seq > last_kept).cloned().collect();

    // Every acknowledged write is in one of the registers.
    let registered: HashSet<(&str, i64, &str)> = old
        .iter()
        .chain(kept)
        .map(|w| (w.holder.as_str(), w.rev, w.phase.as_str()))
        .collect();
    for h in log.iter().filter(|h| h.outcome == "committed") {
        if !registered.contains(&(h.holder.as_str(), h.rev, h.phase.as_str())) {
            flag(
                "acknowledged write missing",
                format!(
                    "{} {} at revision {} committed, in neither register",
                    h.holder, h.phase, h.rev
                ),
            );
        }
    }

    // The writes made after the failover: never at a revision the failover lost.
    let after = kept.iter().filter(|k| !old.iter().any(|w| same(w, k)));
    let mut new_after = BTreeSet::new();
    for w in after {
        if w.rev > around.before_kill {
            new_after.insert(w.rev);
        } else if w.rev > around.at_cut {
            flag(
                "revision handed out again after the failover",
                format!(
                    "{} {} after the failover at revision {}, which the old primary handed out \
                     (it had {} when its WAL stream was cut, {} when it was killed)",
                    w.holder, w.phase, w.rev, around.at_cut, around.before_kill
                ),
            );
        }
    }
    found.new_after = new_after.into_iter().collect();
    if around.probe <= around.before_kill {
        flag(
            "revision handed out again after the failover",
            format!(
                "a put after the failover got revision {}, the old primary had handed out {}",
                around.probe, around.before_kill
            ),
        );
    }
    found
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

    fn held(holder: &str, rev: i64, phase: &str, outcome: &str) -> Held {
        Held {
            t_ns: 0,
            holder: holder.into(),
            rev,
            phase: phase.into(),
            outcome: outcome.into(),
        }
    }

    const FLOOR: i64 = 1 << 40;
    const AROUND: Around = Around {
        at_cut: 20,
        before_kill: 30,
        probe: FLOOR + 5,
    };

    /// c0-1 before the cut (kept), c1-1 on the primary alone (lost), c2-1 after the failover
    /// at the new epoch's revisions; c1-1's stop refused by the fence.
    fn run() -> (Vec<Held>, Vec<Write>, Vec<Write>) {
        let log = vec![
            held("c0-1", 10, "start", "committed"),
            held("c0-1", 10, "stop", "committed"),
            held("c1-1", 25, "start", "committed"),
            held("c1-1", 25, "stop", "refused"),
            held("c2-1", FLOOR + 3, "start", "committed"),
            held("c2-1", FLOOR + 3, "stop", "committed"),
        ];
        let old = vec![
            w(1, "c0-1", 10, "start"),
            w(2, "c0-1", 10, "stop"),
            w(3, "c1-1", 25, "start"),
        ];
        let kept = vec![
            w(1, "c0-1", 10, "start"),
            w(2, "c0-1", 10, "stop"),
            w(3, "c2-1", FLOOR + 3, "start"),
            w(4, "c2-1", FLOOR + 3, "stop"),
        ];
        (log, old, kept)
    }

    #[test]
    fn a_failover_with_epochs_passes_and_names_the_lost_writes() {
        let (log, old, kept) = run();
        let f = check(&log, &old, &kept, &AROUND);
        assert!(f.violations.is_empty(), "{:?}", f.violations);
        assert_eq!(f.lost, vec![w(3, "c1-1", 25, "start")]);
        assert_eq!(f.new_after, vec![FLOOR + 3]);
    }

    #[test]
    fn refused_holders_may_share_a_revision() {
        // Waiters whose keys the failover took: etcdctl ran their commands at the revision it
        // saw, and the fence refused them.
        let (mut log, old, kept) = run();
        log.push(held("c0-2", FLOOR + 3, "start", "refused"));
        log.push(held("c1-2", FLOOR + 3, "start", "refused"));
        assert!(check(&log, &old, &kept, &AROUND).violations.is_empty());
    }

    #[test]
    fn a_surviving_key_may_write_after_the_failover() {
        let (log, old, mut kept) = run();
        kept.insert(2, w(3, "c3-1", 18, "stop"));
        assert!(check(&log, &old, &kept, &AROUND).violations.is_empty());
    }

    #[test]
    fn a_lost_revision_handed_out_again_is_caught_twice() {
        // Epochs off: the promoted replica's counter goes on from below the lost revision 25.
        let (mut log, old, mut kept) = run();
        log.push(held("c2-2", 25, "start", "committed"));
        kept.push(w(5, "c2-2", 25, "start"));
        let f = check(&log, &old, &kept, &AROUND);
        let names: Vec<&str> = f.violations.iter().map(|v| v.invariant).collect();
        assert_eq!(
            names,
            [
                "revision handed out twice",
                "revision handed out again after the failover"
            ]
        );
        assert!(f.violations[0].detail.contains("c1-1 and c2-2"));
    }

    #[test]
    fn a_probe_below_the_old_primarys_revision_is_caught() {
        let (log, old, kept) = run();
        let around = Around {
            probe: 26,
            ..AROUND
        };
        let f = check(&log, &old, &kept, &around);
        assert_eq!(f.violations.len(), 1);
    }

    #[test]
    fn a_hole_in_what_was_kept_or_an_unregistered_write_is_caught() {
        let (mut log, old, mut kept) = run();
        kept.remove(0);
        log.push(held("c9-1", FLOOR + 9, "start", "committed"));
        let f = check(&log, &old, &kept, &AROUND);
        let names: Vec<&str> = f.violations.iter().map(|v| v.invariant).collect();
        assert_eq!(names, ["kept a prefix", "acknowledged write missing"]);
    }

    #[test]
    fn parses_the_holders_log() {
        let text = "12\tc0-1\t10\tstart\tcommitted\nbroken line\n13\tc0-1\t10\tstop\trefused\n";
        let log = parse(text);
        assert_eq!(log.len(), 2);
        assert_eq!(
            log[1],
            Held {
                t_ns: 13,
                ..held("c0-1", 10, "stop", "refused")
            }
        );
    }
}
