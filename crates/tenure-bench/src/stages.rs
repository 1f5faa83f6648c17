//! Where a graceful handover's milliseconds go: the stage stamps `tenure run` writes when
//! `TENURE_STAGE_STAMPS` names a file (see the CLI's `stages`), read per trial between the old
//! child's stop stamp and the new child's start stamp, and their medians per stage.
//!
//! A stage's figure is the time from the previous stage's stamp to its own: the old leader's
//! (`exited`, `release_sent`, `released`) then the new leader's (`woken`, `campaign_sent`,
//! `acquired`, `spawning`, `started`), then the child's start. Two processes' clocks are one
//! (CLOCK_MONOTONIC), but their events race: a follower's wake can be stamped before the old
//! leader stamps its commit's answer, so a stage can be negative.

use crate::procs::Stamp;
use crate::report::percentile;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

/// The stages, each with the stamp that ends it and whose process writes it.
pub(crate) const STAGES: [(&str, &str, Who); 9] = [
    ("exit noticed", "exited", Who::Old),
    ("release sent", "release_sent", Who::Old),
    ("release committed", "released", Who::Old),
    ("follower woken", "woken", Who::New),
    ("campaign sent", "campaign_sent", Who::New),
    ("campaign committed", "acquired", Who::New),
    ("supervision begins", "spawning", Who::New),
    ("command started (keeper's report)", "started", Who::New),
    ("child's own start stamp", "", Who::New),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Who {
    Old,
    New,
}

/// One trial: milliseconds per stage (`None`: its stamp was not found).
pub(crate) type Breakdown = Vec<Option<f64>>;

/// The stamp of each stage of one handover: the old leader's `tenure run` is `old`, the new
/// one's `new`; the child stopped at `stop` and the next one started at `start` (ns).
pub(crate) fn breakdown(stamps: &[Stamp], old: i32, new: i32, stop: i64, start: i64) -> Breakdown {
    let mut at = Vec::new();
    let mut after = stop;
    for (_, event, who) in STAGES {
        if event.is_empty() {
            at.push(Some(start));
            continue;
        }
        let pid = if who == Who::Old { old } else { new };
        let mine = |s: &&Stamp| s.event == event && s.pid == pid && s.mono_ns >= stop;
        // A follower campaigns on its ticks too: its campaign is the last one sent before the
        // grant; every other stage is its first stamp after the previous stage's.
        let found = if event == "campaign_sent" {
            let granted = stamps
                .iter()
                .find(|s| s.event == "acquired" && s.pid == new && s.mono_ns >= stop)
                .map_or(start, |s| s.mono_ns);
            stamps
                .iter()
                .filter(mine)
                .filter(|s| s.mono_ns <= granted)
                .map(|s| s.mono_ns)
                .max()
        } else if event == "woken" {
            stamps.iter().filter(mine).map(|s| s.mono_ns).min()
        } else {
            stamps
                .iter()
                .filter(mine)
                .filter(|s| s.mono_ns >= after || who == Who::New)
                .map(|s| s.mono_ns)
                .min()
        };
        if let Some(t) = found {
            after = t;
        }
        at.push(found);
    }
    let mut previous = Some(stop);
    at.into_iter()
        .map(|t| {
            let d = match (previous, t) {
                (Some(a), Some(b)) => Some((b - a) as f64 / 1e6),
                _ => None,
            };
            if t.is_some() {
                previous = t;
            }
            d
        })
        .collect()
}

/// Reads the stage file until the new leader's `started` stamp is in it (or 2 s passed).
pub(crate) async fn read(path: &Path, new: i32) -> Vec<Stamp> {
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        let stamps: Vec<Stamp> = std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(Stamp::parse)
            .collect();
        let done = stamps.iter().any(|s| s.event == "started" && s.pid == new);
        if done || Instant::now() >= until {
            return stamps;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The median of each stage over `trials`.
pub(crate) fn medians(trials: &[Breakdown]) -> Vec<Option<f64>> {
    (0..STAGES.len())
        .map(|i| {
            let samples: Vec<f64> = trials.iter().filter_map(|t| t[i]).collect();
            percentile(&samples, 50.0)
        })
        .collect()
}

/// One line: `stage median · …` in ms.
pub(crate) fn describe(trials: &[Breakdown]) -> String {
    STAGES
        .iter()
        .zip(medians(trials))
        .map(|((label, _, _), m)| match m {
            Some(v) => format!("{label} {v:.2}"),
            None => format!("{label} —"),
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(event: &str, ms: i64, pid: i32) -> Stamp {
        Stamp {
            event: event.into(),
            mono_ns: ms * 1_000_000,
            pid,
            supervisor: 1,
            token: "x".into(),
        }
    }

    #[test]
    fn a_handover_splits_into_its_stages() {
        let stamps = vec![
            s("campaign_sent", 5, 2), // a tick before the handover: not this one
            s("exited", 11, 1),
            s("release_sent", 12, 1),
            s("woken", 14, 2),
            s("released", 15, 1),
            s("campaign_sent", 16, 2),
            s("campaign_sent", 17, 3), // another follower
            s("acquired", 19, 2),
            s("spawning", 20, 2),
            s("started", 24, 2),
            s("campaign_sent", 40, 2), // its first renewal
        ];
        let b = breakdown(&stamps, 1, 2, 10_000_000, 25_000_000);
        let want = [1.0, 1.0, 3.0, -1.0, 2.0, 3.0, 1.0, 4.0, 1.0];
        assert_eq!(b.len(), want.len());
        for (got, want) in b.iter().zip(want) {
            assert!((got.unwrap() - want).abs() < 1e-9, "{b:?}");
        }
        // The stages add up to the handover.
        let total: f64 = b.iter().flatten().sum();
        assert!((total - 15.0).abs() < 1e-9);
    }

    #[test]
    fn a_missing_stamp_leaves_its_stage_unknown() {
        let stamps = vec![s("exited", 11, 1), s("acquired", 19, 2)];
        let b = breakdown(&stamps, 1, 2, 10_000_000, 25_000_000);
        assert_eq!(b[0], Some(1.0));
        assert_eq!(b[1], None);
        assert_eq!(b[5], Some(8.0));
        assert_eq!(medians(&[b.clone(), b])[5], Some(8.0));
    }
}
