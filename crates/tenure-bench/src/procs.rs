//! Processes the benchmark starts, the monotonic clock they share, and the stamp file in which
//! every supervised child records when it started and stopped.

use nix::sys::signal::{kill, Signal};
use nix::time::{clock_gettime, ClockId};
use nix::unistd::Pid;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// CLOCK_MONOTONIC in nanoseconds: one clock for every process on this machine.
pub(crate) fn mono_ns() -> i64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC");
    t.tv_sec() * 1_000_000_000 + t.tv_nsec()
}

/// A process the benchmark started: SIGKILLed when dropped, and (parent-death signal) when
/// the benchmark itself dies.
pub(crate) struct Proc {
    pub child: Child,
    pub pid: i32,
}

impl Proc {
    /// Starts `command` with stdin closed and stdout/stderr appended to `log`.
    ///
    /// Must be called from the benchmark's main thread (the `block_on` future, never a spawned
    /// task): the parent-death signal fires when the *thread* that forked exits.
    pub(crate) fn spawn(mut command: Command, log: &Path) -> io::Result<Proc> {
        let out = File::options().create(true).append(true).open(log)?;
        command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true);
        // SAFETY: between fork and exec the closure makes one async-signal-safe system call.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(io::Error::from)
            });
        }
        let child = command.spawn()?;
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
        Ok(Proc { child, pid })
    }

    /// Sends `signal` to the process (a process already gone is not an error).
    pub(crate) fn signal(&self, signal: Signal) {
        let _ = kill(Pid::from_raw(self.pid), signal);
    }

    /// Waits up to `within` for the process to exit; SIGKILLs it if it does not.
    pub(crate) async fn finish(mut self, within: Duration) {
        if tokio::time::timeout(within, self.child.wait())
            .await
            .is_err()
        {
            let _ = self.child.kill().await;
        }
    }
}

