//! The lock workload's checker: the elector's invariants per lease, each lock guard counting as
//! a node, and the bound of each semaphore.
//!
//! Each lock and each semaphore permit is a lease of its own. Its events (those that name it)
//! go through [`check`](super::check) with the database's acquisitions of that lease, so per
//! lease: **I1** each term is handed to one guard, once, and terms rise with time; **I2** no two
//! guards' intervals overlap (asserted as the scenario says); **I3** no fenced write of a lower
//! term lands after a higher one (the unfenced control is counted, not asserted); **I4** no
//! operation after its guard's deadline or step-down. On top of that, **I2** per semaphore:
//! never more than its N permits believed at once.

use super::{DbAcquisition, Expect, Verdict, Violation};
use crate::event::{Event, Kind};
use std::collections::{BTreeMap, HashMap};

/// A semaphore of the workload: its name and permits (its leases are `NAME#i`).
#[derive(Clone, Debug)]
pub struct SemaphoreBound {
    pub name: String,
    pub permits: u32,
}

/// Checks the lock workload's `history` (merged, ordered by time) with the database's
/// acquisitions of each lease.
pub fn check(
    history: &[Event],
    db: &HashMap<String, Vec<DbAcquisition>>,
    semaphores: &[SemaphoreBound],
    expect: &Expect,
) -> Verdict {
    let mut by_lease: BTreeMap<&str, Vec<Event>> =
        db.keys().map(|name| (name.as_str(), Vec::new())).collect();
    for e in history {
        if let Some(lease) = &e.lock {
            by_lease.entry(lease).or_default().push(e.clone());
        }
    }
    let mut total = Verdict::default();
    for (lease, events) in &by_lease {
        let acquisitions = db.get(*lease).map_or(&[][..], Vec::as_slice);
        let one = super::check(events, acquisitions, expect);
        let named = |x: Violation| Violation {
            invariant: x.invariant,
            detail: format!("{lease}: {}", x.detail),
        };
        total
            .violations
            .extend(one.violations.into_iter().map(named));
        total.control.extend(one.control.into_iter().map(named));
        total.overlaps += one.overlaps;
        total.tenures += one.tenures;
        total.fenced_accepted += one.fenced_accepted;
        total.fenced_rejected += one.fenced_rejected;
        total.control_accepted += one.control_accepted;
    }
    total.faults = history
        .iter()
        .filter(|e| e.node == "nemesis" && matches!(e.kind, Kind::FaultStart { .. }))
        .count();
    for s in semaphores {
        check_bound(history, s, expect, &mut total);
    }
    total
}

