//! The supervised command: its own process group, killed with tenure, stopped group-wide.

use nix::sys::signal::{killpg, Signal};
use nix::unistd::{getppid, Pid};
use std::io;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;
use tokio::time::{timeout, Instant};

/// A running command in a process group of its own.
pub struct Supervised {
    child: tokio::process::Child,
    group: Pid,
    status: Option<ExitStatus>,
}

impl Supervised {
    /// Starts `argv` with `env` added, stdio passed through, in a new process group, with a
    /// parent-death signal so that it is SIGKILLed if tenure dies, even by SIGKILL.
    ///
    /// The parent-death signal belongs to the thread that forked; tenure runs on one thread
    /// that lives as long as the process does.
    pub fn spawn(argv: &[String], env: &[(&str, String)]) -> io::Result<Supervised> {
        let (program, args) = argv
            .split_first()
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no command"))?;
        let parent = Pid::this();
        let mut command = tokio::process::Command::new(program);
        command.args(args).envs(env.iter().map(|(k, v)| (*k, v)));
        command.process_group(0);
        // SAFETY: the closure runs in the child between fork and exec and only makes two
        // async-signal-safe system calls (prctl, getppid).
        unsafe {
            command.pre_exec(move || {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)?;
                // tenure may have died between fork and prctl: then nothing would kill us.
                if getppid() != parent {
                    return Err(io::Error::other("tenure exited before the command started"));
                }
                Ok(())
            });
        }
        let child = command.spawn()?;
        let pid = child
            .id()
            .ok_or_else(|| io::Error::other("the command exited before it could be tracked"))?;
        Ok(Supervised {
            child,
            group: Pid::from_raw(pid as i32),
            status: None,
        })
    }

    /// The command's pid (also its process group id).
    pub fn pid(&self) -> i32 {
        self.group.as_raw()
    }

    /// Sends `signal` to the whole group; a group that is already gone is not an error.
    pub fn signal(&self, signal: Signal) {
        if let Err(e) = killpg(self.group, signal) {
            if e != nix::errno::Errno::ESRCH {
                tracing::warn!(group = self.group.as_raw(), %signal, error = %e, "cannot signal the command's group");
            }
        }
    }

    /// Waits for the command to exit.
    ///
    /// # Cancel safety
    /// Cancel safe: the status is kept once known.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = self.child.wait().await?;
        self.status = Some(status);
        Ok(status)
    }

    /// Stops the whole group: SIGTERM, then SIGKILL at `kill_at` at the latest; returns once
    /// the command itself has exited. Processes it left behind in its group get the SIGKILL
    /// too.
    pub async fn stop(&mut self, kill_at: Instant) -> io::Result<ExitStatus> {
        if self.status.is_none() {
            self.signal(Signal::SIGTERM);
            let grace = kill_at.saturating_duration_since(Instant::now());
            if let Ok(status) = timeout(grace, self.wait()).await {
                status?;
            }
        }
        self.signal(Signal::SIGKILL);
        self.wait().await
    }

    /// After the command exited by itself: stops whatever it left running in its group.
    pub async fn stop_leftovers(&mut self, grace: Duration) {
        if killpg(self.group, None).is_err() {
            return;
        }
        tracing::info!(
            group = self.group.as_raw(),
            "stopping processes the command left in its group"
        );
        self.signal(Signal::SIGTERM);
        let until = Instant::now() + grace;
        while Instant::now() < until && killpg(self.group, None).is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        self.signal(Signal::SIGKILL);
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
pub fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => crate::exit::INTERNAL,
    }
}
