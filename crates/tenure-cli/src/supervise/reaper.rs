//! The loop shared by the keeper and the init: reap, pass signals on, obey the control pipe,
//! and exit — with the command's status — only once no descendant is left.

use super::protocol::Control;
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// How often SIGKILL is repeated while descendants remain (new forks of processes not yet
/// killed, a process in uninterruptible sleep).
const KILL_AGAIN: Duration = Duration::from_millis(50);

/// The signals a supervisor receives through its signalfd: SIGCHLD and those it passes on.
const FORWARDED: [Signal; 6] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
];

/// What a supervisor can do to the processes below it.
pub(super) trait Tree {
    /// Passes `signal` on to the command's process group.
    fn forward(&mut self, signal: Signal);
    /// SIGTERM to every process of the tree (but the supervisors).
    fn terminate(&mut self);
    /// SIGKILL to every process of the tree.
    fn kill(&mut self);
}

/// Blocks the signals the loop reads, before any child is started (so that no SIGCHLD is
/// lost). A child inherits the mask: it calls [`unblock_all`] before its exec.
pub(super) fn block_signals() -> nix::Result<SignalFd> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGCHLD);
    for signal in FORWARDED {
        set.add(signal);
    }
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
    SignalFd::with_flags(&set, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)
}

/// Clears the signal mask (called between fork and exec: sigprocmask is async-signal-safe),
/// so that the command gets the signals it is sent.
pub(super) fn unblock_all() -> std::io::Result<()> {
    nix::sys::signal::sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)
        .map_err(std::io::Error::from)
}

/// The shell's convention for a status: the exit code, or 128 + the signal.
fn code(status: WaitStatus) -> Option<(Pid, u8)> {
    match status {
        // An exit status is 0..=255 and a signal number below 128.
        WaitStatus::Exited(pid, code) => Some((pid, u8::try_from(code).unwrap_or(u8::MAX))),
        WaitStatus::Signaled(pid, signal, _) => {
            let number = u8::try_from(signal as i32).unwrap_or(127);
            Some((pid, 128u8.saturating_add(number)))
        }
        _ => None,
    }
}

/// Runs until every descendant has been reaped; returns `child`'s status.
///
/// When `child` exits, the rest of the tree gets SIGTERM and, `grace` later, SIGKILL. When the
/// control pipe closes (the parent is gone), the tree gets SIGKILL at once.
pub(super) fn run(
    tree: &mut impl Tree,
    child: Pid,
    control: OwnedFd,
    signals: SignalFd,
    grace: Duration,
) -> u8 {
    let mut status = None;
    let mut kill_at: Option<Instant> = None;
    let mut control = Some(control);
    loop {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(s) => {
                    if let Some((pid, c)) = code(s) {
                        if pid == child {
                            status = Some(c);
                            // Whatever the command left behind.
                            tree.terminate();
                            kill_at.get_or_insert(Instant::now() + grace);
                        }
                    }
                }
                Err(Errno::EINTR) => {}
                Err(_) => return status.unwrap_or(crate::exit::INTERNAL), // ECHILD: all gone
            }
        }
        if kill_at.is_some_and(|at| at <= Instant::now()) {
            tree.kill();
            kill_at = Some(Instant::now() + KILL_AGAIN);
        }
        let timeout = match kill_at {
            Some(at) => {
                let ms = at.saturating_duration_since(Instant::now()).as_millis() + 1;
                PollTimeout::try_from(ms.min(60_000) as i32).unwrap_or(PollTimeout::MAX)
            }
            None => PollTimeout::NONE,
        };
        let mut fds = vec![PollFd::new(signals.as_fd(), PollFlags::POLLIN)];
        if let Some(c) = &control {
            fds.push(PollFd::new(c.as_fd(), PollFlags::POLLIN));
        }
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => std::thread::sleep(KILL_AGAIN),
        }
        let control_ready = fds
            .get(1)
            .and_then(|f| f.revents())
            .is_some_and(|r| !r.is_empty());
        drop(fds);
        while let Ok(Some(info)) = signals.read_signal() {
            if let Ok(signal) = Signal::try_from(i32::try_from(info.ssi_signo).unwrap_or(0)) {
                if signal != Signal::SIGCHLD {
                    tree.forward(signal);
                }
            }
        }
        if control_ready {
            let mut buf = [0u8; 64];
            let read = control
                .as_ref()
                .map(|c| nix::unistd::read(c.as_raw_fd(), &mut buf));
            match read {
                Some(Ok(0)) | Some(Err(_)) | None => {
                    if !matches!(read, Some(Err(Errno::EINTR | Errno::EAGAIN))) {
                        // The parent is gone: nobody leads for this tree any more.
                        control = None;
                        tree.kill();
                        kill_at = Some(Instant::now() + KILL_AGAIN);
                    }
                }
                Some(Ok(n)) => {
                    for control in buf[..n].iter().filter_map(|&b| Control::from_byte(b)) {
                        match control {
                            Control::Forward(signal) => tree.forward(signal),
                            Control::Terminate => tree.terminate(),
                            Control::Kill => {
                                tree.kill();
                                kill_at = Some(Instant::now() + KILL_AGAIN);
                            }
                        }
                    }
                }
            }
        }
    }
}
