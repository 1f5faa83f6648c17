//! What tenure and its supervision processes (`tenure __keep`, `tenure __init`) say to each
//! other: their command line, the control bytes sent down a pipe, and the report sent back.
//!
//! The control pipe is the parent's lifeline as well as its voice: when its write end closes
//! (the parent exited or was SIGKILLed), the reader kills the whole tree.

use super::Isolation;
use nix::sys::signal::Signal;
use std::ffi::OsString;
use std::os::fd::RawFd;
use std::time::Duration;

/// The hidden subcommand of the keeper (tenure's child, a subreaper).
pub(super) const KEEP: &str = "__keep";
/// The hidden subcommand of the init of a PID namespace (the keeper's child).
pub(super) const INIT: &str = "__init";

const TERMINATE: u8 = b'T';
const KILL: u8 = b'K';

/// One byte on the control pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Control {
    /// Pass this signal on to the command's process group.
    Forward(Signal),
    /// SIGTERM to every process of the tree.
    Terminate,
    /// SIGKILL to every process of the tree.
    Kill,
}

impl Control {
    pub(super) fn byte(self) -> u8 {
        match self {
            // Signal numbers are below 65, so below both letters.
            Control::Forward(signal) => signal as u8,
            Control::Terminate => TERMINATE,
            Control::Kill => KILL,
        }
    }

    pub(super) fn from_byte(byte: u8) -> Option<Control> {
        match byte {
            TERMINATE => Some(Control::Terminate),
            KILL => Some(Control::Kill),
            n => Signal::try_from(i32::from(n)).ok().map(Control::Forward),
        }
    }
}

/// The command line of a hidden subcommand:
/// `tenure __keep|__init CONTROL_FD REPORT_FD END_FD GO_FD|- GRACE_MS ISOLATION -- CMD…`.
#[derive(Debug, PartialEq)]
pub(super) struct Args {
    pub control: RawFd,
    pub report: RawFd,
    /// Where the end is told (see [`ended`]): one byte, the command's status, written once
    /// every process of the tree is gone.
    pub end: RawFd,
    /// Where the go message comes from (see [`go_message`]): the command starts only once it
    /// arrives; without it, at once.
    pub go: Option<RawFd>,
    pub grace: Duration,
    pub isolation: Isolation,
    pub command: Vec<OsString>,
}

impl Args {
    pub(super) fn to_argv(&self, subcommand: &str) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![
            subcommand.into(),
            self.control.to_string().into(),
            self.report.to_string().into(),
            self.end.to_string().into(),
            self.go
                .map_or_else(|| "-".into(), |fd| fd.to_string().into()),
            self.grace.as_millis().to_string().into(),
            self.isolation.as_str().into(),
            "--".into(),
        ];
        argv.extend(self.command.iter().cloned());
        argv
    }

    /// Parses what follows the subcommand; `None` if it is not what [`to_argv`] writes.
    ///
    /// [`to_argv`]: Args::to_argv
    pub(super) fn parse(rest: &[OsString]) -> Option<Args> {
        let [control, report, end, go, grace, isolation, dashes, command @ ..] = rest else {
            return None;
        };
        if dashes != "--" || command.is_empty() {
            return None;
        }
        Some(Args {
            control: control.to_str()?.parse().ok()?,
            report: report.to_str()?.parse().ok()?,
            end: end.to_str()?.parse().ok()?,
            go: match go.to_str()? {
                "-" => None,
                fd => Some(fd.parse().ok()?),
            },
            grace: Duration::from_millis(grace.to_str()?.parse().ok()?),
            isolation: Isolation::from_str(isolation.to_str()?)?,
            command: command.to_vec(),
        })
    }
}

/// Tells tenure on the end pipe that the tree is gone, with the command's status (the shell's
/// convention: the code, or 128 + the signal): tenure need not wait for the supervision
/// processes' own exits — the init's takes the kernel's teardown of its namespace — before it
/// releases. Written by whoever saw the last process of the tree reaped (the init of a PID
/// namespace, or the keeper), and by the keeper again as it exits (the first byte counts).
pub(super) fn ended(end: std::os::fd::BorrowedFd<'_>, code: u8) {
    let _ = nix::unistd::write(end, &[code]);
}

/// Tests only: how many milliseconds a supervision process waits before it exits, once its
/// work is done — to see that tenure does not wait for that exit.
pub(super) const HOLD_EXIT: &str = "TENURE_TEST_HOLD_EXIT_MS";

/// The first bytes of a go message; what follows is `KEY\0VALUE\0` for each variable.
const GO: &[u8] = b"go\0";

