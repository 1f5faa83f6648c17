//! `tenure run` as real processes: the database of one test, and the intervals its children
//! logged.
//!
//! Each child appends `start`/`stop` lines with a CLOCK_MONOTONIC timestamp, its term and
//! (outer) pid to a shared file; children killed without a chance to write `stop` end when the
//! test saw them gone (an upper bound).

use super::child::{child_program, mono_ns};
use super::{fresh_prefix, unreachable, url_for, wait_for_exit, BackendKind};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) const TTL_MS: u64 = 2000;

pub(crate) struct Backend {
    pub kind: BackendKind,
    pub url: String,
    pub prefix: String,
    pub dir: tempfile::TempDir,
    /// `TENURE_NOTIFY_URL`, if set.
    pub notify_url: Option<String>,
}

/// A database for `tenure run` processes on `kind` (its tables made by a first `tenure
/// status`), or `None` after printing `SKIPPED: …` when the server is unreachable (a failure
/// under `CI=true`).
pub(crate) fn backend(kind: BackendKind) -> Option<Backend> {
    let dir = tempfile::tempdir().expect("temp dir");
    // SQLite: `t.db` in the test's directory, which a test may remove or inspect.
    let url = match kind {
        BackendKind::Sqlite => format!("sqlite://{}", dir.path().join("t.db").display()),
        _ => url_for(kind, dir.path()),
    };
    backend_at(kind, url, None, dir)
}

/// PostgreSQL through PgBouncer in transaction mode (`scripts/pgbouncer.sh start`), with the
/// direct server as `--notify-url` if `notify`.
pub(crate) fn pgbouncer(notify: bool) -> Option<Backend> {
    let dir = tempfile::tempdir().expect("temp dir");
    let notify = notify.then(super::postgres_url);
    backend_at(BackendKind::Postgres, super::pgbouncer_url(), notify, dir)
}

fn backend_at(
    kind: BackendKind,
    url: String,
    notify_url: Option<String>,
    dir: tempfile::TempDir,
) -> Option<Backend> {
    let b = Backend {
        kind,
        url,
        prefix: fresh_prefix(),
        dir,
        notify_url,
    };
    // Reachability: `tenure status` exits 69 when the server is down.
    let status = b.tenure(&["status"]).output().expect("run tenure");
    match status.status.code() {
        Some(0) => Some(b),
        Some(69) => unreachable(kind, String::from_utf8_lossy(&status.stderr).trim()),
        _ => panic!(
            "{kind} ({}) unavailable: {}",
            b.url,
            String::from_utf8_lossy(&status.stderr)
        ),
    }
}

impl Backend {
    /// `tenure ARGS…` on this database (see [`tenure`](super::tenure) for its environment).
    pub(crate) fn tenure(&self, args: &[&str]) -> Command {
        let mut c = super::tenure();
        c.env("TENURE_DATABASE_URL", &self.url)
            .env("TENURE_TABLE_PREFIX", &self.prefix)
            .args(args);
        if let Some(notify) = &self.notify_url {
            c.env("TENURE_NOTIFY_URL", notify);
        }
        c
    }

    /// Whether the database wakes followers (PostgreSQL's NOTIFY, unless behind a transaction
    /// pooler without a notify URL); elsewhere they poll every renew interval.
    pub(crate) fn pushes(&self) -> bool {
        match self.kind {
            BackendKind::Postgres => {
                !self.url.contains("pooler=transaction") || self.notify_url.is_some()
            }
            // SQLite's doorbell beside the file, MySQL's of named locks (GET_LOCK).
            BackendKind::Sqlite | BackendKind::MySql => true,
            _ => false,
        }
    }

    pub(crate) fn log(&self) -> PathBuf {
        self.dir.path().join("children.log")
    }

    /// `tenure run NAME --candidate ID [extra] -- child LOG ID MODE CODE`.
    pub(crate) fn run(&self, name: &str, id: &str, extra: &[&str], mode: &str, code: i32) -> Child {
        self.run_ttl(TTL_MS, name, id, extra, mode, code)
    }

    /// As [`run`](Backend::run), with a ttl of `ttl_ms`.
    pub(crate) fn run_ttl(
        &self,
        ttl_ms: u64,
        name: &str,
        id: &str,
        extra: &[&str],
        mode: &str,
        code: i32,
    ) -> Child {
        let log = self.log();
        let code = code.to_string();
        let command = [
            child_program().to_str().unwrap(),
            log.to_str().unwrap(),
            id,
            mode,
            &code,
        ];
        self.run_command_ttl(ttl_ms, name, id, extra, &command)
            .spawn()
            .expect("spawn tenure run")
    }

    /// `tenure run NAME --ttl TTL --candidate ID [extra] -- COMMAND…`, its stderr in
    /// `ID.stderr`, ready to spawn.
    pub(crate) fn run_command(
        &self,
        name: &str,
        id: &str,
        extra: &[&str],
        command: &[&str],
    ) -> Command {
        self.run_command_ttl(TTL_MS, name, id, extra, command)
    }

    fn run_command_ttl(
        &self,
        ttl_ms: u64,
        name: &str,
        id: &str,
        extra: &[&str],
        command: &[&str],
    ) -> Command {
        let ttl = format!("{ttl_ms}ms");
        let mut args = vec!["run", name, "--ttl", &ttl, "--candidate", id];
        args.extend_from_slice(extra);
        args.push("--");
        args.extend_from_slice(command);
        let stderr = std::fs::File::create(self.dir.path().join(format!("{id}.stderr"))).unwrap();
        let mut c = self.tenure(&args);
        c.stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        c
    }

