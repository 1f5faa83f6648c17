//! The checker: invariants I1–I5 over a merged history, the database's own history of
//! acquisitions, and the scenario's expectations. Pure: no IO, no clock.
//!
//! - **I1** per name, terms are unique and strictly increase: no term is gained by two nodes or
//!   twice (by one node either), no two campaigns are answered `acquired` with one term, terms are gained in increasing order of time, each node's answers never show a
//!   lower term than before, and the database's acquisitions have strictly increasing terms.
//! - **I2** the leadership intervals of different (node, term) never overlap. An interval runs
//!   from `gained` to the earlier of `stepped_down` and the last deadline the node recorded for
//!   that term (a killed node's belief ends at its deadline). Counted always, asserted only
//!   where the scenario has no pauses and a healthy database clock (P3's assumptions).
//! - **I3** a resource never accepts a lower term after a higher one: each accepted write
//!   names the write it replaced, and that write's term must not be higher. On the fenced
//!   register this is a violation; on the unfenced control it is what the negative control
//!   exists to show.
//! - **I4** no operation is issued after its node's tenure ended: after its deadline, or after
//!   it recorded `stepped_down` for that term.
//! - **I5** after a crash-like fault of the leader (SIGKILL, SIGSTOP), another node leads within
//!   the bound of P6.

pub mod locks;
#[cfg(test)]
mod tests;

use crate::event::{Event, Kind, Resource};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Duration;

/// What the scenario promises about its faults.
#[derive(Clone, Copy, Debug, Default)]
pub struct Expect {
    /// Assert I2 (no pauses, no starvation, healthy database clock).
    pub exclusive: bool,
    /// The negative control must be caught (the pause scenarios: both loops are paused inside
    /// their work; `etcd-unfenced`: the unfenced writes of a paused holder).
    pub control_must_fail: bool,
    /// The fence must refuse at least one write (the same stale write, fenced).
    pub fence_must_refuse: bool,
    /// Assert I5 with this bound after each crash-like fault.
    pub failover_bound: Option<Duration>,
}

/// A row of the database's history that began a tenure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DbAcquisition {
    pub term: u64,
    pub holder: String,
}

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub invariant: &'static str,
    pub detail: String,
}

/// The checker's verdict on one run.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// Violations of the promises (fenced resource, I1, asserted I2, I4, asserted I5).
    pub violations: Vec<Violation>,
    /// Stale writes accepted by the unfenced control (and I4 breaches of its loop).
    pub control: Vec<Violation>,
    /// Overlapping leadership intervals, asserted or not.
    pub overlaps: usize,
    pub tenures: usize,
    pub faults: usize,
    pub fenced_accepted: usize,
    pub fenced_rejected: usize,
    pub control_accepted: usize,
    /// Fault start → the next tenure's `gained`, for every fault after which leadership moved.
    pub failovers: Vec<Duration>,
}

impl Verdict {
    /// Whether the run passes: no violation; where the negative control must be caught, it
    /// was; where the fence must refuse a write, it refused at least one.
    pub fn passed(&self, expect: &Expect) -> bool {
        self.violations.is_empty()
            && (!expect.control_must_fail || !self.control.is_empty())
            && (!expect.fence_must_refuse || self.fenced_rejected > 0)
    }
}

/// One (node, term) tenure as recorded by its node.
#[derive(Clone, Debug)]
struct Tenure {
    node: String,
    /// The holder id the database knows the node by.
    holder: String,
    term: u64,
    gained: u64,
    stepped_down: Option<u64>,
    deadline: u64,
}

impl Tenure {
    fn end(&self) -> u64 {
        self.stepped_down
            .map_or(self.deadline, |s| s.min(self.deadline))
    }
}

/// Checks `history` (merged, ordered by time) against I1–I5.
pub fn check(history: &[Event], db: &[DbAcquisition], expect: &Expect) -> Verdict {
    let mut verdict = Verdict::default();
    let tenures = tenures(history);
    verdict.tenures = tenures.len();
    check_terms(history, &tenures, db, &mut verdict);
    check_overlaps(&tenures, expect, &mut verdict);
    check_resources(history, &mut verdict);
    check_issued(history, &tenures, &mut verdict);
    check_failovers(history, &tenures, expect, &mut verdict);
    verdict
}

fn violation(invariant: &'static str, detail: String) -> Violation {
    Violation { invariant, detail }
}

fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

