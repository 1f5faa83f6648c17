//! `tenure __init`: PID 1 of the command's PID namespace. It starts the command in a process
//! group of its own, passes signals on to that group, reaps every orphan of the namespace, and
//! exits with the command's status once the namespace is otherwise empty, having told tenure
//! so on the end pipe first. Its parent-death signal (SIGKILL, tied to the keeper) and the
//! kernel do the rest: when PID 1 dies, every process of the namespace is killed.

use super::protocol::{self, Args};
use super::reaper::{self, Tree};
use super::{spawn_command, take_fd};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::fs::File;
use std::os::fd::AsFd;

pub(super) fn main(args: Args) -> u8 {
    let control = take_fd(args.control);
    let mut report = File::from(take_fd(args.report));
    let end = take_fd(args.end);
    let Ok(signals) = reaper::block_signals() else {
        return crate::exit::INTERNAL;
    };
    let go = args.go.map(take_fd);
    let cmd = match spawn_command(&args.command, &mut report, go) {
        Ok(cmd) => cmd,
        Err(code) => return code,
    };
    drop(report);
    let code = reaper::run(&mut Everyone { cmd }, cmd, control, signals, args.grace);
    // Every process of the namespace has been reaped: tenure may go on while the kernel
    // tears the namespace down behind this exit.
    protocol::ended(end.as_fd(), code);
    code
}

/// Everyone in the namespace: `kill(-1, …)` from its PID 1 reaches all the others.
struct Everyone {
    cmd: Pid,
}

impl Tree for Everyone {
    fn forward(&mut self, signal: Signal) {
        let _ = killpg(self.cmd, signal);
    }
    fn terminate(&mut self) {
        let _ = kill(Pid::from_raw(-1), Signal::SIGTERM);
    }
    fn kill(&mut self) {
        let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
    }
}
