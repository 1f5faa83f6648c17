//! Supervision of the command: every process it starts dies with the tenure.
//!
//! tenure starts a keeper (`tenure __keep`, the same binary re-executed), which owns the
//! command's whole tree and exits only once that tree is empty, with the command's status:
//!
//! - **pid-namespace**: the keeper creates a PID namespace (inside a user namespace when it
//!   may not create one directly) whose PID 1 is tenure's own init (`tenure __init`), the
//!   command's parent. The kernel kills every process of a namespace when its PID 1 dies; the
//!   init dies with the keeper, and the keeper with tenure (parent-death signals, SIGKILL), so
//!   no process can escape, whatever it does, even if tenure is SIGKILLed.
//! - **subreaper**: where namespaces are not allowed, the keeper is a child subreaper (orphans
//!   of the tree are re-parented to it, not to the system's init) and kills every descendant
//!   when its control pipe from tenure closes. This relies on the keeper running: a SIGKILL of
//!   the keeper itself leaves the tree to the system.
//!
//! tenure talks to the keeper over a pipe (see `protocol`): signals to pass on, SIGTERM or
//! SIGKILL to the whole tree; when tenure dies the pipe closes.
//!
//! # Layout
//! - `protocol`: the hidden subcommands' arguments, control bytes and report lines.
//! - `keeper`, `init`: the two supervision processes; `reaper`: their common loop.
//! - `namespace`: creating the PID (and user) namespace; `tree`: descendants from `/proc`.

mod init;
mod keeper;
mod namespace;
mod protocol;
mod reaper;
mod tree;

use nix::fcntl::{fcntl, FcntlArg, FdFlag, OFlag};
use nix::sys::signal::Signal;
use protocol::{Args, Control, Report, INIT, KEEP};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::ExitStatus;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::time::{timeout, Instant};

/// How the command's tree is tied to the tenure (`--isolation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Isolation {
    /// A PID namespace if this system allows one (also to non-root users, through a user
    /// namespace), else a subreaper keeper.
    Auto,
    /// A PID namespace, or refuse to run.
    PidNamespace,
    /// A subreaper keeper, without namespaces.
    Subreaper,
}

impl Isolation {
    fn as_str(self) -> &'static str {
        match self {
            Isolation::Auto => "auto",
            Isolation::PidNamespace => "pid-namespace",
            Isolation::Subreaper => "subreaper",
        }
    }

    fn from_str(s: &str) -> Option<Isolation> {
        [
            Isolation::Auto,
            Isolation::PidNamespace,
            Isolation::Subreaper,
        ]
        .into_iter()
        .find(|i| i.as_str() == s)
    }
}

/// Runs a hidden subcommand (`tenure __keep …`, `tenure __init …`) if that is what this process
/// was started as; returns its exit code.
pub(crate) fn internal(argv: &[OsString]) -> Option<u8> {
    let subcommand = argv.get(1)?.to_str()?;
    if subcommand != KEEP && subcommand != INIT {
        return None;
    }
    let Some(args) = Args::parse(&argv[2..]) else {
        eprintln!("tenure: {subcommand} is internal to tenure run");
        return Some(crate::exit::USAGE);
    };
    let code = if subcommand == KEEP {
        keeper::main(args)
    } else {
        init::main(args)
    };
    if let Some(ms) = std::env::var(protocol::HOLD_EXIT)
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
    {
        std::thread::sleep(Duration::from_millis(ms));
    }
    Some(code)
}

/// Takes ownership of an inherited descriptor and closes it on exec, so that the command does
/// not inherit it.
fn take_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: our parent passed this descriptor, open, for us alone.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let _ = fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC));
    owned
}

/// Lets a descriptor through the next exec (called between fork and exec: fcntl is
/// async-signal-safe).
fn inherit_fd(fd: RawFd) -> io::Result<()> {
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty())).map_err(io::Error::from)?;
    Ok(())
}

/// Starts the command in a process group of its own and reports the outcome; on failure
/// returns the shell's exit code for it (127 not found, 126 not executable).
///
/// With a go pipe (a keeper started ahead of its tenure), first waits for tenure's go message
/// and adds its environment; if the pipe closes without one, starts nothing.
fn spawn_command(
    command: &[OsString],
    report: &mut File,
    go: Option<OwnedFd>,
) -> Result<nix::unistd::Pid, u8> {
    let (program, args) = command.split_first().ok_or(crate::exit::USAGE)?;
    let env = match go {
        None => Vec::new(),
        Some(go) => {
            let mut message = Vec::new();
            let read = File::from(go).read_to_end(&mut message);
            match read.ok().and_then(|_| protocol::parse_go(&message)) {
                Some(env) => env,
                // Nobody will lead with this tree: it was given up.
                None => return Err(crate::exit::INTERNAL),
            }
        }
    };
    let mut command = std::process::Command::new(program);
    command.args(args).envs(env).process_group(0);
    // SAFETY: between fork and exec only sigprocmask, which is async-signal-safe.
    unsafe {
        command.pre_exec(reaper::unblock_all);
    }
    match command.spawn() {
        Ok(child) => {
            let _ = report.write_all(Report::Started.line().as_bytes());
            Ok(nix::unistd::Pid::from_raw(
                i32::try_from(child.id()).expect("a pid fits in i32"),
            ))
        }
        Err(e) => {
            let errno = e.raw_os_error().unwrap_or(0);
            let _ = report.write_all(Report::Failed(errno).line().as_bytes());
            Err(spawn_failure_code(&e))
        }
    }
}