fn tenures(history: &[Event]) -> Vec<Tenure> {
    let mut by_key: BTreeMap<(String, u64), Tenure> = BTreeMap::new();
    for e in history {
        match &e.kind {
            Kind::Gained {
                term,
                deadline,
                holder,
            } => {
                by_key
                    .entry((e.node.clone(), *term))
                    .or_insert_with(|| Tenure {
                        node: e.node.clone(),
                        holder: holder.clone().unwrap_or_else(|| e.node.clone()),
                        term: *term,
                        gained: e.t,
                        stepped_down: None,
                        deadline: *deadline,
                    });
            }
            Kind::Renewed { term, deadline } => {
                if let Some(t) = by_key.get_mut(&(e.node.clone(), *term)) {
                    t.deadline = t.deadline.max(*deadline);
                }
            }
            Kind::SteppedDown { term } => {
                if let Some(t) = by_key.get_mut(&(e.node.clone(), *term)) {
                    t.stepped_down.get_or_insert(e.t);
                }
            }
            _ => {}
        }
    }
    let mut all: Vec<Tenure> = by_key.into_values().collect();
    all.sort_by_key(|t| t.gained);
    all
}

/// I1.
fn check_terms(history: &[Event], tenures: &[Tenure], db: &[DbAcquisition], v: &mut Verdict) {
    let mut holders: HashMap<u64, &str> = HashMap::new();
    for t in tenures {
        if let Some(other) = holders.insert(t.term, &t.node) {
            v.violations.push(violation(
                "I1",
                format!("term {} gained by both {other} and {}", t.term, t.node),
            ));
        }
    }
    // One node gaining one term twice is a term handed out twice as well (a tenure the
    // database forgot, e.g. after a failover that lost commits, handed to the same node again).
    let mut gained: HashMap<(&str, u64), u64> = HashMap::new();
    for e in history {
        if let Kind::Gained { term, .. } = &e.kind {
            if let Some(first) = gained.insert((e.node.as_str(), *term), e.t) {
                v.violations.push(violation(
                    "I1",
                    format!(
                        "{} gained term {term} twice, at {:.1} ms and {:.1} ms",
                        e.node,
                        ms(first),
                        ms(e.t)
                    ),
                ));
            }
        }
    }
    for pair in tenures.windows(2) {
        if pair[1].term <= pair[0].term {
            v.violations.push(violation(
                "I1",
                format!(
                    "{} gained term {} at {:.1} ms, after {} gained term {} at {:.1} ms",
                    pair[1].node,
                    pair[1].term,
                    ms(pair[1].gained),
                    pair[0].node,
                    pair[0].term,
                    ms(pair[0].gained)
                ),
            ));
        }
    }
    // Every `acquired` answer is a new tenure, so its term is new: the database handing one
    // term out twice (after losing the commit of the first, say) breaks P1 even when the
    // elector that got it twice did not believe the second time.
    let mut acquired: HashMap<u64, (&str, u64)> = HashMap::new();
    for e in history {
        if let Kind::CampaignAnswered { effect, term } = &e.kind {
            if effect == "acquired" {
                if let Some((node, t)) = acquired.insert(*term, (e.node.as_str(), e.t)) {
                    v.violations.push(violation(
                        "I1",
                        format!(
                            "term {term} acquired twice: by {node} at {:.1} ms and by {} at {:.1} ms",
                            ms(t),
                            e.node,
                            ms(e.t)
                        ),
                    ));
                }
            }
        }
    }
    let mut seen: HashMap<&str, u64> = HashMap::new();
    for e in history {
        if let Kind::CampaignAnswered { term, .. } = &e.kind {
            let last = seen.entry(&e.node).or_insert(0);
            if *term < *last {
                v.violations.push(violation(
                    "I1",
                    format!("{} was answered term {term} after term {last}", e.node),
                ));
            }
            *last = (*last).max(*term);
        }
    }
    for pair in db.windows(2) {
        if pair[1].term <= pair[0].term {
            v.violations.push(violation(
                "I1",
                format!(
                    "database history: term {} ({}) recorded after term {} ({})",
                    pair[1].term, pair[1].holder, pair[0].term, pair[0].holder
                ),
            ));
        }
    }
    let db_terms: HashMap<u64, &str> = db.iter().map(|a| (a.term, a.holder.as_str())).collect();
    for t in tenures {
        match db_terms.get(&t.term) {
            Some(holder) if *holder == t.holder => {}
            Some(holder) => v.violations.push(violation(
                "I1",
                format!(
                    "{} ({}) believed it gained term {}, the database gave it to {holder}",
                    t.node, t.holder, t.term
                ),
            )),
            // Not every tenure begins with an acquisition row if history was trimmed; only a
            // contradiction counts.
            None => {}
        }
    }
}

