//! Debian's etcdctl 3.4 (`ETCDCTL_API=3`) in a scenario: what it printed, and how it ended.

use super::{strip_ids, Target, ETCDCTL};
use crate::support::wait_for_exit;
use serde_json::Value;
use std::io::{BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Duration;

/// What an etcdctl run printed and how it ended.
#[derive(Debug)]
pub(crate) struct Ctl {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ctl {
    /// The exit code, stdout and the `Error:` lines of stderr (its retry warnings carry
    /// timestamps and client ids, different on every run).
    pub(crate) fn summary(&self) -> String {
        let errors: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| l.starts_with("Error:"))
            .collect();
        format!(
            "exit {:?} | {} | {}",
            self.code,
            self.stdout.trim_end().replace('\n', " ⏎ "),
            errors.join(" ⏎ ")
        )
    }

    /// Without the time a call took (`took = 1.2ms`), which differs on every run.
    pub(crate) fn without_timing(&self) -> Ctl {
        let scrub = |text: &str| {
            text.lines()
                .map(|l| match l.find("took = ") {
                    Some(i) => format!("{}took = …", &l[..i]),
                    None => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        Ctl {
            code: self.code,
            stdout: scrub(&self.stdout),
            stderr: scrub(&self.stderr),
        }
    }

    /// stdout as JSON (`-w json`), with the header's ids left out.
    pub(crate) fn json(&self) -> Value {
        let mut json: Value = serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!("etcdctl printed no JSON ({e}): {self:?}");
        });
        strip_ids(&mut json);
        json
    }
}

/// etcdctl (API 3) against `target`: `--endpoints=http://ADDR`, bounded in time.
pub(crate) fn etcdctl_command(target: &Target) -> Command {
    etcdctl_command_at(&target.url())
}

/// etcdctl (API 3) against the endpoints `endpoints`, as given to `--endpoints`.
pub(crate) fn etcdctl_command_at(endpoints: &str) -> Command {
    let mut command = Command::new(ETCDCTL);
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--dial-timeout=5s")
        .arg("--command-timeout=15s")
        .stdin(Stdio::null());
    command
}

/// Runs etcdctl with `args` against `target` to completion (at most 30 s).
pub(crate) fn etcdctl(target: &Target, args: &[&str]) -> Ctl {
    etcdctl_input(target, args, None)
}

/// Runs etcdctl with `args` against `endpoints` (as `--endpoints` takes them).
pub(crate) fn etcdctl_at(endpoints: &str, args: &[&str]) -> Ctl {
    run_etcdctl(etcdctl_command_at(endpoints), args, None)
}

/// The same, with `input` on its standard input.
pub(crate) fn etcdctl_input(target: &Target, args: &[&str], input: Option<&[u8]>) -> Ctl {
    run_etcdctl(etcdctl_command(target), args, input)
}

fn run_etcdctl(mut command: Command, args: &[&str], input: Option<&[u8]>) -> Ctl {
    command.args(args);
    if input.is_some() {
        command.stdin(Stdio::piped());
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn etcdctl");
    if let Some(input) = input {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let out = read_all(child.stdout.take().expect("stdout"));
    let err = read_all(child.stderr.take().expect("stderr"));
    let Some(status) = wait_for_exit(&mut child, Duration::from_secs(30)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("etcdctl {args:?} did not finish within 30 s");
    };
    Ctl {
        code: status.code(),
        stdout: out.join().expect("stdout"),
        stderr: err.join().expect("stderr"),
    }
}

fn read_all(pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(pipe).read_to_string(&mut text);
        text
    })
}
