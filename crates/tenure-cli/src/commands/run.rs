//! `tenure run NAME -- CMD`: campaign, run CMD while leading (see `lead` for how it is stopped
//! before anyone else can start). With a health check, a step-down pauses this node's
//! campaign (`--keep-campaigning`) until the check passes again.

use super::{check_global, check_lease, check_name, fence_env, stand};
use crate::cli::{Global, RunArgs};
use crate::database;
use crate::exit::{Failure, Outcome, LOST, NOT_ACQUIRED, UNAVAILABLE};
use crate::health::HealthCheck;
use crate::lead::{
    abandon, grace_for, linger_after_release, run_while_held, unreleased, Ended, Job, Signals,
};
use nix::sys::signal::Signal;
use std::time::Duration;
use tenure::{Elector, LeaderGuard, Role, Timing};
use tokio::time::{sleep_until, Instant};

enum Waited {
    Leading(LeaderGuard),
    GaveUp,
    Unreachable,
    Interrupted(Signal),
}

pub(super) async fn run(global: &Global, args: RunArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    let timing = check_lease(&args.lease)?;
    if let Some(m) = &args.metadata {
        tenure::validate::metadata(m)?;
    }
    let grace = grace_for(&timing, &args.supervise)?;
    let health = args.health.check()?;
    let mut signals = Signals::new()?;
    crate::watching::listen(&args.watching).await?;

    let store = database::open(global, !global.no_create, Some(timing.db_timeout())).await?;
    tenure::spread::check_no_group(&store, &args.name).await?;
    let fence = fence_env(&store);
    let mut builder = stand(Elector::builder(store, &args.name), &args.standing).timing(timing);
    if let Some(id) = &args.lease.candidate {
        builder = builder.candidate(id);
    }
    if let Some(m) = &args.metadata {
        builder = builder.metadata(m);
    }
    let elector = builder.spawn()?;
    tracing::info!(name = %args.name, candidate = %elector.candidate(), "campaigning");
    crate::sd_notify::waiting(&args.name);

    let job = Job {
        name: &args.name,
        command: &args.command.command,
        grace,
        env: fence,
        release_on_exit: true,
        isolation: args.supervise.isolation,
        health: health.as_ref(),
    };
    let mut give_up_at = args.wait.timeout.map(|t| Instant::now() + t);
    let mut no_wait = args.wait.no_wait;
    let code = loop {
        // Set up while this candidate waits (dropped, with its keeper, if it never leads).
        let prepared = job.prepare();
        let waited =
            wait_for_leadership(&elector, &timing, no_wait, give_up_at, &mut signals).await;
        let prepared = match waited {
            Waited::Leading(_) => prepared,
            // Not leading: tenure exits once the keeper has gone too.
            _ => {
                abandon(prepared).await;
                None
            }
        };
        let guard = match waited {
            Waited::Leading(guard) => guard,
            Waited::GaveUp => {
                tracing::info!(name = %args.name, "not acquired; giving up");
                break NOT_ACQUIRED;
            }
            Waited::Unreachable => {
                elector.shutdown().await;
                return Err(Failure::new(
                    UNAVAILABLE,
                    "the database did not answer the first campaign",
                ));
            }
            Waited::Interrupted(signal) => break 128 + signal as u8,
        };
        // Only the first wait may give up.
        (no_wait, give_up_at) = (false, None);
        let ended = run_while_held(guard, &job, prepared, &mut signals).await;
        if let Ok(Ended::Exited(code)) = ended {
            // Released at once; this process's own teardown waits for the successor's start.
            if let Some(signal) = linger_after_release(&mut signals).await {
                break if args.keep_campaigning {
                    128 + signal as u8
                } else {
                    code
                };
            }
        }
        match ended {
            Ok(Ended::Exited(code)) if !args.keep_campaigning => break code,
            Ok(Ended::Unreleased(code, error)) if !args.keep_campaigning => {
                elector.shutdown().await;
                return Err(unreleased(&args.name, code, error));
            }
            Ok(Ended::Lost) if !args.keep_campaigning => break LOST,
            Ok(Ended::Interrupted(code)) => break code,
            Ok(Ended::Unhealthy) if !args.keep_campaigning => break LOST,
            Ok(Ended::Unhealthy) => {
                let Some(check) = &health else { break LOST };
                if let Some(code) = recover(&elector, check, &mut signals).await {
                    break code;
                }
                tracing::info!(name = %args.name, "campaigning again");
            }
            Ok(_) => tracing::info!(name = %args.name, "campaigning again"),
            Err(failure) => {
                elector.shutdown().await;
                return Err(failure);
            }
        }
    };
    elector.shutdown().await;
    Ok(code)
}

async fn wait_for_leadership(
    elector: &Elector,
    timing: &Timing,
    no_wait: bool,
    give_up_at: Option<Instant>,
    signals: &mut Signals,
) -> Waited {
    if no_wait {
        // The first campaign's answer decides.
        let mut role = elector.role();
        let answered = tokio::time::timeout(
            timing.db_timeout() + Duration::from_secs(1),
            role.wait_for(|r| !matches!(r, Role::Unknown)),
        )
        .await;
        match answered {
            Ok(Ok(r)) if r.is_leader() => {}
            Ok(_) => return Waited::GaveUp,
            Err(_) => return Waited::Unreachable,
        }
    }
    let give_up = async {
        match give_up_at {
            Some(at) => sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        guard = elector.wait_until_leader() => match guard {
            Ok(guard) => Waited::Leading(guard),
            Err(_) => Waited::GaveUp,
        },
        () = give_up => Waited::GaveUp,
        signal = signals.recv() => Waited::Interrupted(signal),
    }
}

/// After a health step-down: campaigning paused on this node until the check passes again.
/// Returns an exit code if tenure was signalled meanwhile.
async fn recover(elector: &Elector, check: &HealthCheck, signals: &mut Signals) -> Option<u8> {
    // The release just made holds the elector off for longer than this takes, so it does not
    // campaign in between.
    if elector.pause().await.is_err() {
        return Some(LOST);
    }
    let name = elector.name();
    tracing::info!(name = %name, "not campaigning until the health check passes");
    let env = [
        ("TENURE_NAME", name.to_string()),
        ("TENURE_CANDIDATE", elector.candidate().to_string()),
    ];
    tokio::select! {
        () = check.until_healthy(name, &env) => {}
        signal = signals.recv() => return Some(128 + signal as u8),
    }
    elector.resume().await.is_err().then_some(LOST)
}
