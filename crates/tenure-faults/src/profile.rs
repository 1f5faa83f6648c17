//! Profiles: which scenarios run, how long, on which backends.

use crate::runner::{self, Outcome, Settings};
use crate::scenario::{self, Scenario};
use crate::target::Target;
use std::time::Duration;

/// How long each scenario injects faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// One or two rounds of each fault (CI: a few minutes for all of it).
    Short,
    /// A minute of rounds per scenario.
    Long,
    /// tenure on a highly available database: a private Patroni or Galera cluster per scenario,
    /// its primary killed, switched over, partitioned, failed over with lost commits
    /// (`crate::ha`).
    Ha,
}

impl Profile {
    pub fn duration(self) -> Duration {
        match self {
            Profile::Short | Profile::Ha => Duration::from_secs(6),
            Profile::Long => Duration::from_secs(60),
        }
    }
}

/// Runs every scenario that applies to each target (filtered by name if `only` is not empty),
/// one at a time, reporting each outcome to `progress` as it finishes.
pub async fn run_all(
    targets: &[Target],
    settings: &Settings,
    seed: u64,
    only: &[String],
    mut progress: impl FnMut(&Outcome),
) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    let chosen: Vec<&Scenario> = scenario::ALL
        .iter()
        .filter(|s| only.is_empty() || only.iter().any(|o| o == s.name))
        .collect();
    for scenario in chosen {
        for target in targets.iter().filter(|t| scenario.applies_to(t)) {
            let label = if target.pooled { "pgbouncer" } else { "" };
            let seed =
                runner::scenario_seed(seed, &format!("{}{label}", scenario.name), target.kind);
            let outcome = runner::run(scenario, target, settings, seed).await;
            progress(&outcome);
            outcomes.push(outcome);
        }
    }
    outcomes
}
