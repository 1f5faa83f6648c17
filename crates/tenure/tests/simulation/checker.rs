//! The invariants, checked at every guard registration, every database call, every workload
//! step and a fine periodic tick:
//! - **one-holder**: at most one unlost guard per name across all holders (a semaphore's
//!   permits `NAME#i`: at most one each, at most N together);
//! - **unique-term**: no (name, term) ever reaches two guards;
//! - **lost-stays-lost**: a guard once seen lost never reports held again;
//! - **lease-covers-belief** (in-memory backend only): an unlost guard's local deadline lies
//!   before the expiry of its row, and the row still has the guard's term (the timing model
//!   of `Timing` and `docs/design-notes.md`'s "One belief type": the belief always ends first);
//! - **terms-rise**: per name, guards are registered in increasing term order, and no write of
//!   the backend lowers a row's term.

use crate::common::memory::MemoryBackend;
use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure::{LeaderGuard, LockGuard, ShardGuard, Tenure};
use tokio::sync::Notify;
use tokio::time::Instant;

/// Lines of trace kept for a failure report.
const TRACE: usize = 40;

/// How the checker looks at a guard: the lock or shard guard its task shares, or a leader
/// guard clone.
pub(crate) enum Probe {
    Lock(Arc<LockGuard>),
    Shard(Arc<ShardGuard>),
    Leader(LeaderGuard),
}

impl std::ops::Deref for Probe {
    type Target = Tenure;

    /// Either guard's tenure: its term, holder, deadline and end.
    fn deref(&self) -> &Tenure {
        match self {
            Probe::Lock(g) => g,
            Probe::Shard(g) => g,
            Probe::Leader(g) => g,
        }
    }
}

/// The first invariant broken in a schedule, with the events that led to it.
#[derive(Debug)]
pub(crate) struct Violation {
    pub invariant: &'static str,
    pub detail: String,
    pub at: Duration,
    pub trace: Vec<String>,
}

struct Entry {
    name: String,
    term: u64,
    owner: String,
    probe: Probe,
    seen_lost: bool,
    /// Whether it read lost at the latest check.
    lost_now: bool,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<u64, Entry>,
    next_id: u64,
    /// Who got each (name, term) first.
    handed: BTreeMap<(String, u64), String>,
    highest: BTreeMap<String, u64>,
    /// Semaphore name -> permits.
    semaphores: BTreeMap<String, u32>,
    trace: VecDeque<String>,
    violation: Option<Violation>,
}

pub(crate) struct Checker {
    state: Mutex<State>,
    start: Instant,
    /// The in-memory backend, whose writes are checked for falling terms.
    memory: Option<Arc<MemoryBackend>>,
    failed: Notify,
}

impl std::fmt::Debug for Checker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Checker")
    }
}

impl Checker {
    pub(crate) fn new(memory: Option<Arc<MemoryBackend>>) -> Checker {
        Checker {
            state: Mutex::default(),
            start: Instant::now(),
            memory,
            failed: Notify::new(),
        }
    }

    fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Adds a line to the trace.
    pub(crate) fn event(&self, line: impl AsRef<str>) {
        let at = self.elapsed();
        let mut state = self.state.lock().unwrap();
        push_trace(&mut state, at, line.as_ref());
    }

    /// Declares the semaphore `name` of `permits` (its guards are named `name#i`).
    pub(crate) fn semaphore(&self, name: &str, permits: u32) {
        let mut state = self.state.lock().unwrap();
        state.semaphores.insert(name.to_string(), permits);
    }

