//! `tenure every DUR NAME -- CMD` / `tenure every --cron EXPR NAME -- CMD`: run CMD on each
//! tick on exactly one node of all that run the same line (see `tenure::schedule`).

use super::{check_global, check_name};
use crate::cli::{EveryArgs, Global};
use crate::database;
use crate::exit::{Failure, Outcome, OK};
use crate::lead::{check_timing, run_while_held, Ended, Job, Signals};
use std::time::Duration;
use tenure::{Cadence, Elector, Schedule, Timing};

pub async fn every(global: &Global, args: EveryArgs) -> Outcome {
    check_global(global)?;
    let (cadence, name) = match (&args.cron, args.schedule.as_slice()) {
        (Some(expr), [name]) => (Cadence::cron(expr)?, name.clone()),
        (None, [interval, name]) => {
            let d = humantime::parse_duration(interval).map_err(|e| {
                Failure::usage(format!(
                    "invalid interval {interval:?}: {e}; expected a duration such as 500ms, 10s or 2m"
                ))
            })?;
            if d < Duration::from_millis(1) {
                return Err(Failure::usage(format!(
                    "invalid interval {interval:?}: must be at least 1ms"
                )));
            }
            (Cadence::Every(d), name.clone())
        }
        (Some(_), _) => {
            return Err(Failure::usage(
                "with --cron give only NAME: tenure every --cron EXPR NAME -- CMD",
            ))
        }
        (None, _) => {
            return Err(Failure::usage(
                "give DUR and NAME: tenure every DUR NAME -- CMD (or --cron EXPR NAME)",
            ))
        }
    };
    check_name(&name)?;
    if let Some(id) = &args.candidate {
        tenure::validate::candidate(id)?;
    }
    let timing = Timing::from_ttl(args.ttl)?;
    let grace = args.grace.unwrap_or(args.ttl / 10);
    check_timing(&timing, grace)?;
    let mut signals = Signals::new()?;

    let store = database::open(global, !global.no_create, Some(timing.db_timeout())).await?;
    let schedule = Schedule::new(store.clone(), &name, cadence)?.catch_up(args.catch_up);
    let mut builder = Elector::builder(store, &name).timing(timing);
    if let Some(id) = &args.candidate {
        builder = builder.candidate(id);
    }
    let elector = builder.spawn()?;
    tracing::info!(name = %name, candidate = %elector.candidate(), "campaigning to run the schedule");

    let code = loop {
        let guard = tokio::select! {
            guard = elector.leader() => match guard {
                Ok(guard) => guard,
                Err(e) => break Err(e.into()),
            },
            signal = signals.recv() => break Ok(128 + signal as u8),
        };
        tracing::info!(name = %name, term = guard.term(), "leading: running the schedule");
        let mut stop = None;
        while !guard.is_lost() && stop.is_none() {
            let (tick, now) = match schedule.next_tick().await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(name = %name, error = %e, "cannot read the schedule; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            let wait = Duration::from_micros(tick.at().0.saturating_sub(now.0).max(0) as u64);
            if !wait.is_zero() {
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = guard.lost() => {}
                    signal = signals.recv() => stop = Some(128 + signal as u8),
                }
                continue;
            }
            let job = Job {
                name: &name,
                command: &args.command,
                grace,
                env: vec![
                    (
                        "TENURE_TICK",
                        tick.at()
                            .to_utc()
                            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                    ),
                    ("TENURE_TICK_MS", tick.at_ms.to_string()),
                ],
                release_on_exit: false,
                isolation: args.isolation,
                health: None,
            };
            match run_while_held(guard.clone(), &job, &mut signals).await? {
                Ended::Exited(code) => {
                    if code != 0 {
                        tracing::warn!(name = %name, tick = tick.at_ms, code, "the command failed; the tick counts as run");
                    }
                    match schedule.complete(tick, &guard).await {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::warn!(name = %name, tick = tick.at_ms, "tick was already recorded")
                        }
                        Err(e) => {
                            tracing::warn!(name = %name, tick = tick.at_ms, error = %e, "cannot record the tick; it may run again")
                        }
                    }
                }
                Ended::Lost | Ended::Unhealthy => {}
                Ended::Interrupted(code) => stop = Some(code),
            }
        }
        drop(guard);
        if let Some(code) = stop {
            break Ok(code);
        }
        tracing::warn!(name = %name, "leadership lost: campaigning again");
    };
    elector.shutdown().await;
    code.map(|c: u8| if c == 0 { OK } else { c })
}
