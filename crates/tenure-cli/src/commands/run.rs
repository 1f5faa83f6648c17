//! `tenure run NAME -- CMD`: campaign, run CMD while leading, stop it before anyone else can
//! start.
//!
//! The command is stopped by SIGTERM to its whole process group at `deadline − grace` (if no
//! renewal moved the local deadline) or when leadership ends early, and SIGKILLed at the local
//! deadline at the latest. The database's expiry lies at least `safety_margin` after that
//! deadline, so the group is dead before the lease could be granted to anyone else. On a
//! step-down (demote, pause, handover) the elector releases only after the command is dead.

use super::{check_global, check_name};
use crate::cli::{Global, RunArgs};
use crate::database;
use crate::exit::{Failure, Outcome, INTERNAL, LOST, NOT_ACQUIRED, UNAVAILABLE};
use crate::supervise::{exit_code, Supervised};
use nix::sys::signal::Signal;
use std::time::Duration;
use tenure::{Elector, LeaderGuard, Role, Timing};
use tokio::signal::unix::{signal, Signal as SignalStream, SignalKind};
use tokio::time::{sleep_until, Instant};

/// The signals tenure forwards to the command (and then exits after it).
struct Signals {
    interrupt: SignalStream,
    terminate: SignalStream,
    hangup: SignalStream,
}

