//! `tenure __keep`: tenure's child, a child subreaper that owns the command's tree.
//!
//! It creates a PID namespace if it may (and runs `tenure __init` as its PID 1), else runs the
//! command itself. Either way it exits only once every descendant is gone, with the
//! command's status, which it tells tenure on the end pipe first (the init of a namespace
//! tells it before the keeper can), and kills the whole tree when its control pipe from tenure
//! closes.

use super::init;
use super::namespace;
use super::protocol::{self, Args, Control, Report};
use super::reaper::{self, Tree};
use super::{spawn_command, take_fd, Isolation};
use nix::fcntl::OFlag;
use nix::sys::prctl::set_pdeathsig;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::ForkResult;
use nix::unistd::Pid;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

pub(super) fn main(args: Args) -> u8 {
    let control = take_fd(args.control);
    let mut report = File::from(take_fd(args.report));
    let end = take_fd(args.end);
    let go = args.go.map(take_fd);
    let signals = match reaper::block_signals() {
        Ok(s) => s,
        Err(e) => return refuse(&mut report, format!("cannot block signals: {e}")),
    };
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        return refuse(&mut report, format!("cannot become a child subreaper: {e}"));
    }
    let namespace = match args.isolation {
        Isolation::Subreaper => None,
        Isolation::PidNamespace => match namespace::enter() {
            Ok(entered) => Some(entered),
            Err(e) => {
                return refuse(
                    &mut report,
                    format!(
                    "--isolation pid-namespace is not possible here ({e}); use auto or subreaper"
                ),
                )
            }
        },
        Isolation::Auto => namespace::enter().ok(),
    };
    let mode = namespace.map_or("subreaper", namespace::Entered::as_str);
    let _ = report.write_all(Report::Mode(mode.into()).line().as_bytes());

    match namespace {
        Some(_) => {
            // Tied to tenure by the kernel: tenure's death kills us, which kills the init,
            // which kills the namespace. The control pipe covers a death before this call.
            let _ = set_pdeathsig(Signal::SIGKILL);
            let Ok((init_control, to_init)) = nix::unistd::pipe2(OFlag::O_CLOEXEC) else {
                return refuse(&mut report, "cannot create a pipe".into());
            };
            let init_args = Args {
                control: init_control.as_raw_fd(),
                report: report.as_raw_fd(),
                ..args
            };
            // The init is a fork of this keeper, not a new exec of this binary: the keeper is
            // single-threaded (`internal` runs before any runtime or thread exists), so the
            // child may run the init's code as is. One exec less on the way to the command.
            // SAFETY: this process has one thread; the child only runs `init::main`, whose
            // descriptors it owns alone (the keeper's copies are forgotten, not closed).
            let init = match unsafe { nix::unistd::fork() } {
                Ok(ForkResult::Child) => {
                    // The keeper's ends: the init must not hold its own control pipe open.
                    drop((to_init, control, signals));
                    std::mem::forget((report, init_control, go, end));
                    // Its own process group, as the keeper's; its signals stay blocked (it
                    // reads them from a signalfd of its own); SIGKILL when the keeper dies.
                    let ready = nix::unistd::setpgid(Pid::from_raw(0), Pid::from_raw(0))
                        .and_then(|()| set_pdeathsig(Signal::SIGKILL));
                    let code = match ready {
                        Ok(()) => init::main(init_args),
                        Err(_) => crate::exit::INTERNAL,
                    };
                    std::process::exit(i32::from(code));
                }
                Ok(ForkResult::Parent { child }) => child,
                Err(e) => return refuse(&mut report, format!("cannot start the init: {e}")),
            };
            // The init waits for the go message (if any), not the keeper.
            drop((report, init_control, go));
            let mut tree = Namespace { init, to_init };
            let code = reaper::run(&mut tree, init, control, signals, args.grace);
            // The init told it already, unless it died first (killed): then the kernel ended
            // its namespace before this wait returned.
            protocol::ended(end.as_fd(), code);
            code
        }
        None => {
            let cmd = match spawn_command(&args.command, &mut report, go) {
                Ok(cmd) => cmd,
                Err(code) => return code,
            };
            drop(report);
            let mut tree = Descendants { cmd };
            let code = reaper::run(&mut tree, cmd, control, signals, args.grace);
            protocol::ended(end.as_fd(), code);
            code
        }
    }
}

fn refuse(report: &mut File, why: String) -> u8 {
    let _ = report.write_all(Report::Refused(why).line().as_bytes());
    crate::exit::INTERNAL
}

/// Subreaper mode: the tree is whatever `/proc` shows below the keeper.
struct Descendants {
    cmd: Pid,
}

impl Descendants {
    fn signal_all(&self, signal: Signal) {
        for pid in super::tree::descendants(Pid::this()) {
            let _ = kill(pid, signal);
        }
    }
}

impl Tree for Descendants {
    fn forward(&mut self, signal: Signal) {
        let _ = killpg(self.cmd, signal);
    }
    fn terminate(&mut self) {
        self.signal_all(Signal::SIGTERM);
    }
    fn kill(&mut self) {
        self.signal_all(Signal::SIGKILL);
    }
}

/// PID-namespace mode: the init does the work inside; SIGKILL to it ends the namespace.
struct Namespace {
    init: Pid,
    to_init: OwnedFd,
}

impl Namespace {
    fn send(&self, control: Control) {
        let _ = nix::unistd::write(self.to_init.as_fd(), &[control.byte()]);
    }
}

impl Tree for Namespace {
    fn forward(&mut self, signal: Signal) {
        self.send(Control::Forward(signal));
    }
    fn terminate(&mut self) {
        self.send(Control::Terminate);
    }
    fn kill(&mut self) {
        // The kernel kills every process of the namespace when its init dies.
        let _ = kill(self.init, Signal::SIGKILL);
    }
}