/// I2 for a semaphore: the guards of its permits believing at once never exceed its permits.
fn check_bound(history: &[Event], s: &SemaphoreBound, expect: &Expect, v: &mut Verdict) {
    let prefix = format!("{}#", s.name);
    let events: Vec<Event> = history
        .iter()
        .filter(|e| e.lock.as_ref().is_some_and(|l| l.starts_with(&prefix)))
        .cloned()
        .collect();
    // (time, +1 at a start, -1 at an end); at equal times an end comes first.
    let mut edges: Vec<(u64, i64)> = super::tenures(&events)
        .iter()
        .flat_map(|t| [(t.gained, 1), (t.end(), -1)])
        .collect();
    edges.sort();
    let mut believers = 0i64;
    for (t, step) in edges {
        believers += step;
        if step > 0 && believers > i64::from(s.permits) {
            v.overlaps += 1;
            if expect.exclusive {
                v.violations.push(Violation {
                    invariant: "I2",
                    detail: format!(
                        "{}: {believers} guards believed at {:.1} ms, with {} permits",
                        s.name,
                        super::ms(t),
                        s.permits
                    ),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Resource;

    const MS: u64 = 1_000_000;

    fn at(t_ms: u64, guard: &str, lock: &str, kind: Kind) -> Event {
        Event {
            t: t_ms * MS,
            wall_ms: 0,
            node: guard.to_string(),
            lock: Some(lock.to_string()),
            kind,
        }
    }

    /// `guard` of holder `p1`/`p2` (its name's first two characters) holds `lock` with `term`
    /// from `from` until it steps down at `to` (deadline `to + 500`).
    fn tenure(guard: &str, lock: &str, term: u64, from: u64, to: u64) -> Vec<Event> {
        let gained = Kind::Gained {
            term,
            deadline: (to + 500) * MS,
            holder: Some(guard[..2].to_string()),
        };
        vec![
            at(from, guard, lock, gained),
            at(to, guard, lock, Kind::SteppedDown { term }),
        ]
    }

    fn run(parts: Vec<Vec<Event>>, db: &[(&str, u64, &str)], permits: u32) -> Verdict {
        let mut history: Vec<Event> = parts.into_iter().flatten().collect();
        history.sort_by_key(|e| e.t);
        let mut acquisitions: HashMap<String, Vec<DbAcquisition>> = HashMap::new();
        for (lock, term, holder) in db {
            acquisitions
                .entry(lock.to_string())
                .or_default()
                .push(DbAcquisition {
                    term: *term,
                    holder: holder.to_string(),
                });
        }
        let strict = Expect {
            exclusive: true,
            ..Expect::default()
        };
        let semaphore = SemaphoreBound {
            name: "s".into(),
            permits,
        };
        check(&history, &acquisitions, &[semaphore], &strict)
    }

    fn invariants(v: &Verdict) -> Vec<&'static str> {
        v.violations.iter().map(|x| x.invariant).collect()
    }

    #[test]
    fn guards_in_turn_on_each_lock_and_permit_pass() {
        let v = run(
            vec![
                tenure("p1/t0#1", "a", 1, 0, 100),
                tenure("p1/t1#1", "a", 2, 150, 300),
                tenure("p2/t0#1", "a", 3, 350, 500),
                // Another lock at the same time is no overlap.
                tenure("p2/t1#1", "b", 1, 0, 500),
                // Two permits held at once is within a semaphore of two.
                tenure("p1/t2#1", "s#0", 1, 0, 400),
                tenure("p2/t2#1", "s#1", 1, 100, 400),
            ],
            &[
                ("a", 1, "p1"),
                ("a", 2, "p1"),
                ("a", 3, "p2"),
                ("b", 1, "p2"),
            ],
            2,
        );
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!((v.tenures, v.overlaps), (6, 0));
    }

    #[test]
    fn i1_one_term_handed_to_two_guards_of_one_process() {
        // The relock right after a release: the second guard is "renewed" with the first's term.
        let v = run(
            vec![
                tenure("p1/t0#1", "a", 1, 0, 100),
                tenure("p1/t1#1", "a", 1, 110, 300),
            ],
            &[("a", 1, "p1")],
            1,
        );
        assert!(invariants(&v).contains(&"I1"), "{:?}", v.violations);
        assert!(v.violations[0].detail.starts_with("a: "));
    }

    #[test]
    fn i2_two_guards_of_one_lock_at_once() {
        let v = run(
            vec![
                tenure("p1/t1#1", "a", 1, 0, 300),
                tenure("p2/t0#1", "a", 2, 200, 400),
            ],
            &[],
            1,
        );
        assert_eq!(invariants(&v), vec!["I2"]);
        assert_eq!(v.overlaps, 1);
    }

    #[test]
    fn i2_more_believers_than_permits() {
        // Each permit on its own is fine; three guards of a two-permit semaphore at once are
        // not (permit 0 was believed by two guards with terms 1 and 2 as well).
        let v = run(
            vec![
                tenure("p1/t2#1", "s#0", 1, 0, 300),
                tenure("p2/t2#1", "s#1", 1, 0, 300),
                tenure("p2/t3#1", "s#0", 2, 100, 400),
            ],
            &[],
            2,
        );
        assert_eq!(invariants(&v), vec!["I2", "I2"], "{:?}", v.violations);
        assert!(v.violations[1].detail.contains("3 guards believed"));
    }

    #[test]
    fn i3_a_stale_fenced_write_on_one_lock() {
        let stale = Kind::OpAccepted {
            resource: Resource::Fenced,
            term: 1,
            seq: 4,
            prev_node: "p2/t0#1".into(),
            prev_term: 2,
            prev_seq: 1,
        };
        let v = run(vec![vec![at(500, "p1/t0#1", "b", stale)]], &[], 1);
        assert_eq!(invariants(&v), vec!["I3"]);
    }

    #[test]
    fn the_database_history_of_each_lease_is_checked() {
        let v = run(vec![], &[("a", 2, "p1"), ("a", 2, "p2")], 1);
        assert_eq!(invariants(&v), vec!["I1"]);
    }
}
