//! Footprint of `tenure run`: the supervisor's RSS while it leads, and the time from its start
//! to its child's start (on a vacant name), and the backend's [`rows`] of them.

use crate::db::{Engine, Target};
use crate::plan::Plan;
use crate::procs::{mono_ns, rss_kb, Proc, Stamps};
use crate::report::{at_most, millis_summary, ms, Row, Summary};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::process::Command;
use tokio::time::Instant;

/// Where `tenure run` keeps its leases.
pub(crate) enum Database {
    /// `--database-url URL --table-prefix P`.
    Url { url: String, prefix: String },
    /// No `--database-url`: the SQLite default under `$XDG_STATE_HOME` (a temporary dir).
    SqliteDefault { state_home: PathBuf },
}

pub(crate) struct Footprint {
    /// Seconds from spawning `tenure run` to the child's start stamp.
    pub startup: Summary,
    /// The largest VmRSS seen (kB), one second into the tenure.
    pub rss_kb: Option<u64>,
}

pub(crate) async fn measure(
    tenure: &Path,
    bench: &Path,
    db: &Database,
    dir: &Path,
    trials: usize,
    label: &str,
) -> Result<Footprint, String> {
    let tag = format!("footprint-{label}");
    let mut stamps = Stamps::new(dir.join(format!("{tag}.stamps")));
    let log = dir.join(format!("{tag}.log"));
    let mut startups = Vec::new();
    let mut failed = 0;
    let mut rss_max: Option<u64> = None;
    for trial in 1..=trials {
        let mut c = Command::new(tenure);
        match db {
            Database::Url { url, prefix } => {
                c.arg("--database-url")
                    .arg(url)
                    .arg("--table-prefix")
                    .arg(prefix);
            }
            Database::SqliteDefault { state_home } => {
                c.env_remove("TENURE_DATABASE_URL")
                    .env("XDG_STATE_HOME", state_home);
            }
        }
        c.arg("run")
            .arg(format!("footprint-{trial}"))
            .arg("--ttl")
            .arg("2s")
            .arg("--")
            .arg(bench)
            .arg("child")
            .arg("--stamps")
            .arg(stamps.path());
        let from = mono_ns();
        let proc = Proc::spawn(c, &log).map_err(|e| e.to_string())?;
        let started = stamps
            .wait_for(Instant::now() + Duration::from_secs(15), |s| {
                s.is_start() && s.mono_ns > from
            })
            .await;
        let Some(started) = started else {
            eprintln!("  footprint {label} trial {trial}: the child did not start within 15 s");
            failed += 1;
            proc.finish(Duration::ZERO).await;
            continue;
        };
        let secs = (started.mono_ns - from) as f64 / 1e9;
        startups.push(secs);
        // A second into the tenure: a few renewals done.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss = rss_kb(u32::try_from(proc.pid).unwrap_or(0)).map(|(rss, _)| rss);
        eprintln!(
            "  footprint {label} trial {trial}/{trials}: child started after {:.1} ms, supervisor RSS {} kB",
            secs * 1e3,
            rss.map_or("?".into(), |r| r.to_string())
        );
        rss_max = rss_max.max(rss);
        proc.signal(Signal::SIGTERM);
        proc.finish(Duration::from_secs(5)).await;
    }
    Ok(Footprint {
        startup: Summary::of(&startups, failed),
        rss_kb: rss_max,
    })
}

/// The footprint rows of one backend: the supervisor's RSS and its start-up time.
pub(crate) async fn rows(plan: &Plan, target: &Target) -> Result<Vec<Row>, String> {
    let (db, label) = match target.engine {
        Engine::Sqlite => (
            Database::SqliteDefault {
                state_home: plan.dir.join("state"),
            },
            "the SQLite default",
        ),
        _ => (
            Database::Url {
                url: target.url.clone(),
                prefix: target.prefix.clone(),
            },
            "this backend",
        ),
    };
    let f = measure(
        &plan.tenure,
        &plan.bench,
        &db,
        &plan.dir,
        plan.footprint_trials,
        target.engine.key(),
    )
    .await?;
    let rss_mib = f.rss_kb.map(|k| k as f64 / 1024.0);
    Ok(vec![
        Row::new(
            "`tenure run` supervisor RSS while leading",
            rss_mib.map_or("-".into(), |m| format!("{m:.1} MiB")),
        )
        .goal("≤ 15 MiB", at_most(rss_mib, 15.0)),
        Row::new(
            format!("`tenure run` start → child started ({label}) p50 / p99"),
            millis_summary(&ms(&f.startup)),
        ),
    ])
}