/// I2.
fn check_overlaps(tenures: &[Tenure], expect: &Expect, v: &mut Verdict) {
    for (i, a) in tenures.iter().enumerate() {
        for b in &tenures[i + 1..] {
            if a.node != b.node && b.gained < a.end() && a.gained < b.end() {
                v.overlaps += 1;
                if expect.exclusive {
                    v.violations.push(violation(
                        "I2",
                        format!(
                            "{} (term {}) led until {:.1} ms, {} (term {}) from {:.1} ms",
                            a.node,
                            a.term,
                            ms(a.end()),
                            b.node,
                            b.term,
                            ms(b.gained)
                        ),
                    ));
                }
            }
        }
    }
}

/// I3, and the operation counts.
fn check_resources(history: &[Event], v: &mut Verdict) {
    for e in history {
        match &e.kind {
            Kind::OpAccepted {
                resource,
                term,
                seq,
                prev_node,
                prev_term,
                prev_seq,
            } => {
                let stale = *prev_term > *term;
                let detail = || {
                    format!(
                        "{} wrote term {term} (op {seq}) over {prev_node}'s term {prev_term} \
                         (op {prev_seq}) at {:.1} ms",
                        e.node,
                        ms(e.t)
                    )
                };
                match resource {
                    Resource::Fenced => {
                        v.fenced_accepted += 1;
                        if stale {
                            v.violations.push(violation("I3", detail()));
                        }
                    }
                    Resource::Unfenced => {
                        v.control_accepted += 1;
                        if stale {
                            v.control.push(violation("I3", detail()));
                        }
                    }
                }
            }
            Kind::OpRejected {
                resource: Resource::Fenced,
                ..
            } => v.fenced_rejected += 1,
            _ => {}
        }
    }
}

/// I4.
fn check_issued(history: &[Event], tenures: &[Tenure], v: &mut Verdict) {
    let ended: HashMap<(&str, u64), u64> = tenures
        .iter()
        .filter_map(|t| Some(((t.node.as_str(), t.term), t.stepped_down?)))
        .collect();
    for e in history {
        let Kind::OpIssued {
            resource,
            term,
            seq,
            deadline,
        } = &e.kind
        else {
            continue;
        };
        let after_deadline = e.t >= *deadline;
        let after_step_down = ended
            .get(&(e.node.as_str(), *term))
            .is_some_and(|s| e.t > *s);
        if after_deadline || after_step_down {
            let why = if after_deadline {
                format!("{:.1} ms after its deadline", ms(e.t - deadline))
            } else {
                "after it stepped down".to_string()
            };
            let found = violation(
                "I4",
                format!("{} issued op {seq} under term {term} {why}", e.node),
            );
            match resource {
                Resource::Fenced => v.violations.push(found),
                Resource::Unfenced => v.control.push(found),
            }
        }
    }
}

/// Whether a fault makes the leader look crashed to the others.
fn crash_like(fault: &str) -> bool {
    matches!(fault, "kill" | "pause")
}

/// I5, and the failover times of every fault.
fn check_failovers(history: &[Event], tenures: &[Tenure], expect: &Expect, v: &mut Verdict) {
    let mut counted = HashSet::new();
    for e in history {
        let Kind::FaultStart { fault, target } = &e.kind else {
            continue;
        };
        if e.node != "nemesis" {
            continue;
        }
        v.faults += 1;
        // The term in force when the fault began, and the first tenure after it with a higher
        // term (on another node, if the fault hit that node like a crash).
        let current = tenures
            .iter()
            .filter(|t| t.gained <= e.t)
            .map(|t| t.term)
            .max()
            .unwrap_or(0);
        let next = tenures.iter().find(|t| {
            t.gained > e.t && t.term > current && !(crash_like(fault) && &t.node == target)
        });
        match next {
            Some(t) => {
                let took = Duration::from_nanos(t.gained - e.t);
                if counted.insert((t.node.clone(), t.term)) {
                    v.failovers.push(took);
                }
                if let (Some(bound), true) = (expect.failover_bound, crash_like(fault)) {
                    if took > bound {
                        v.violations.push(violation(
                            "I5",
                            format!(
                                "after {fault} of {target}, {} led only {:.0} ms later (bound {:.0} ms)",
                                t.node,
                                took.as_secs_f64() * 1e3,
                                bound.as_secs_f64() * 1e3
                            ),
                        ));
                    }
                }
            }
            None => {
                if expect.failover_bound.is_some() && crash_like(fault) {
                    v.violations.push(violation(
                        "I5",
                        format!("after {fault} of {target}, nobody else led before the end"),
                    ));
                }
            }
        }
    }
}