/// The parent pid in the text of `/proc/PID/stat` (the field after the state, which follows
/// the command name's closing parenthesis; the name may hold spaces and parentheses).
pub(crate) fn stat_ppid(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The parent of `pid`, as the mounted /proc numbers it.
pub(crate) fn parent_of(pid: i32) -> Option<i32> {
    stat_ppid(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// This process's pid and its parent's as the mounted /proc numbers them: the host's, also
/// for a child of `tenure run` in a PID namespace (tenure does not remount /proc), where
/// `getpid` would say 2 and `getppid` 1. `getpid`/`getppid` if /proc cannot tell.
pub(crate) fn own_pids() -> (i32, i32) {
    let pid = std::fs::read_link("/proc/self")
        .ok()
        .and_then(|p| p.to_str()?.parse().ok());
    match pid {
        Some(pid) => (
            pid,
            parent_of(pid).unwrap_or_else(|| nix::unistd::getppid().as_raw()),
        ),
        None => (
            nix::unistd::getpid().as_raw(),
            nix::unistd::getppid().as_raw(),
        ),
    }
}

/// The first of `ours` that `pid` is or descends from, walking up the parents in /proc (the
/// candidate process the benchmark started, above `tenure run`'s keeper and init).
pub(crate) fn ancestor_in(pid: i32, ours: &[i32]) -> Option<i32> {
    let mut p = pid;
    for _ in 0..16 {
        if ours.contains(&p) {
            return Some(p);
        }
        if p <= 1 {
            return None;
        }
        p = parent_of(p)?;
    }
    None
}

/// Sends `signal` to `pid` and returns the monotonic instant just before it was sent.
pub(crate) fn signal_at(pid: i32, signal: Signal) -> i64 {
    let at = mono_ns();
    let _ = kill(Pid::from_raw(pid), signal);
    at
}

/// One line of the stamp file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// `start` or `stop`.
    pub event: String,
    pub mono_ns: i64,
    pub pid: i32,
    /// The child's parent (tenure run's init or keeper, etcdctl, kazoo's candidate), or the
    /// seeds' candidate itself. Pids are the host's (see [`own_pids`]).
    pub supervisor: i32,
    /// The fencing token the child was given, if any (`TENURE_TERM`, `ETCD_LOCK_REV`,
    /// `ZK_LOCK_SEQ`).
    pub token: String,
}

impl Stamp {
    /// The line format: `EVENT MONO_NS PID SUPERVISOR TOKEN`.
    pub(crate) fn line(&self) -> String {
        format!(
            "{} {} {} {} {}\n",
            self.event, self.mono_ns, self.pid, self.supervisor, self.token
        )
    }

    pub(crate) fn parse(line: &str) -> Option<Stamp> {
        let mut f = line.split_whitespace();
        Some(Stamp {
            event: f.next()?.to_string(),
            mono_ns: f.next()?.parse().ok()?,
            pid: f.next()?.parse().ok()?,
            supervisor: f.next()?.parse().ok()?,
            token: f.next().unwrap_or("-").to_string(),
        })
    }

    pub(crate) fn is_start(&self) -> bool {
        self.event == "start"
    }
}

/// Appends `stamp` to `path` in one `write` (O_APPEND: lines of concurrent writers never mix).
pub(crate) fn append_stamp(path: &Path, stamp: &Stamp) -> io::Result<()> {
    use std::io::Write;
    let mut f = File::options().create(true).append(true).open(path)?;
    f.write_all(stamp.line().as_bytes())
}

/// Reads a stamp file as it grows.
pub(crate) struct Stamps {
    path: PathBuf,
    offset: u64,
    partial: String,
    /// Every stamp read so far, in file order.
    pub seen: Vec<Stamp>,
    /// `seen` up to here has been looked at by `wait_for`: just past its last match.
    cursor: usize,
}

impl Stamps {
    pub(crate) fn new(path: PathBuf) -> Stamps {
        Stamps {
            path,
            offset: 0,
            partial: String::new(),
            seen: Vec::new(),
            cursor: 0,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the lines appended since the last call.
    fn poll(&mut self) {
        let Ok(mut f) = File::open(&self.path) else {
            return;
        };
        if f.seek(SeekFrom::Start(self.offset)).is_err() {
            return;
        }
        let mut buf = String::new();
        if let Ok(n) = f.read_to_string(&mut buf) {
            self.offset += n as u64;
            self.partial.push_str(&buf);
            while let Some(end) = self.partial.find('\n') {
                let line: String = self.partial.drain(..=end).collect();
                if let Some(stamp) = Stamp::parse(&line) {
                    self.seen.push(stamp);
                }
            }
        }
    }

    /// Waits until a stamp after the last one `wait_for` returned matches `pred`, or `until`.
    ///
    /// Stamps read together with an earlier match are looked at too: a handover's stop and the
    /// next start can arrive in one read (etcd's come 5 ms apart), and skipping them lost the
    /// start.
    pub(crate) async fn wait_for(
        &mut self,
        until: Instant,
        pred: impl Fn(&Stamp) -> bool,
    ) -> Option<Stamp> {
        loop {
            self.poll();
            if let Some(i) = self.seen[self.cursor..].iter().position(&pred) {
                self.cursor += i + 1;
                return Some(self.seen[self.cursor - 1].clone());
            }
            self.cursor = self.seen.len();
            if Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// The most recent start stamp whose process has not stopped (per the file).
    pub(crate) fn current_leader(&mut self) -> Option<Stamp> {
        self.poll();
        let last = self.seen.iter().rev().find(|s| s.is_start())?;
        let stopped = self.seen.iter().any(|s| !s.is_start() && s.pid == last.pid);
        (!stopped).then(|| last.clone())
    }
}

/// Resident set size and its peak (kB) of `pid`, from `/proc/PID/status`.
pub(crate) fn rss_kb(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))?
            .split_whitespace()
            .nth(1)?
            .parse::<u64>()
            .ok()
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// CPU time (user + system) this process has used, from `/proc/self/stat`.
pub(crate) fn own_cpu() -> Option<Duration> {
    cpu_in("/proc/self/stat")
}

/// CPU time (user + system) process `pid` has used (`None` once it is gone).
pub(crate) fn pid_cpu(pid: i32) -> Option<Duration> {
    cpu_in(&format!("/proc/{pid}/stat"))
}

fn cpu_in(path: &str) -> Option<Duration> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 11 and 12 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .and_then(|hz| u64::try_from(hz).ok())
        .filter(|&hz| hz > 0)
        .unwrap_or(100);
    Some(Duration::from_millis(ticks * 1000 / hz))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parents_from_stat() {
        assert_eq!(stat_ppid("42 (tenure) S 7 42 42 0 -1"), Some(7));
        assert_eq!(stat_ppid("42 (a (b) c) R 1 42 42 0"), Some(1));
        assert_eq!(stat_ppid("42 (x"), None);
        assert_eq!(stat_ppid(""), None);
        let me = nix::unistd::getpid().as_raw();
        assert_eq!(own_pids().0, me);
        assert_eq!(parent_of(me), Some(nix::unistd::getppid().as_raw()));
        assert_eq!(ancestor_in(me, &[me]), Some(me));
        let parent = parent_of(me).unwrap();
        assert_eq!(ancestor_in(me, &[parent]), Some(parent));
        assert_eq!(ancestor_in(me, &[]), None);
    }

    #[test]
    fn stamps_round_trip() {
        let s = Stamp {
            event: "start".into(),
            mono_ns: 123_456_789,
            pid: 42,
            supervisor: 41,
            token: "7".into(),
        };
        assert_eq!(Stamp::parse(&s.line()), Some(s));
        assert_eq!(Stamp::parse("garbage"), None);
        assert_eq!(Stamp::parse("start 1 2 3").unwrap().token, "-");
    }

    #[tokio::test]
    async fn stamps_are_read_as_the_file_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stamps");
        let mut stamps = Stamps::new(path.clone());
        assert_eq!(stamps.current_leader(), None);
        let start = |pid| Stamp {
            event: "start".into(),
            mono_ns: mono_ns(),
            pid,
            supervisor: 1,
            token: "-".into(),
        };
        append_stamp(&path, &start(10)).unwrap();
        assert_eq!(stamps.current_leader().unwrap().pid, 10);
        append_stamp(
            &path,
            &Stamp {
                event: "stop".into(),
                ..start(10)
            },
        )
        .unwrap();
        assert_eq!(stamps.current_leader(), None);
        append_stamp(&path, &start(11)).unwrap();
        let until = Instant::now() + Duration::from_secs(1);
        // Each wait continues after the last stamp a wait returned.
        let found = stamps.wait_for(until, |s| s.is_start()).await.unwrap();
        assert_eq!(found.pid, 10);
        let found = stamps.wait_for(until, |s| s.is_start()).await.unwrap();
        assert_eq!(found.pid, 11);
        let none = stamps.wait_for(Instant::now(), |s| s.pid == 99).await;
        assert_eq!(none, None);
    }

    /// A handover's stop and the next start can arrive in one read: waiting for the stop must
    /// not skip the start (the benchmark counted such etcd trials as failed).
    #[tokio::test]
    async fn a_start_read_with_the_stop_before_it_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stamps");
        let stamp = |event: &str, pid| Stamp {
            event: event.into(),
            mono_ns: mono_ns(),
            pid,
            supervisor: 1,
            token: "-".into(),
        };
        let mut stamps = Stamps::new(path.clone());
        append_stamp(&path, &stamp("start", 10)).unwrap();
        assert_eq!(stamps.current_leader().unwrap().pid, 10);
        append_stamp(&path, &stamp("stop", 10)).unwrap();
        append_stamp(&path, &stamp("start", 11)).unwrap();
        let until = Instant::now() + Duration::from_secs(1);
        let stop = stamps
            .wait_for(until, |s| !s.is_start() && s.pid == 10)
            .await
            .unwrap();
        let next = stamps
            .wait_for(Instant::now(), |s| s.is_start() && s.mono_ns > stop.mono_ns)
            .await;
        assert_eq!(next.map(|s| s.pid), Some(11));
    }

    #[test]
    fn own_figures_are_readable() {
        assert!(rss_kb(std::process::id()).unwrap().0 > 0);
        assert!(own_cpu().is_some());
    }
}
