//! `tenure lock NAME [-n N] -- CMD`: run CMD under a cluster lock (or one of N permits), with
//! the same supervision as `tenure run`.

use super::{check_global, check_lease, check_name, fence_env};
use crate::cli::{Global, LockArgs};
use crate::database;
use crate::exit::{Failure, Outcome, LOST, NOT_ACQUIRED};
use crate::lead::{
    abandon, grace_for, linger_after_release, run_while_held, unreleased, Ended, Job, Signals,
};
use tenure::{LockGuard, LockOptions, Locks};
use tokio::time::Instant;

pub(super) async fn lock(global: &Global, args: LockArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    let timing = check_lease(&args.lease)?;
    let grace = grace_for(&timing, &args.supervise)?;
    let health = args.health.check()?;
    if args.permits > 1 {
        tenure::validate::semaphore(&args.name, args.permits)?;
    }
    let mut signals = Signals::new()?;
    crate::watching::listen(&args.watching).await?;
    let store = database::open(global, !global.no_create, Some(timing.db_timeout())).await?;
    tenure::spread::check_no_group(&store, &args.name).await?;
    let fence = fence_env(&store);
    let locks = match &args.lease.candidate {
        Some(id) => Locks::with_holder(store, id)?,
        None => Locks::new(store),
    };
    let options = LockOptions::default()
        .ttl(args.lease.ttl)
        .at_least(args.at_least)
        .record_every_cycle(args.record_every_cycle);

    let mut job = Job {
        name: &args.name,
        command: &args.command.command,
        grace,
        env: fence,
        release_on_exit: true,
        isolation: args.supervise.isolation,
        health: health.as_ref(),
    };
    // Set up while this holder waits (dropped, with its keeper, if it never takes the lock).
    let prepared = job.prepare();
    let acquired = tokio::select! {
        guard = acquire(&locks, &args, options) => guard.map(|g| g.ok_or(NOT_ACQUIRED)),
        signal = signals.recv() => Ok(Err(128 + signal as u8)),
    };
    // Not held: tenure exits once the keeper has gone too.
    let guard = match acquired {
        Ok(Ok(guard)) => guard,
        Ok(Err(code)) => {
            abandon(prepared).await;
            if code == NOT_ACQUIRED {
                tracing::info!(name = %args.name, "lock not acquired; giving up");
            }
            return Ok(code);
        }
        Err(failure) => {
            abandon(prepared).await;
            return Err(failure);
        }
    };
    job.env.insert(0, ("TENURE_LOCK", guard.name().to_string()));
    Ok(
        match run_while_held(guard, &job, prepared, &mut signals).await? {
            Ended::Exited(code) => {
                // Released at once; this process's own teardown waits for the next holder's
                // start (a signal only ends the wait: the command's status is the answer).
                let _ = linger_after_release(&mut signals).await;
                code
            }
            Ended::Interrupted(code) => code,
            Ended::Lost | Ended::Unhealthy => LOST,
            Ended::Unreleased(code, error) => return Err(unreleased(&args.name, code, error)),
        },
    )
}

async fn acquire(
    locks: &Locks,
    args: &LockArgs,
    options: LockOptions,
) -> Result<Option<LockGuard>, Failure> {
    let semaphore = (args.permits > 1)
        .then(|| locks.semaphore(&args.name, args.permits))
        .transpose()?;
    if args.wait.no_wait {
        return Ok(match &semaphore {
            Some(s) => s.try_acquire(options).await?,
            None => locks.try_lock(&args.name, options).await?,
        });
    }
    // No --timeout: wait without a bound.
    let give_up = args
        .wait
        .timeout
        .and_then(|t| Instant::now().checked_add(t));
    if args.wait.timeout.is_none() {
        tracing::info!(name = %args.name, holder = %locks.holder(), "waiting for the lock");
    }
    Ok(match &semaphore {
        Some(s) => s.acquire_until(options, give_up).await?,
        None => locks.lock_until(&args.name, options, give_up).await?,
    })
}
