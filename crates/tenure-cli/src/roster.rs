//! The candidates of a name with its leader marked: `tenure candidates NAME`, `GET
//! /v1/candidates/{name}`, and the live counts of `tenure status`.
//!
//! The registry and the lease are read in one transaction: the leader mark is the lease's
//! live holder at the registry's instant.

use crate::output::{human_duration, time};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Duration;
use tenure::candidates::{Candidate, Candidates, Roster};
use tenure::{DbTime, Store};

/// The candidates of one name, best first (priority, then live longest).
#[derive(Debug, Serialize)]
pub(crate) struct RosterJson {
    pub name: String,
    /// The database instant of the registry's read.
    pub now: String,
    /// The live holder of the lease, if anyone leads.
    pub leader: Option<String>,
    pub candidates: Vec<CandidateJson>,
}

/// One registered candidate.
#[derive(Debug, Serialize)]
pub(crate) struct CandidateJson {
    pub candidate: String,
    pub priority: i32,
    /// Only follows the leader, never campaigns.
    pub observer: bool,
    pub metadata: Option<String>,
    /// Registered within its ttl: it counts in failovers and handovers.
    pub live: bool,
    /// It holds the lease now.
    pub leader: bool,
    /// When its current run of registrations began.
    pub since: String,
    pub last_seen: String,
    /// Milliseconds between its last registration and the read.
    pub last_seen_ms_ago: u64,
    /// Until when it counts as live without registering again.
    pub live_until: String,
    pub ttl_ms: u64,
    /// How many of its tenures in a row ended by expiry (it crashed or stalled while leading).
    pub expiries: u32,
    /// Until when its priority does not count (it backs off after such tenures); null when it
    /// does not back off.
    pub backing_off_until: Option<String>,
}

impl CandidateJson {
    fn new(c: &Candidate, now: DbTime, leader: Option<&str>) -> CandidateJson {
        CandidateJson {
            candidate: c.candidate.clone(),
            priority: c.priority,
            observer: c.observer,
            metadata: c.metadata.clone(),
            live: c.is_live(now),
            leader: leader == Some(c.candidate.as_str()),
            since: time(c.since),
            last_seen: time(c.seen_at),
            last_seen_ms_ago: now.ms_since(c.seen_at),
            live_until: time(c.expires_at),
            ttl_ms: u64::try_from(c.ttl.as_millis()).unwrap_or(u64::MAX),
            expiries: c.expiries,
            backing_off_until: c.backoff_until.filter(|_| c.backs_off(now)).map(time),
        }
    }
}

impl RosterJson {
    /// The registry of `name` and its lease, read now.
    ///
    /// # Errors
    /// A bad name, a timeout, database errors.
    pub(crate) async fn read(store: &Store, name: &str) -> tenure::Result<RosterJson> {
        let roster = Candidates::new(store.clone()).list(name).await?;
        let leader = roster
            .lease
            .as_ref()
            .and_then(|l| l.live_holder(roster.now))
            .map(str::to_string);
        Ok(RosterJson::new(name, &roster, leader))
    }

    fn new(name: &str, roster: &Roster, leader: Option<String>) -> RosterJson {
        let mut candidates: Vec<&Candidate> = roster.candidates.iter().collect();
        // Best first: campaigners before observers, higher priority, live longest, id.
        candidates.sort_by(|a, b| {
            a.observer
                .cmp(&b.observer)
                .then(b.priority.cmp(&a.priority))
                .then(a.since.cmp(&b.since))
                .then(a.candidate.cmp(&b.candidate))
        });
        RosterJson {
            name: name.to_string(),
            now: time(roster.now),
            candidates: candidates
                .into_iter()
                .map(|c| CandidateJson::new(c, roster.now, leader.as_deref()))
                .collect(),
            leader,
        }
    }

    /// The table rows for people: id, priority, role, live, last seen, metadata.
    pub(crate) fn rows(&self) -> Vec<Vec<String>> {
        self.candidates
            .iter()
            .map(|c| {
                let role = match (c.leader, c.observer) {
                    (true, _) => "leader",
                    (false, true) => "observer",
                    (false, false) if c.backing_off_until.is_some() => "backing off",
                    (false, false) => "candidate",
                };
                vec![
                    c.candidate.clone(),
                    c.priority.to_string(),
                    role.to_string(),
                    if c.live { "yes" } else { "no" }.to_string(),
                    format!(
                        "{} ago",
                        human_duration(Duration::from_millis(c.last_seen_ms_ago))
                    ),
                    c.metadata.clone().unwrap_or_else(|| "-".into()),
                ]
            })
            .collect()
    }
}

/// How many live candidates (campaigning) and observers each name has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub(crate) struct LiveCount {
    pub candidates: usize,
    pub observers: usize,
}

/// The live registrations of every name, counted.
pub(crate) fn live_counts(roster: &Roster) -> BTreeMap<String, LiveCount> {
    let mut counts: BTreeMap<String, LiveCount> = BTreeMap::new();
    for c in roster.candidates.iter().filter(|c| c.is_live(roster.now)) {
        let count = counts.entry(c.name.clone()).or_default();
        if c.observer {
            count.observers += 1;
        } else {
            count.candidates += 1;
        }
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A database instant `ms` milliseconds after the epoch (`DbTime` counts microseconds).
    fn at(ms: i64) -> DbTime {
        DbTime(ms * 1_000)
    }

    fn candidate(id: &str, priority: i32, observer: bool, seen_at: i64) -> Candidate {
        Candidate {
            name: "n".into(),
            candidate: id.into(),
            priority,
            observer,
            metadata: None,
            since: at(0),
            seen_at: at(seen_at),
            expires_at: at(seen_at + 1_000),
            ttl: Duration::from_secs(1),
            campaigns_within: Duration::from_millis(300),
            settle: Duration::from_millis(100),
            incarnation: Some("run".into()),
            expiries: 0,
            backoff_until: None,
            chosen_after: None,
        }
    }

    #[test]
    fn best_first_with_the_leader_marked_and_the_dead_counted_out() {
        let roster = Roster {
            now: at(1_500),
            candidates: vec![
                candidate("low", 1, false, 1_400),
                candidate("watcher", 9, true, 1_400),
                candidate("high", 3, false, 1_400),
                candidate("dead", 5, false, 100),
            ],
            lease: None,
        };
        let json = RosterJson::new("n", &roster, Some("low".into()));
        let ids: Vec<&str> = json
            .candidates
            .iter()
            .map(|c| c.candidate.as_str())
            .collect();
        assert_eq!(ids, ["dead", "high", "low", "watcher"]);
        let low = &json.candidates[2];
        assert!(low.leader && low.live && !low.observer);
        assert_eq!(low.last_seen_ms_ago, 100);
        assert!(!json.candidates[0].live);
        assert_eq!(json.rows()[2][2], "leader");
        assert_eq!(json.rows()[3][2], "observer");
        assert_eq!(
            live_counts(&roster)["n"],
            LiveCount {
                candidates: 2,
                observers: 1
            }
        );
    }
}
