//! Running a command while holding a tenure (`tenure run`, `tenure lock`, `tenure every`).
//!
//! The command's whole tree (see `supervise`) gets SIGTERM at `deadline − grace` (if no
//! renewal moved the local deadline) or when the tenure ends early, and SIGKILL at the local
//! deadline at the latest. The database's expiry lies at least `safety_margin` after that
//! deadline, so the tree is dead before the lease could be granted to anyone else. The lease
//! is released (or, on a step-down, the guard dropped) only once the keeper has seen the
//! whole tree gone.
//!
//! With a health check (see `health`), the check runs alongside; after N failures in a row
//! the tree is stopped the same way and the lease released with the reason in the history.

use crate::cli::SuperviseArgs;
use crate::exit::Failure;
use crate::health::HealthCheck;
use crate::supervise::{exit_code, spawn_failure_code, Isolation, Prepared, Supervised};
use nix::sys::signal::Signal;
use std::time::Duration;
use tenure::{Guard, Timing};
use tokio::signal::unix::{signal, Signal as SignalStream, SignalKind};
use tokio::time::{sleep_until, Instant};
use tracing::Instrument;

/// The signals tenure forwards to the command (and then exits after it).
pub(crate) struct Signals {
    interrupt: SignalStream,
    terminate: SignalStream,
    hangup: SignalStream,
}

impl Signals {
    pub(crate) fn new() -> std::io::Result<Signals> {
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }

    pub(crate) async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
        }
    }
}

/// How long `tenure run` and `tenure lock` wait after a graceful release before they leave
/// the candidates, close their database sessions and exit (or, with `--keep-campaigning`,
/// set up their next keeper).
///
/// That teardown is work on the database and on the machine — a transaction, a server process
/// or thread per session ending, a process exiting — at the very moment the successor, woken
/// by the release, campaigns and starts its command. Measured on PostgreSQL (2 cores,
/// `tenure-bench --only handover`): the successor's campaign took 7.6–8.4 ms beside it and
/// 2.2–2.3 ms after it, the whole handover 15.4–16.2 ms against 8.3–8.5 ms. The lease is
/// released before this wait, so it delays no one but this process's own exit.
pub(crate) const LINGER_AFTER_RELEASE: Duration = Duration::from_millis(50);

/// Waits [`LINGER_AFTER_RELEASE`] after a graceful release, or less if a signal comes first:
/// then returns it (the caller stops there).
pub(crate) async fn linger_after_release(signals: &mut Signals) -> Option<Signal> {
    tokio::select! {
        () = tokio::time::sleep(LINGER_AFTER_RELEASE) => None,
        signal = signals.recv() => Some(signal),
    }
}

/// The `--grace` of a supervised command (default: ttl/10), checked against `timing`.
pub(crate) fn grace_for(timing: &Timing, supervise: &SuperviseArgs) -> Result<Duration, Failure> {
    let grace = supervise.grace.unwrap_or(timing.ttl() / 10);
    check_timing(timing, grace)?;
    Ok(grace)
}