    pub(crate) fn stderr_of(&self, id: &str) -> String {
        std::fs::read_to_string(self.dir.path().join(format!("{id}.stderr"))).unwrap_or_default()
    }

    /// What `id`'s tenure printed, once it holds `needle` (a line it logs after an event the
    /// test saw another way, such as its command's start): waits at most 10 s, else panics
    /// with what it printed.
    pub(crate) fn stderr_once_it_holds(&self, id: &str, needle: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let log = self.stderr_of(id);
            if log.contains(needle) {
                return log;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{id} did not print {needle:?} within 10 s:\n{log}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[derive(Clone, Debug)]
pub(crate) struct Interval {
    pub label: String,
    pub pid: i32,
    pub term: u64,
    pub start: i64,
    pub stop: Option<i64>,
}

/// Reads the children's log, and tracks when children without a `stop` line were seen gone.
pub(crate) struct Children {
    log: PathBuf,
    seen_dead: BTreeMap<i32, i64>,
}

impl Children {
    pub(crate) fn new(log: &Path) -> Children {
        Children {
            log: log.to_path_buf(),
            seen_dead: BTreeMap::new(),
        }
    }

    pub(crate) fn intervals(&mut self) -> Vec<Interval> {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let mut by_pid: BTreeMap<i32, Interval> = BTreeMap::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (at, term, pid) = (
                f[1].parse().unwrap(),
                f[2].parse().unwrap(),
                f[3].parse().unwrap(),
            );
            match f[0] {
                "start" => {
                    by_pid.insert(
                        pid,
                        Interval {
                            label: f[4].into(),
                            pid,
                            term,
                            start: at,
                            stop: None,
                        },
                    );
                }
                _ => by_pid.get_mut(&pid).expect("stop after start").stop = Some(at),
            }
        }
        for i in by_pid.values_mut() {
            if i.stop.is_none() {
                if let Some(&dead) = self.seen_dead.get(&i.pid) {
                    i.stop = Some(dead);
                } else if !alive(i.pid) {
                    let now = mono_ns();
                    self.seen_dead.insert(i.pid, now);
                    i.stop = Some(now);
                }
            }
        }
        by_pid.into_values().collect()
    }

    /// Every tenure's stderr, for failure messages.
    pub(crate) fn logs(&self) -> String {
        let mut out = String::new();
        if let Ok(dir) = std::fs::read_dir(self.log.parent().unwrap()) {
            for entry in dir.flatten() {
                let path = entry.path();
                if path.extension().is_some_and(|e| e == "stderr") {
                    let text = std::fs::read_to_string(&path).unwrap_or_default();
                    out.push_str(&format!("--- {}\n{text}", path.display()));
                }
            }
        }
        out
    }

    pub(crate) fn running(&mut self) -> Vec<Interval> {
        self.intervals()
            .into_iter()
            .filter(|i| i.stop.is_none())
            .collect()
    }

    /// Polls until `cond` holds on the intervals, or panics after `within`.
    pub(crate) fn wait_until(
        &mut self,
        within: Duration,
        what: &str,
        cond: impl Fn(&[Interval]) -> bool,
    ) -> Vec<Interval> {
        let until = mono_ns() + i64::try_from(within.as_nanos()).unwrap_or(i64::MAX / 2);
        loop {
            let now = self.intervals();
            if cond(&now) {
                return now;
            }
            if mono_ns() >= until {
                panic!(
                    "{what} did not happen within {within:?}: {now:#?}\n{}",
                    self.logs()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub(crate) fn assert_disjoint(&mut self) {
        let all = self.intervals();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                let a_end = a.stop.unwrap_or(i64::MAX);
                let b_end = b.stop.unwrap_or(i64::MAX);
                assert!(
                    a_end <= b.start || b_end <= a.start,
                    "children overlap: {a:?} and {b:?}"
                );
            }
        }
    }
}

pub(crate) fn alive(pid: i32) -> bool {
    // A zombie has exited: it runs no code any more.
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z'),
        Err(_) => false,
    }
}

pub(crate) fn wait_exit(child: &mut Child, within: Duration) -> i32 {
    let status = wait_for_exit(child, within)
        .unwrap_or_else(|| panic!("tenure did not exit within {within:?}"));
    status.code().unwrap_or(-1)
}

pub(crate) fn stop(mut child: Child) {
    let _ = kill(
        Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32")),
        Signal::SIGTERM,
    );
    let _ = wait_exit(&mut child, Duration::from_secs(10));
}

pub(crate) fn ms(ns: i64) -> i64 {
    ns / 1_000_000
}

/// Test children still running when the test ends (it failed, or the code under test let them
/// escape) are SIGKILLed, so that a failing test leaves nothing behind on the machine.
impl Drop for Children {
    fn drop(&mut self) {
        let program = child_program().to_string_lossy().into_owned();
        for i in self.intervals() {
            let ours = std::fs::read(format!("/proc/{}/cmdline", i.pid))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&program));
            if i.stop.is_none() && ours {
                let _ = kill(Pid::from_raw(i.pid), Signal::SIGKILL);
            }
        }
    }
}

/// A `tenure` process SIGKILLed when the test ends without having waited for it.
pub(crate) struct Tenure(pub Child);

impl Tenure {
    pub(crate) fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.0.id()).expect("a pid fits in i32"))
    }
}

impl Drop for Tenure {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