/// The shell's exit code for a command that could not be started.
pub(crate) fn spawn_failure_code(e: &io::Error) -> u8 {
    match e.kind() {
        io::ErrorKind::NotFound => 127,
        io::ErrorKind::PermissionDenied => 126,
        _ => crate::exit::INTERNAL,
    }
}

/// How long tenure waits for the keeper to say the command runs.
const START_LIMIT: Duration = Duration::from_secs(5);

/// A keeper started ahead of a tenure (while its candidate follows): its namespace and init
/// are set up and wait for the go message, so that the tenure's start is one exec of the
/// command, not the keeper's exec, the namespace and the init's fork first. Dropping it (or
/// tenure's death) ends the keeper and its init without starting anything.
pub(crate) struct Prepared {
    keeper: tokio::process::Child,
    control: File,
    report: OwnedFd,
    end: OwnedFd,
    go: File,
    argv: Vec<String>,
    isolation: Isolation,
    grace: Duration,
}

impl Prepared {
    /// Starts a keeper for `argv` that waits for [`Prepared::start`]. `grace` is how long
    /// processes the command leaves behind when it exits get between SIGTERM and SIGKILL.
    ///
    /// # Errors
    /// The keeper could not be spawned (no pipe, no process).
    pub(crate) fn new(argv: &[String], isolation: Isolation, grace: Duration) -> io::Result<Self> {
        let (control_read, control) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (report, report_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (end, end_write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let (go_read, go) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let args = Args {
            control: control_read.as_raw_fd(),
            report: report_write.as_raw_fd(),
            end: end_write.as_raw_fd(),
            go: Some(go_read.as_raw_fd()),
            grace,
            isolation,
            command: argv.iter().map(OsString::from).collect(),
        };
        // /proc/self/exe: this very binary, even if the file was replaced since tenure started.
        let mut command = tokio::process::Command::new("/proc/self/exe");
        command
            .arg0("tenure")
            .args(args.to_argv(KEEP))
            // tenure speaks to systemd for the unit (see sd_notify); the command does not.
            .env_remove("NOTIFY_SOCKET")
            .process_group(0);
        let inherit = [
            control_read.as_raw_fd(),
            report_write.as_raw_fd(),
            end_write.as_raw_fd(),
            go_read.as_raw_fd(),
        ];
        // SAFETY: the closure runs in the child between fork and exec and only calls fcntl,
        // which is async-signal-safe.
        unsafe {
            command.pre_exec(move || inherit.into_iter().try_for_each(inherit_fd));
        }
        let keeper = command.spawn()?;
        Ok(Prepared {
            keeper,
            control: File::from(control),
            report,
            end,
            go: File::from(go),
            argv: argv.to_vec(),
            isolation,
            grace,
        })
    }

    /// Starts the command with `env` added; returns once it runs. A keeper that died while it
    /// waited (killed, or unable to supervise) is replaced by a new one once.
    ///
    /// # Errors
    /// The exec error of the command (NotFound, PermissionDenied, …), or why the keeper could
    /// not supervise it (`--isolation pid-namespace` where namespaces are not allowed).
    pub(crate) async fn start(mut self, env: &[(&str, String)]) -> io::Result<Supervised> {
        let message = protocol::go_message(env);
        if self.go.write_all(&message).is_err() {
            // Nobody reads: the keeper or its init died while waiting (or the keeper refused
            // the isolation asked for; its replacement then says so in its report).
            let replacement = Prepared::new(&self.argv, self.isolation, self.grace)?;
            drop(self.abandon().await);
            self = replacement;
            self.go.write_all(&message)?;
        }
        let Prepared {
            keeper,
            control,
            report,
            end,
            go,
            ..
        } = self;
        drop(go);
        let end = tokio::net::unix::pipe::Receiver::from_owned_fd(end)?;
        let mut lines = String::new();
        let mut report = tokio::net::unix::pipe::Receiver::from_owned_fd(report)?;
        // The report ends (EOF) once the command has been started: nobody else holds the pipe.
        let read = timeout(START_LIMIT, report.read_to_string(&mut lines)).await;
        let mut mode = String::new();
        let mut outcome = Err(io::Error::other("the keeper did not start the command"));
        for report in lines.lines().filter_map(Report::parse) {
            match report {
                Report::Mode(m) => mode = m,
                Report::Started => outcome = Ok(()),
                Report::Failed(errno) => outcome = Err(io::Error::from_raw_os_error(errno)),
                Report::Refused(why) => outcome = Err(io::Error::other(why)),
            }
        }
        if read.is_err() {
            outcome = Err(io::Error::other(format!(
                "the keeper did not start the command within {START_LIMIT:?}"
            )));
        }
        let mut supervised = Supervised {
            keeper,
            control,
            end: Some(end),
            mode,
            status: None,
        };
        match outcome {
            Ok(()) => Ok(supervised),
            Err(e) => {
                supervised.send(Control::Kill);
                let _ = supervised.keeper.wait().await;
                Err(e)
            }
        }
    }

    /// Ends the keeper without starting the command; returns once it (and its init) is gone.
    pub(crate) async fn abandon(self) -> io::Result<ExitStatus> {
        let Prepared {
            mut keeper,
            control,
            go,
            ..
        } = self;
        // Both pipes closed: the keeper kills its init and exits.
        drop((control, go));
        keeper.wait().await
    }
}

/// The command, under its keeper.
pub(crate) struct Supervised {
    keeper: tokio::process::Child,
    /// Its write end: dropping it (or tenure's death) makes the keeper kill the whole tree.
    control: File,
    /// Where the init (or the keeper) tells the tree is gone, before its own exit (see
    /// `protocol::ended`); `None` once it closed without telling.
    end: Option<tokio::net::unix::pipe::Receiver>,
    mode: String,
    status: Option<ExitStatus>,
}

impl Supervised {
    /// Starts `argv` under a keeper with `env` added and stdio passed through; returns once
    /// the command runs. `grace` is how long processes the command leaves behind when it exits
    /// get between SIGTERM and SIGKILL.
    ///
    /// # Errors
    /// As [`Prepared::new`] and [`Prepared::start`].
    pub(crate) async fn spawn(
        argv: &[String],
        env: &[(&str, String)],
        isolation: Isolation,
        grace: Duration,
    ) -> io::Result<Supervised> {
        Prepared::new(argv, isolation, grace)?.start(env).await
    }

    /// The supervision in force: `pid-namespace`, `pid-namespace+user` or `subreaper`.
    pub(crate) fn mode(&self) -> &str {
        &self.mode
    }

    /// The keeper's pid.
    pub(crate) fn pid(&self) -> i32 {
        self.keeper
            .id()
            .map_or(0, |id| i32::try_from(id).expect("a pid fits in i32"))
    }

    fn send(&mut self, control: Control) {
        // A keeper that is gone needs nothing more (its tree is gone too).
        let _ = self.control.write_all(&[control.byte()]);
    }

    /// Passes `signal` on to the command's process group.
    pub(crate) fn signal(&mut self, signal: Signal) {
        self.send(Control::Forward(signal));
    }

    /// SIGTERM to every process of the tree.
    pub(crate) fn terminate(&mut self) {
        self.send(Control::Terminate);
    }

    /// Waits until the command has exited and every process it started is gone; returns the
    /// command's status (the end pipe's byte or the keeper's exit code carries it: the code, or
    /// 128 + the signal).
    ///
    /// The tree is gone when the init of its namespace (or the keeper) has reaped its last
    /// process: that is when they tell it on the end pipe, before their own exits (the init's
    /// includes the kernel's teardown of the namespace, about a millisecond), which this does
    /// not wait for. A keeper that dies without telling (SIGKILLed) is waited for instead: its
    /// init, and with it the namespace, died before it.
    ///
    /// # Cancel safety
    /// Cancel safe: the status is kept once known.
    pub(crate) async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(status) = self.status {
            return Ok(status);
        }
        let status = loop {
            let Some(end) = self.end.as_mut() else {
                break self.keeper.wait().await?;
            };
            let mut code = [0u8; 1];
            tokio::select! {
                // Both cancel safe: a byte is consumed only by a read that returns it.
                read = end.read(&mut code) => match read {
                    Ok(1) => break ExitStatus::from_raw(i32::from(code[0]) << 8),
                    // Closed without a word (or unreadable): the keeper's exit decides.
                    _ => self.end = None,
                },
                status = self.keeper.wait() => break status?,
            }
        };
        self.status = Some(status);
        Ok(status)
    }

    /// Stops the whole tree: SIGTERM, then SIGKILL at `kill_at` at the latest; returns once
    /// every process of it is gone.
    pub(crate) async fn stop(&mut self, kill_at: Instant) -> io::Result<ExitStatus> {
        if self.status.is_none() {
            self.terminate();
            let grace = kill_at.saturating_duration_since(Instant::now());
            if let Ok(status) = timeout(grace, self.wait()).await {
                status?;
            }
        }
        self.send(Control::Kill);
        self.wait().await
    }
}

/// The shell's convention: the exit code, or 128 + the signal that killed it.
pub(crate) fn exit_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        // An exit status is 0..=255 and a signal number below 128.
        (Some(code), _) => u8::try_from(code).unwrap_or(crate::exit::INTERNAL),
        (None, Some(signal)) => 128u8.saturating_add(u8::try_from(signal).unwrap_or(127)),
        (None, None) => crate::exit::INTERNAL,
    }
}