/// What tenure writes down the go pipe of a keeper started ahead of its tenure, once the tenure
/// begins: the environment the command gets besides tenure's own (its term among it).
pub(super) fn go_message(env: &[(&str, String)]) -> Vec<u8> {
    let mut message = GO.to_vec();
    for (key, value) in env {
        for part in [key.as_bytes(), value.as_bytes()] {
            message.extend_from_slice(part);
            message.push(0);
        }
    }
    message
}

/// The environment of a go message read to its end; `None` if it is not one (the pipe closed
/// without it: tenure gave the tenure up, or died, before it began).
pub(super) fn parse_go(message: &[u8]) -> Option<Vec<(OsString, OsString)>> {
    use std::os::unix::ffi::OsStrExt;
    let rest = message.strip_prefix(GO)?;
    if rest.is_empty() {
        return Some(Vec::new());
    }
    // Every key and value ends with a NUL: a message cut short does not, or has an odd count.
    let body = rest.strip_suffix(&[0])?;
    let parts: Vec<&[u8]> = body.split(|&b| b == 0).collect();
    if !parts.len().is_multiple_of(2) {
        return None;
    }
    let text = |bytes: &[u8]| std::ffi::OsStr::from_bytes(bytes).to_owned();
    Some(
        parts
            .chunks(2)
            .map(|kv| (text(kv[0]), text(kv[1])))
            .collect(),
    )
}

/// One line on the report pipe.
#[derive(Debug, PartialEq)]
pub(super) enum Report {
    /// The supervision in force (written by the keeper first).
    Mode(String),
    /// The command runs.
    Started,
    /// The command could not be started: the OS error number of its exec.
    Failed(i32),
    /// The isolation asked for is not possible here.
    Refused(String),
}

impl Report {
    pub(super) fn line(&self) -> String {
        match self {
            Report::Mode(mode) => format!("mode {mode}\n"),
            Report::Started => "started\n".into(),
            Report::Failed(errno) => format!("failed {errno}\n"),
            Report::Refused(why) => format!("refused {}\n", why.replace('\n', " ")),
        }
    }

    pub(super) fn parse(line: &str) -> Option<Report> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "mode" => Some(Report::Mode(rest.into())),
            "started" => Some(Report::Started),
            "failed" => rest.parse().ok().map(Report::Failed),
            "refused" => Some(Report::Refused(rest.into())),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_bytes_round_trip() {
        for c in [
            Control::Forward(Signal::SIGINT),
            Control::Forward(Signal::SIGTERM),
            Control::Forward(Signal::SIGHUP),
            Control::Terminate,
            Control::Kill,
        ] {
            assert_eq!(Control::from_byte(c.byte()), Some(c));
        }
        assert_eq!(Control::from_byte(0), None);
    }

    #[test]
    fn args_round_trip() {
        let mut args = Args {
            control: 5,
            report: 7,
            end: 8,
            go: None,
            grace: Duration::from_millis(200),
            isolation: Isolation::Subreaper,
            command: vec!["sh".into(), "-c".into(), "echo -- hi".into()],
        };
        let argv = args.to_argv(KEEP);
        assert_eq!(argv[0], KEEP);
        assert_eq!(Args::parse(&argv[1..]).as_ref(), Some(&args));
        assert_eq!(Args::parse(&argv[1..8]), None, "no command");
        args.go = Some(9);
        let argv = args.to_argv(INIT);
        assert_eq!(Args::parse(&argv[1..]), Some(args));
    }

    #[test]
    fn go_messages_round_trip() {
        let env = [
            ("TENURE_TERM", "7".to_string()),
            ("EMPTY", String::new()),
            ("TENURE_FENCE_SQL", "UPDATE t SET x = 1 -- é".to_string()),
        ];
        let parsed = parse_go(&go_message(&env)).expect("a go message");
        let expected: Vec<(OsString, OsString)> = env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect();
        assert_eq!(parsed, expected);
        assert_eq!(parse_go(&go_message(&[])), Some(Vec::new()));
        assert_eq!(parse_go(b""), None, "the pipe closed without a go");
        assert_eq!(parse_go(b"g"), None, "a message cut short");
        let mut cut = go_message(&env);
        cut.pop();
        assert_eq!(parse_go(&cut), None, "a message cut short");
    }

    #[test]
    fn reports_round_trip() {
        for r in [
            Report::Mode("pid-namespace".into()),
            Report::Started,
            Report::Failed(2),
            Report::Refused("unshare: EPERM".into()),
        ] {
            assert_eq!(Report::parse(r.line().trim_end()), Some(r));
        }
    }
}