impl Signals {
    fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// Refuses a grace period that normal renewals could not keep clear of.
fn check_timing(timing: &Timing, grace: Duration) -> Result<(), Failure> {
    if grace.is_zero() {
        return Err(Failure::usage("--grace must be greater than zero"));
    }
    let needed = timing.renew_interval() + timing.db_timeout() + grace;
    if needed >= timing.belief() {
        return Err(Failure::usage(format!(
            "unsafe timing: renew_interval ({:?}) + db_timeout ({:?}) + grace ({grace:?}) = \
             {needed:?} must be less than ttl ({:?}) - safety_margin ({:?}); lower --grace or \
             raise --ttl",
            timing.renew_interval(),
            timing.db_timeout(),
            timing.ttl(),
            timing.safety_margin()
        )));
    }
    Ok(())
}

enum Waited {
    Leading(LeaderGuard),
    GaveUp,
    Unreachable,
    Interrupted(Signal),
}

enum Ended {
    /// The command exited by itself.
    Exited(u8),
    /// Leadership ended while it ran; it was stopped.
    Lost,
    /// tenure was signalled; the signal was forwarded and the command exited.
    Interrupted(u8),
}

pub async fn run(global: &Global, args: RunArgs) -> Outcome {
    check_global(global)?;
    check_name(&args.name)?;
    if let Some(id) = &args.candidate {
        tenure::validate::candidate(id)?;
    }
    if let Some(m) = &args.metadata {
        tenure::validate::metadata(m)?;
    }
    let timing = Timing::from_ttl(args.ttl)?;
    let grace = args.grace.unwrap_or(args.ttl / 10);
    check_timing(&timing, grace)?;
    let mut signals = Signals::new()?;

    let store = database::open(global, !global.no_create, Some(timing.db_timeout())).await?;
    let mut builder = Elector::builder(store, &args.name).timing(timing);
    if let Some(id) = &args.candidate {
        builder = builder.candidate(id);
    }
    if let Some(m) = &args.metadata {
        builder = builder.metadata(m);
    }
    let elector = builder.spawn()?;
    tracing::info!(name = %args.name, candidate = %elector.candidate(), "campaigning");

    let mut give_up_at = args.timeout.map(|t| Instant::now() + t);
    let mut no_wait = args.no_wait;
    let code = loop {
        let guard =
            match wait_for_leadership(&elector, &timing, no_wait, give_up_at, &mut signals).await {
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
        match lead(&elector, guard, &args, grace, &mut signals).await {
            Ok(Ended::Exited(code)) if !args.keep_campaigning => break code,
            Ok(Ended::Lost) if !args.keep_campaigning => break LOST,
            Ok(Ended::Interrupted(code)) => break code,
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
        guard = elector.leader() => match guard {
            Ok(guard) => Waited::Leading(guard),
            Err(_) => Waited::GaveUp,
        },
        () = give_up => Waited::GaveUp,
        signal = signals.recv() => Waited::Interrupted(signal),
    }
}

/// Runs the command for one tenure.
async fn lead(
    elector: &Elector,
    guard: LeaderGuard,
    args: &RunArgs,
    grace: Duration,
    signals: &mut Signals,
) -> Result<Ended, Failure> {
    let term = guard.term();
    let env = [
        ("TENURE_NAME", args.name.clone()),
        ("TENURE_TERM", term.to_string()),
        ("TENURE_CANDIDATE", guard.candidate().to_string()),
    ];
    let mut child = match Supervised::spawn(&args.command, &env) {
        Ok(child) => child,
        Err(e) => {
            let code = match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                std::io::ErrorKind::PermissionDenied => 126,
                _ => INTERNAL,
            };
            let _ = guard.release().await;
            return Err(Failure::new(
                code,
                format!("cannot start {:?}: {e}", args.command[0]),
            ));
        }
    };
    tracing::info!(name = %args.name, term, pid = child.pid(), "leading; command started");

    let role = elector.role();
    let mut deadline = current_deadline(&role).unwrap_or_else(Instant::now);
    let mut terminating = false;
    let mut interrupted = false;
    loop {
        if let Some(d) = current_deadline(&role) {
            deadline = d;
        }
        let sigterm_at = deadline.checked_sub(grace).unwrap_or(deadline);
        tokio::select! {
            status = child.wait() => {
                let status = status?;
                child.stop_leftovers(grace).await;
                let code = exit_code(status);
                tracing::info!(name = %args.name, term, code, "command exited");
                if interrupted {
                    drop(guard);
                    return Ok(Ended::Interrupted(code));
                }
                if terminating {
                    // It exited because we stopped it: renewals were failing.
                    drop(guard);
                    return Ok(Ended::Lost);
                }
                // Release at once so that a follower takes over (graceful handover).
                if let Err(e) = guard.release().await {
                    tracing::warn!(error = %e, "release failed; the lease will expire");
                }
                return Ok(Ended::Exited(code));
            }
            () = guard.lost() => {
                tracing::warn!(name = %args.name, term, "leadership lost: stopping the command");
                // SIGKILL at the local deadline at the latest: the database's expiry is later.
                let kill_at = deadline.min(Instant::now() + grace);
                let status = child.stop(kill_at).await?;
                tracing::info!(name = %args.name, term, code = exit_code(status), "command stopped");
                drop(guard); // now the elector may release (step-down)
                return Ok(if interrupted { Ended::Interrupted(exit_code(status)) } else { Ended::Lost });
            }
            () = sleep_until(sigterm_at), if !terminating => {
                if current_deadline(&role).is_some_and(|d| d > deadline) {
                    continue; // a renewal moved the deadline
                }
                tracing::warn!(name = %args.name, term, "renewals are failing: stopping the command before the deadline");
                child.signal(Signal::SIGTERM);
                terminating = true;
            }
            signal = signals.recv() => {
                tracing::info!(name = %args.name, %signal, "forwarding signal to the command");
                child.signal(signal);
                interrupted = true;
            }
        }
    }
}

fn current_deadline(role: &tokio::sync::watch::Receiver<Role>) -> Option<Instant> {
    match *role.borrow() {
        Role::Leader { deadline, .. } => Some(deadline),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::exit::USAGE;

    #[test]
    fn grace_must_fit_inside_the_ttl() {
        let timing = Timing::from_ttl(Duration::from_secs(10)).unwrap();
        assert!(check_timing(&timing, Duration::from_secs(1)).is_ok());
        let err = check_timing(&timing, Duration::from_secs(5)).unwrap_err();
        assert_eq!(err.code, USAGE);
        assert!(err.message.contains("grace (5s)"), "{}", err.message);
        assert!(err.message.contains("ttl (10s)"), "{}", err.message);
        assert!(check_timing(&timing, Duration::ZERO).is_err());
    }
}