/// Refuses a grace period that normal renewals could not keep clear of.
pub(crate) fn check_timing(timing: &Timing, grace: Duration) -> Result<(), Failure> {
    if grace.is_zero() {
        return Err(Failure::usage("--grace must be greater than zero"));
    }
    let needed = timing.renew_interval() + timing.db_timeout() + grace;
    if needed >= timing.max_belief() {
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

pub(crate) enum Ended {
    /// The command exited by itself.
    Exited(u8),
    /// Leadership ended while it ran; it was stopped.
    Lost,
    /// tenure was signalled; the signal was forwarded and the command exited.
    Interrupted(u8),
    /// The health check failed too often: the command was stopped and the lease released
    /// with the reason.
    Unhealthy,
    /// The command exited by itself with this code, but the release failed: the tenure stays
    /// held until its lease expires, and a minimum hold time (`--at-least`) beyond that is not
    /// kept. Not a success: see [`unreleased`].
    Unreleased(u8, tenure::Error),
}

/// The failure of a command whose tenure of `name` could not be released after it exited with
/// `code`: the exit code of the database error (69 when the database failed), one line.
pub(crate) fn unreleased(name: &str, code: u8, error: tenure::Error) -> Failure {
    let exit = Failure::from(error);
    Failure::new(
        exit.code,
        format!(
            "the command exited with {code}, but releasing {name:?} failed ({}); it stays held \
             until its lease expires",
            exit.message
        ),
    )
}

/// What to run and how.
pub(crate) struct Job<'a> {
    /// The name in logs (the command's `TENURE_NAME` is the lease the guard holds: a
    /// semaphore's permit `NAME#i`, not this NAME).
    pub name: &'a str,
    pub command: &'a [String],
    /// Between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// More environment for the command.
    pub env: Vec<(&'static str, String)>,
    /// Release when the command exits by itself (else the caller decides).
    pub release_on_exit: bool,
    /// How the command's tree is tied to the tenure.
    pub isolation: Isolation,
    /// Give the tenure up when this check fails too often.
    pub health: Option<&'a HealthCheck>,
}

impl Job<'_> {
    /// The command's keeper, started ahead of the tenure while its candidate waits (see
    /// [`Prepared`]): the handover's new command then starts with one exec. `None` (logged) if
    /// it cannot be started now; the tenure then starts one as it begins.
    pub(crate) fn prepare(&self) -> Option<Prepared> {
        match Prepared::new(self.command, self.isolation, self.grace) {
            Ok(prepared) => Some(prepared),
            Err(e) => {
                tracing::warn!(name = %self.name, error = %e, "cannot start the command's keeper ahead of the tenure; it starts when the tenure begins");
                None
            }
        }
    }
}

/// Ends a keeper started ahead of a tenure that did not come; returns once it is gone.
pub(crate) async fn abandon(prepared: Option<Prepared>) {
    if let Some(prepared) = prepared {
        let _ = prepared.abandon().await;
    }
}

/// Runs the command for one tenure and returns how it ended, under `prepared` if given (from
/// [`Job::prepare`]), else under a keeper started now. The guard is released when the
/// command exits by itself (if asked), and dropped (so the elector may release on a
/// step-down) once the command is dead.
pub(crate) async fn run_while_held<G: Guard>(
    guard: G,
    job: &Job<'_>,
    prepared: Option<Prepared>,
    signals: &mut Signals,
) -> Result<Ended, Failure> {
    let program = job.command.first().map_or("", String::as_str);
    let span = crate::watching::command_span(job.name, guard.name(), guard.term(), program);
    let ended = run_held(guard, job, prepared, signals)
        .instrument(span.clone())
        .await;
    span.record(
        "outcome",
        match &ended {
            Ok(Ended::Exited(0)) => "exited",
            Ok(Ended::Exited(_)) => "failed",
            Ok(Ended::Lost) => "lost",
            Ok(_) => "signalled",
            Err(_) => "not_started",
        },
    );
    ended
}

/// [`run_while_held`] in its span.
async fn run_held<G: Guard>(
    guard: G,
    job: &Job<'_>,
    prepared: Option<Prepared>,
    signals: &mut Signals,
) -> Result<Ended, Failure> {
    let term = guard.term();
    // The fencing triple of this tenure, as the guard itself fences: the lease held (for a
    // semaphore its permit), the holder and the term.
    let mut env = vec![
        ("TENURE_NAME", guard.name().to_string()),
        ("TENURE_TERM", term.to_string()),
        ("TENURE_CANDIDATE", guard.candidate().to_string()),
    ];
    env.extend(job.env.iter().cloned());
    stage(job.name, "spawning");
    let spawned = match prepared {
        Some(prepared) => prepared.start(&env).await,
        None => Supervised::spawn(job.command, &env, job.isolation, job.grace).await,
    };
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            let code = spawn_failure_code(&e);
            let _ = guard.release().await;
            return Err(Failure::new(
                code,
                format!("cannot start {:?}: {e}", job.command[0]),
            ));
        }
    };
    stage(job.name, "started");
    tracing::info!(
        name = %job.name,
        term,
        pid = child.pid(),
        supervision = child.mode(),
        "command started"
    );
    crate::sd_notify::leading(job.name, term);

    let ended = supervise_until_ended(guard, job, &env, signals, &mut child).await;
    crate::sd_notify::waiting(job.name);
    ended
}