    /// Registers a guard just handed out; returns its id.
    pub(crate) fn register(&self, name: &str, term: u64, owner: &str, probe: Probe) -> u64 {
        let at = self.elapsed();
        let mut state = self.state.lock().unwrap();
        push_trace(&mut state, at, &format!("{owner} GOT {name} term {term}"));
        let key = (name.to_string(), term);
        if let Some(first) = state.handed.get(&key).cloned() {
            let detail =
                format!("{name} term {term} reached a second guard ({owner}; first {first})");
            fail(&mut state, at, "unique-term", detail);
        } else {
            state.handed.insert(key, owner.to_string());
        }
        let highest = state.highest.entry(name.to_string()).or_insert(0);
        let before = *highest;
        *highest = before.max(term);
        if term < before {
            let detail = format!("{owner} got {name} term {term} after term {before}");
            fail(&mut state, at, "terms-rise", detail);
        }
        let id = state.next_id;
        state.next_id += 1;
        state.entries.insert(
            id,
            Entry {
                name: name.to_string(),
                term,
                owner: owner.to_string(),
                probe,
                seen_lost: false,
                lost_now: false,
            },
        );
        self.check_locked(&mut state, at);
        id
    }

    /// The guard's `lost()` completed: it must read lost now, and forever after.
    pub(crate) fn saw_lost(&self, id: u64) {
        let at = self.elapsed();
        let mut state = self.state.lock().unwrap();
        let broken = state.entries.get_mut(&id).and_then(|entry| {
            entry.seen_lost = true;
            (!entry.probe.is_lost()).then(|| {
                format!(
                    "{} {} term {}: lost() completed but is_lost() is false",
                    entry.owner, entry.name, entry.term
                )
            })
        });
        if let Some(detail) = broken {
            fail(&mut state, at, "lost-stays-lost", detail);
        }
        self.check_locked(&mut state, at);
    }

    /// Stops watching a guard (its task ends it now, or its signal fired for good).
    pub(crate) fn retire(&self, id: u64) {
        let mut state = self.state.lock().unwrap();
        state.entries.remove(&id);
    }

    /// Records a violation the workload saw itself (an observer that led).
    pub(crate) fn violated(&self, invariant: &'static str, detail: String) {
        let at = self.elapsed();
        let mut state = self.state.lock().unwrap();
        fail(&mut state, at, invariant, detail);
        self.check_locked(&mut state, at);
    }

    /// Checks every invariant now.
    pub(crate) fn check(&self) {
        let at = self.elapsed();
        let mut state = self.state.lock().unwrap();
        self.check_locked(&mut state, at);
    }

    fn check_locked(&self, state: &mut State, at: Duration) {
        if state.violation.is_none() {
            check_state(state, self.memory.as_deref(), at);
        }
        if state.violation.is_some() {
            self.failed.notify_one();
        }
    }
    /// The next instant at which a guard held now reaches its deadline: a check then sees the
    /// loss at once, so that a guard held again afterwards cannot slip between two ticks.
    pub(crate) fn next_deadline(&self) -> Option<Instant> {
        let now = Instant::now();
        let state = self.state.lock().unwrap();
        state
            .entries
            .values()
            .map(|e| e.probe.deadline())
            .filter(|d| *d > now)
            .min()
    }

    /// How many tenures of names starting with `prefix` reached a guard.
    pub(crate) fn tenures_of(&self, prefix: &str) -> usize {
        let state = self.state.lock().unwrap();
        state
            .handed
            .keys()
            .filter(|(name, _)| name.starts_with(prefix))
            .count()
    }

    /// Completes once an invariant is broken.
    pub(crate) async fn failed(&self) {
        let notified = self.failed.notified();
        if self.state.lock().unwrap().violation.is_some() {
            return;
        }
        notified.await;
    }

    pub(crate) fn take_violation(&self) -> Option<Violation> {
        self.state.lock().unwrap().violation.take()
    }
}

fn push_trace(state: &mut State, at: Duration, line: &str) {
    if state.trace.len() == TRACE {
        state.trace.pop_front();
    }
    let mut stamped = String::with_capacity(line.len() + 10);
    let _ = write!(stamped, "{:>7.3}s {line}", at.as_secs_f64());
    state.trace.push_back(stamped);
}

