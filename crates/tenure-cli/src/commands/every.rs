//! `tenure every DUR NAME -- CMD` / `tenure every --cron EXPR NAME -- CMD`: run CMD on each
//! tick on exactly one node of all that run the same line (see `tenure::Schedule`). DUR and
//! EXPR are one positional, SCHEDULE, which `--cron` says how to read.

use super::{check_global, check_lease, check_name, fence_env, stand};
use crate::cli::{EveryArgs, Global};
use crate::database;
use crate::exit::{Failure, Outcome, OK};
use crate::lead::{grace_for, run_while_held, unreleased, Ended, Job, Signals};
use std::cell::Cell;
use std::time::Duration;
use tenure::{Cadence, Elector, LeaderGuard, Schedule, Tick};
use tokio::sync::{Mutex, Notify};

pub(super) async fn every(global: &Global, args: EveryArgs) -> Outcome {
    check_global(global)?;
    let cadence = if args.cron {
        Cadence::cron(&args.schedule)?
    } else {
        Cadence::Every(interval(&args.schedule)?)
    };
    let name = args.name;
    check_name(&name)?;
    let timing = check_lease(&args.lease)?;
    let grace = grace_for(&timing, &args.supervise)?;
    // Two listeners for the same signals: one forwards them to a running command, the other
    // stops the schedule between ticks (tokio tells every listener).
    let signals = Mutex::new(Signals::new()?);
    let mut stop_signals = Signals::new()?;
    crate::watching::listen(&args.watching).await?;

    let store = database::open(global, !global.no_create, Some(timing.db_timeout())).await?;
    tenure::spread::check_no_group(&store, &name).await?;
    let fence = fence_env(&store);
    let schedule = Schedule::new(store.clone(), &name, cadence)?.catch_up(args.catch_up);
    let mut builder = stand(Elector::builder(store, &name), &args.standing).timing(timing);
    if let Some(id) = &args.lease.candidate {
        builder = builder.candidate(id);
    }
    let elector = builder.spawn()?;
    tracing::info!(name = %name, candidate = %elector.candidate(), "campaigning to run the schedule");

    // How `every` ends when a tick ends it: the command's code after a forwarded signal, or a
    // failure to run it.
    let ended: Cell<Option<Outcome>> = Cell::new(None);
    let stopped = Notify::new();
    let shutdown = async {
        tokio::select! {
            signal = stop_signals.recv() => {
                let first = ended.take().unwrap_or(Ok(128 + signal as u8));
                ended.set(Some(first));
            }
            () = stopped.notified() => {}
        }
    };
    let (name, command, signals, ended, stopped, fence) = (
        &name,
        &args.command.command,
        &signals,
        &ended,
        &stopped,
        &fence,
    );
    let task = move |tick: Tick, guard: LeaderGuard| async move {
        let job = Job {
            name,
            command,
            grace,
            env: vec![
                (
                    "TENURE_TICK",
                    tick.at()
                        .to_utc()
                        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
                ),
                ("TENURE_TICK_MS", tick.at_ms.to_string()),
            ]
            .into_iter()
            .chain(fence.iter().cloned())
            .collect(),
            release_on_exit: false,
            isolation: args.supervise.isolation,
            health: None,
        };
        // Never contended: ticks run one at a time.
        let mut signals = signals.lock().await;
        let stop = match run_while_held(guard, &job, None, &mut signals).await {
            Ok(Ended::Exited(code)) => {
                if code != 0 {
                    tracing::warn!(name = %name, tick = tick.at_ms, code, "the command failed; the tick counts as run");
                }
                return true;
            }
            Ok(Ended::Lost | Ended::Unhealthy) => return false,
            // Ticks keep their tenure: the command never releases it.
            Ok(Ended::Unreleased(code, error)) => Err(unreleased(name, code, error)),
            Ok(Ended::Interrupted(code)) => Ok(code),
            Err(failure) => Err(failure),
        };
        ended.set(Some(stop));
        stopped.notify_one();
        false
    };
    let run = schedule.run_until(&elector, shutdown, task).await;
    elector.shutdown().await;
    run?;
    let code = ended.take().unwrap_or(Ok(OK))?;
    Ok(if code == 0 { OK } else { code })
}

/// SCHEDULE read as an interval (without --cron).
fn interval(text: &str) -> Result<Duration, Failure> {
    let d = humantime::parse_duration(text).map_err(|e| {
        Failure::usage(format!(
            "invalid interval {text:?}: {e}; expected a duration such as 500ms, 10s or 2m \
             (or a cron expression with --cron)"
        ))
    })?;
    if d < Duration::from_millis(1) {
        return Err(Failure::usage(format!(
            "invalid interval {text:?}: must be at least 1ms"
        )));
    }
    Ok(d)
}
