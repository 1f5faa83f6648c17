//! What a run measures: the options after `--quick` (fewer trials, shorter windows, fewer
//! leases) and `--only`, and where its files and binaries are.

use crate::Options;
use std::path::PathBuf;
use std::time::Duration;

/// The cost curve's sizes of leases held by one process (a quick run stops at 10,000).
pub(crate) const CURVE_LEASES: [usize; 3] = [1_000, 10_000, 100_000];

/// What to run, after `--quick` and `--only`.
pub(crate) struct Plan {
    pub opts: Options,
    /// Trials of each failover and handover figure.
    pub trials: usize,
    /// How long each lock-cycle figure runs.
    pub lock_run: Duration,
    /// Locks held by one process in the scale benchmark.
    pub leases: usize,
    /// Renew intervals the scale benchmark watches them for.
    pub scale_intervals: u32,
    /// Candidates on one name in the scale benchmark.
    pub candidates: usize,
    /// How long the candidates' database calls are counted.
    pub crowd_window: Duration,
    /// Trials of the footprint's start-up figure.
    pub footprint_trials: usize,
    /// How long each point of the cost curve's lock cycles runs.
    pub curve_run: Duration,
    /// The cost curve's sizes of leases held by one process: [`CURVE_LEASES`], up to 10,000
    /// in a quick run.
    pub curve_leases: Vec<usize>,
    /// The run's temporary directory.
    pub dir: PathBuf,
    /// The `tenure` binary.
    pub tenure: PathBuf,
    /// This binary (re-run as its helpers).
    pub bench: PathBuf,
}

impl Plan {
    /// The plan of `opts`: a `--quick` run caps trials, windows and sizes.
    pub(crate) fn new(opts: Options, dir: PathBuf, tenure: PathBuf, bench: PathBuf) -> Plan {
        let quick = opts.quick;
        Plan {
            trials: if quick {
                opts.trials.min(3)
            } else {
                opts.trials
            },
            lock_run: Duration::from_secs_f64(if quick { 1.0 } else { opts.lock_seconds }),
            leases: if quick {
                opts.leases.min(1000)
            } else {
                opts.leases
            },
            scale_intervals: if quick { 2 } else { 3 },
            candidates: if quick {
                opts.candidates.min(50)
            } else {
                opts.candidates
            },
            crowd_window: Duration::from_secs(if quick { 2 } else { 5 }),
            footprint_trials: if quick { 2 } else { 5 },
            curve_run: Duration::from_secs_f64(if quick { 1.0 } else { opts.curve_seconds }),
            curve_leases: CURVE_LEASES
                .iter()
                .copied()
                .filter(|&n| !quick || n <= 10_000)
                .collect(),
            dir,
            tenure,
            bench,
            opts,
        }
    }

    /// Whether `--only` names the benchmark `what`.
    pub(crate) fn wants(&self, what: &str) -> bool {
        self.opts.only.iter().any(|o| o == what)
    }
}