fn fail(state: &mut State, at: Duration, invariant: &'static str, detail: String) {
    if state.violation.is_some() {
        return;
    }
    push_trace(state, at, &format!("VIOLATION {invariant}: {detail}"));
    state.violation = Some(Violation {
        invariant,
        detail,
        at,
        trace: state.trace.iter().cloned().collect(),
    });
}

fn check_state(state: &mut State, memory: Option<&MemoryBackend>, at: Duration) {
    // Counted without allocating: this runs at every step; the details only on a violation.
    let mut regained = None;
    for entry in state.entries.values_mut() {
        entry.lost_now = entry.probe.is_lost();
        if entry.lost_now {
            entry.seen_lost = true;
        } else if entry.seen_lost && regained.is_none() {
            regained = Some(format!(
                "{} {} term {} was lost and reports held again",
                entry.owner, entry.name, entry.term
            ));
        }
    }
    let mut unlost: BTreeMap<&str, usize> = BTreeMap::new();
    for entry in state.entries.values().filter(|e| !e.lost_now) {
        *unlost.entry(entry.name.as_str()).or_default() += 1;
    }
    let mut crowded = unlost
        .iter()
        .find(|(_, count)| **count > 1)
        .map(|(name, _)| holders(state, |n| n == *name));
    for (semaphore, permits) in &state.semaphores {
        let prefix = format!("{semaphore}#");
        let held: usize = unlost
            .iter()
            .filter(|(name, _)| name.starts_with(&prefix))
            .map(|(_, count)| count)
            .sum();
        if held > *permits as usize && crowded.is_none() {
            let who = holders(state, |n| n.starts_with(&prefix));
            crowded = Some(format!("{semaphore} ({permits} permits): {who}"));
        }
    }
    let uncovered = memory.and_then(|m| uncovered_belief(state, m));
    let fell = memory.and_then(|m| m.term_falls.lock().unwrap().first().cloned());
    if let Some(detail) = regained {
        fail(state, at, "lost-stays-lost", detail);
    } else if let Some(detail) = crowded {
        fail(state, at, "one-holder", detail);
    } else if let Some((how, detail)) = uncovered {
        fail(state, at, how, detail);
    } else if let Some(detail) = fell {
        fail(
            state,
            at,
            "terms-rise",
            format!("a backend write lowered {detail}"),
        );
    }
}

/// The unlost guards on the names `matches` accepts, for a report.
fn holders(state: &State, matches: impl Fn(&str) -> bool) -> String {
    let who: Vec<String> = state
        .entries
        .values()
        .filter(|e| matches(&e.name) && !e.lost_now)
        .map(|e| format!("{} holds {} term {}", e.owner, e.name, e.term))
        .collect();
    who.join(", ")
}

/// The first unlost guard whose belief the database's row does not cover, and how: the row
/// has a newer term, or it expires no later than the guard's deadline (vacated by a release,
/// or still held).
fn uncovered_belief(state: &State, memory: &MemoryBackend) -> Option<(&'static str, String)> {
    state
        .entries
        .values()
        .filter(|e| !e.lost_now)
        .find_map(|e| {
            let deadline = memory.at(e.probe.deadline());
            let row = memory.row(&e.name)?;
            // A demote empties the holder but keeps the expiry: still covered.
            let how = if row.term != e.term {
                "lease-covers-belief (newer term)"
            } else if row.expires_at > deadline {
                return None;
            } else if row.holder.is_none() {
                "lease-covers-belief (row vacated)"
            } else {
                "lease-covers-belief (row expires first)"
            };
            let secs = |t: tenure::DbTime| (t.0 - memory.now().0) as f64 / 1e6;
            let detail = format!(
                "{} ({}) believes {} term {} for {:.3}s more, but the row (holder {:?}, term {}, \
             ttl {} ms) expires in {:.3}s",
                e.owner,
                e.probe.candidate(),
                e.name,
                e.term,
                secs(deadline),
                row.holder,
                row.term,
                row.ttl_ms,
                secs(row.expires_at),
            );
            Some((how, detail))
        })
}
