//! What the priority tests read besides the children's log: the registry, through the
//! library (polled every few milliseconds, so that a test acts between a candidate's campaign
//! and the leader's next renewal), and how long a candidate's children ran.

use crate::support::leaders::{Backend, Interval};
use crate::support::runtime;
use std::time::{Duration, Instant};
use tenure::candidates::{Candidate, Candidates};
use tenure::{Store, StoreOptions};

/// The registry of a [`Backend`]'s database, read by the test itself.
pub(crate) struct Registry {
    rt: tokio::runtime::Runtime,
    candidates: Candidates,
}

impl Registry {
    pub(crate) fn of(b: &Backend) -> Registry {
        let rt = runtime();
        let options = StoreOptions::default()
            .table_prefix(b.prefix.clone())
            .timeout(Duration::from_secs(10));
        let store = rt
            .block_on(Store::connect_with(&b.url, options))
            .expect("connect the test's store");
        Registry {
            rt,
            candidates: Candidates::new(store),
        }
    }

    pub(crate) fn seen(&self, name: &str, id: &str) -> Option<Candidate> {
        let roster = self.rt.block_on(self.candidates.list(name)).expect("list");
        roster.candidates.into_iter().find(|c| c.candidate == id)
    }

    /// Waits (bounded) until `id` is registered and has been seen campaigning for `settled`
    /// since (zero: its first campaign): from then on its priority counts for a candidate
    /// whose settle time is at most `settled`.
    pub(crate) fn until_seen(&self, name: &str, id: &str, settled: Duration) -> Candidate {
        let start = Instant::now();
        let settled_us = i64::try_from(settled.as_micros()).unwrap();
        loop {
            if let Some(c) = self.seen(name, id) {
                if c.seen_at.0 - c.since.0 >= settled_us {
                    return c;
                }
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "{id} was not seen campaigning for {settled:?}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// How long children labelled `label` ran within [`from`, `to`] (CLOCK_MONOTONIC ns).
pub(crate) fn ran(all: &[Interval], label: &str, from: i64, to: i64) -> i64 {
    all.iter()
        .filter(|i| i.label == label)
        .map(|i| (i.stop.unwrap_or(to).min(to) - i.start.max(from)).max(0))
        .sum()
}

/// The gaps between `label`'s children: (stop of one, start of the next), in order.
pub(crate) fn gaps(all: &[Interval], label: &str) -> Vec<(i64, i64)> {
    let mut mine: Vec<&Interval> = all.iter().filter(|i| i.label == label).collect();
    mine.sort_by_key(|i| i.start);
    mine.windows(2)
        .filter_map(|w| Some((w[0].stop?, w[1].start)))
        .collect()
}