async fn supervise_until_ended<G: Guard>(
    guard: G,
    job: &Job<'_>,
    env: &[(&str, String)],
    signals: &mut Signals,
    child: &mut Supervised,
) -> Result<Ended, Failure> {
    let term = guard.term();
    let grace = job.grace;
    let mut terminating = false;
    let mut interrupted = false;
    // Polled alongside everything else, so that a check never delays a stop; dropped (and a
    // check still running killed) when this returns.
    let unhealthy = async {
        match job.health {
            Some(check) => check.until_unhealthy(job.name, env).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(unhealthy);
    loop {
        let deadline = guard.deadline();
        let sigterm_at = deadline.checked_sub(grace).unwrap_or(deadline);
        tokio::select! {
            status = child.wait() => {
                // The keeper has stopped whatever the command left behind: the tree is gone.
                let code = exit_code(status?);
                stage(job.name, "exited");
                tracing::info!(name = %job.name, term, code, "command exited");
                if interrupted {
                    drop(guard);
                    return Ok(Ended::Interrupted(code));
                }
                if terminating {
                    // It exited because we stopped it: renewals were failing.
                    drop(guard);
                    return Ok(Ended::Lost);
                }
                if job.release_on_exit {
                    // At once, so that a follower takes over (graceful handover).
                    if let Err(e) = guard.release().await {
                        tracing::error!(name = %job.name, term, error = %e, "release failed; the lease stays held until it expires");
                        return Ok(Ended::Unreleased(code, e));
                    }
                }
                return Ok(Ended::Exited(code));
            }
            () = guard.lost() => {
                tracing::warn!(name = %job.name, term, "tenure lost: stopping the command");
                // SIGKILL at the local deadline at the latest: the database's expiry is later.
                let kill_at = deadline.min(Instant::now() + grace);
                let status = child.stop(kill_at).await?;
                tracing::info!(name = %job.name, term, code = exit_code(status), "command stopped");
                drop(guard); // now the lease may be released (step-down)
                return Ok(if interrupted { Ended::Interrupted(exit_code(status)) } else { Ended::Lost });
            }
            reason = &mut unhealthy, if !terminating => {
                tracing::warn!(name = %job.name, term, %reason, "stepping down: stopping the command");
                let kill_at = guard.deadline().min(Instant::now() + grace);
                let status = child.stop(kill_at).await?;
                tracing::info!(name = %job.name, term, code = exit_code(status), "command stopped");
                if let Err(e) = guard.release_because(reason.clone()).await {
                    tracing::warn!(error = %e, "release failed; the lease will expire");
                }
                tracing::info!(name = %job.name, term, "stepped down");
                return Ok(if interrupted { Ended::Interrupted(exit_code(status)) } else { Ended::Unhealthy });
            }
            () = sleep_until(sigterm_at), if !terminating => {
                if guard.deadline() > deadline {
                    continue; // a renewal moved the deadline
                }
                tracing::warn!(name = %job.name, term, "renewals are failing: stopping the command before the deadline");
                child.terminate();
                terminating = true;
            }
            signal = signals.recv() => {
                tracing::info!(name = %job.name, %signal, "forwarding signal to the command");
                child.signal(signal);
                interrupted = true;
            }
        }
    }
}

/// A stage of a handover for the benchmark's stamps (see `stages`).
fn stage(name: &str, stage: &'static str) {
    tracing::debug!(target: crate::stages::TARGET, name, stage);
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

    /// The wait after a graceful release lasts `LINGER_AFTER_RELEASE` with no signal, and
    /// ends with a signal, which it returns (the caller then stops instead of campaigning
    /// again).
    #[tokio::test]
    async fn a_signal_ends_the_wait_after_a_release() {
        let mut signals = Signals::new().expect("signal handlers");
        let start = Instant::now();
        assert_eq!(linger_after_release(&mut signals).await, None);
        assert!(start.elapsed() >= LINGER_AFTER_RELEASE);

        // Handled by the streams above (tokio's handler), so it does not end the test.
        nix::sys::signal::raise(Signal::SIGHUP).expect("raise");
        assert_eq!(
            linger_after_release(&mut signals).await,
            Some(Signal::SIGHUP)
        );
    }
}
