//! Health checks (`--health-cmd`): leadership follows the health of this node.
//!
//! While a tenure is held, the check runs every interval, one at a time; after N failures in a
//! row the tenure is given up (see `lead`). A check that outlives its timeout counts as a
//! failure and its whole process group is killed; so is a check still running when the tenure
//! ends for another reason, so that a check never delays a stop. After a step-down,
//! `tenure run --keep-campaigning` runs the check while following and campaigns again only
//! once it passes.

use crate::cli::HealthArgs;
use crate::exit::Failure;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;
use tokio::time::{sleep_until, timeout, Instant};

/// A validated health check.
#[derive(Clone, Debug)]
pub(crate) struct HealthCheck {
    command: String,
    interval: Duration,
    timeout: Duration,
    failures: u32,
}

impl HealthArgs {
    /// The check the flags ask for, if any.
    ///
    /// # Errors
    /// A usage failure naming the bad value.
    pub(crate) fn check(&self) -> Result<Option<HealthCheck>, Failure> {
        let Some(command) = &self.health_cmd else {
            return Ok(None);
        };
        if command.trim().is_empty() {
            return Err(Failure::usage(format!(
                "invalid --health-cmd {command:?}: give a shell command, e.g. 'curl -fsS localhost:8080/health'"
            )));
        }
        let (interval, limit) = (self.health_interval, self.health_timeout);
        if interval.is_zero() {
            return Err(Failure::usage(
                "invalid --health-interval 0s: it must be greater than zero",
            ));
        }
        if limit.is_zero() {
            return Err(Failure::usage(
                "invalid --health-timeout 0s: it must be greater than zero",
            ));
        }
        if limit > interval {
            return Err(Failure::usage(format!(
                "invalid --health-timeout {}: it must not exceed --health-interval ({}), as checks \
                 run one at a time",
                humantime::format_duration(limit),
                humantime::format_duration(interval)
            )));
        }
        if self.health_failures == 0 {
            return Err(Failure::usage(
                "invalid --health-failures 0: it must be at least 1",
            ));
        }
        Ok(Some(HealthCheck {
            command: command.clone(),
            interval,
            timeout: limit,
            failures: self.health_failures,
        }))
    }
}

impl HealthCheck {
    /// Runs the check every interval until it has failed N times in a row; returns why, for
    /// the log and the history ("health check failed 3 times: exit status 1").
    ///
    /// # Cancel safety
    /// Cancel safe: a check still running is killed (its whole process group).
    pub(crate) async fn until_unhealthy(&self, name: &str, env: &[(&str, String)]) -> String {
        let mut due = Instant::now() + self.interval;
        let mut failed = 0;
        loop {
            match self.next(&mut due, env).await {
                Ok(()) if failed > 0 => {
                    tracing::info!(name = %name, "health check passes again");
                    failed = 0;
                }
                Ok(()) => {}
                Err(why) => {
                    failed += 1;
                    tracing::warn!(
                        name = %name,
                        failures = failed,
                        of = self.failures,
                        reason = %why,
                        "health check failed"
                    );
                    if failed >= self.failures {
                        return format!("health check failed {failed} times: {why}");
                    }
                }
            }
        }
    }

    /// Runs the check every interval until it passes.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`until_unhealthy`](Self::until_unhealthy).
    pub(crate) async fn until_healthy(&self, name: &str, env: &[(&str, String)]) {
        let mut due = Instant::now() + self.interval;
        let mut failed = 0u64;
        while let Err(why) = self.next(&mut due, env).await {
            failed += 1;
            tracing::warn!(name = %name, failures = failed, reason = %why, "health check failed; not campaigning");
        }
        tracing::info!(name = %name, "health check passes again");
    }

    /// Waits until the check is `due`, runs it, and sets when the next one is due (one
    /// interval after this one started).
    async fn next(&self, due: &mut Instant, env: &[(&str, String)]) -> Result<(), String> {
        sleep_until(*due).await;
        *due = Instant::now() + self.interval;
        self.probe(env).await
    }

    /// Runs the check once: `Ok` if it exited 0 within the timeout, else why not.
    async fn probe(&self, env: &[(&str, String)]) -> Result<(), String> {
        let mut command = tokio::process::Command::new("sh");
        command
            .arg("-c")
            .arg(&self.command)
            .envs(env.iter().map(|(k, v)| (*k, v)))
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        // SAFETY: between fork and exec only prctl, which is async-signal-safe. The runtime has
        // one thread, which lives as long as tenure: the check dies with tenure.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)
            });
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start sh: {e}"))?;
        let mut running = Running { child, done: false };
        match timeout(self.timeout, running.child.wait()).await {
            Ok(Ok(status)) => {
                running.done = true;
                if status.success() {
                    Ok(())
                } else {
                    Err(describe(status))
                }
            }
            Ok(Err(e)) => Err(format!("cannot wait for the check: {e}")),
            Err(_) => Err(format!(
                "timed out after {}",
                humantime::format_duration(self.timeout)
            )),
        }
    }
}

/// A check process; unless it was seen to exit, its whole process group is killed when this
/// is dropped (tokio then reaps it). Its pid is still ours until it is reaped, so the group
/// cannot be someone else's.
struct Running {
    child: tokio::process::Child,
    done: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        if let Some(pid) = self.child.id() {
            let _ = killpg(
                Pid::from_raw(i32::try_from(pid).expect("a pid fits in i32")),
                Signal::SIGKILL,
            );
        }
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(s) => format!("killed by {s}"),
            Err(_) => format!("killed by signal {signal}"),
        },
        (None, None) => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::USAGE;

    fn args(cmd: Option<&str>, interval: u64, limit: u64, failures: u32) -> HealthArgs {
        HealthArgs {
            health_cmd: cmd.map(str::to_string),
            health_interval: Duration::from_millis(interval),
            health_timeout: Duration::from_millis(limit),
            health_failures: failures,
        }
    }

    #[test]
    fn bad_values_are_named() {
        for (a, needle) in [
            (args(Some(" "), 5000, 2000, 3), "--health-cmd \" \""),
            (args(Some("true"), 0, 0, 3), "--health-interval 0s"),
            (args(Some("true"), 5000, 0, 3), "--health-timeout 0s"),
            (args(Some("true"), 5000, 6000, 3), "--health-timeout 6s"),
            (args(Some("true"), 5000, 2000, 0), "--health-failures 0"),
        ] {
            let err = a.check().unwrap_err();
            assert_eq!(err.code, USAGE);
            assert!(err.message.contains(needle), "{}", err.message);
            assert!(!err.message.contains('\n'), "{}", err.message);
        }
        assert!(args(None, 0, 0, 0).check().unwrap().is_none());
        assert!(args(Some("true"), 5000, 5000, 1).check().unwrap().is_some());
    }

    #[tokio::test]
    async fn a_probe_reports_status_signal_and_timeout() {
        let check = |cmd: &str| HealthCheck {
            command: cmd.into(),
            interval: Duration::from_secs(10),
            timeout: Duration::from_millis(500),
            failures: 1,
        };
        assert_eq!(check("true").probe(&[]).await, Ok(()));
        assert_eq!(
            check("exit 3").probe(&[]).await,
            Err("exit status 3".into())
        );
        assert_eq!(
            check("kill -TERM $$").probe(&[]).await,
            Err("killed by SIGTERM".into())
        );
        assert_eq!(
            check("sleep 60").probe(&[]).await,
            Err("timed out after 500ms".into())
        );
        assert_eq!(
            check("test \"$X\" = y").probe(&[("X", "y".into())]).await,
            Ok(())
        );
    }
}
