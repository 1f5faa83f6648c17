//! Processes of a private cluster: the tools it needs, free ports reserved among tenure-faults
//! runs ([`Ports`]), processes started in groups of their own ([`Group`]), a tiny HTTP client
//! for the cluster managers' REST APIs, and teardown by a marker in the command line.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `name` on `PATH`, or in `/usr/sbin` (not on every user's `PATH`), or as given if absolute.
pub fn which(name: &str) -> Option<PathBuf> {
    if name.starts_with('/') {
        return Path::new(name).exists().then(|| PathBuf::from(name));
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join(name))
                .find(|p| p.is_file())
        })
        .or_else(|| Some(Path::new("/usr/sbin").join(name)).filter(|p| p.is_file()))
}

/// The newest PostgreSQL server binaries under `/usr/lib/postgresql/*/bin`.
pub fn pg_bin_dir() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| {
            let e = e.ok()?;
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            (bin.join("postgres").exists() && bin.join("initdb").exists()).then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Where tenure-faults runs reserve the ports of their clusters: one file per port, holding
/// the pid of the run that reserved it.
pub const RESERVED: &str = "/tmp/tenure-faults-ports";

/// Ports reserved for one cluster, machine-wide among tenure-faults runs, until dropped.
///
/// A port is free only for the moment it is tested: between the test and the bind of the
/// server that gets it (a Patroni starting on a busy machine takes seconds) another run could
/// choose it too. A reservation file closes that window between two runs at once (CI's and a
/// developer's): a run skips a port whose file names a live process.
pub struct Ports {
    pub ports: Vec<u16>,
    files: Vec<PathBuf>,
}

impl Drop for Ports {
    fn drop(&mut self) {
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// `n` distinct free TCP ports on 127.0.0.1, below the kernel's ephemeral range (32768 and
/// up), so that no outgoing connection takes one of them before its server binds it; never
/// 5432 or 3306; each reserved ([`Ports`]), and held while the others are chosen.
pub fn free_ports(n: usize) -> std::io::Result<Ports> {
    use rand::Rng;
    std::fs::create_dir_all(RESERVED)?;
    let mut rng = rand::thread_rng();
    let mut held = Vec::new();
    let mut reserved = Ports {
        ports: Vec::new(),
        files: Vec::new(),
    };
    for _ in 0..n * 200 {
        if held.len() == n {
            break;
        }
        let port: u16 = rng.gen_range(20_000..32_000);
        let Ok(listener) = std::net::TcpListener::bind(("127.0.0.1", port)) else {
            continue;
        };
        if let Some(file) = reserve(port) {
            held.push(listener);
            reserved.ports.push(port);
            reserved.files.push(file);
        }
    }
    if held.len() < n {
        return Err(std::io::Error::other("no free ports in 20000..32000"));
    }
    Ok(reserved)
}

/// Reserves `port` for this process: its file, created if absent or if the process it names
/// is gone.
fn reserve(port: u16) -> Option<PathBuf> {
    let file = Path::new(RESERVED).join(port.to_string());
    let create = || {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file)
            .and_then(|mut f| {
                std::io::Write::write_all(&mut f, std::process::id().to_string().as_bytes())
            })
    };
    if create().is_ok() {
        return Some(file);
    }
    let owner: Option<i32> = std::fs::read_to_string(&file).ok()?.trim().parse().ok();
    let alive = owner.is_some_and(|pid| Path::new(&format!("/proc/{pid}")).exists());
    if alive {
        return None;
    }
    // Left by a run that died: take it over (if another run does at the same moment, one of
    // the two creations fails).
    std::fs::remove_file(&file).ok()?;
    create().ok().map(|()| file)
}

/// Copies every `*.log`, `*.cfg` and `*.yml` file under `from` (two levels deep) into `to`,
/// named by their path (`pg1-patroni.log`): what a failed scenario keeps of its cluster.
pub fn copy_logs(from: &Path, to: &Path) {
    let keep = |p: &Path| {
        p.extension()
            .is_some_and(|e| ["log", "cfg", "yml", "cnf", "out"].iter().any(|k| e == *k))
    };
    let _ = std::fs::create_dir_all(to);
    let mut dirs = vec![(from.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            let name = format!("{prefix}{}", e.file_name().to_string_lossy());
            if path.is_dir() && prefix.is_empty() {
                dirs.push((path, format!("{name}-")));
            } else if path.is_file() && keep(&path) {
                let _ = std::fs::copy(&path, to.join(name));
            }
        }
    }
}

/// The last `n` lines of the file `log`, joined by " / " (what a failure quotes of a process).
pub fn log_tail(log: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut tail: Vec<&str> = text.lines().rev().take(n).collect();
    tail.reverse();
    if tail.is_empty() {
        format!("({} is empty)", log.display())
    } else {
        tail.join(" / ")
    }
}

/// The status code and body of an HTTP/1.0 request to 127.0.0.1:`port`, within `timeout`.
pub async fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&str>,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let exchange = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|e| e.to_string())?;
        let body = body.unwrap_or("");
        let request = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut answer = Vec::new();
        s.read_to_end(&mut answer)
            .await
            .map_err(|e| e.to_string())?;
        let answer = String::from_utf8_lossy(&answer).to_string();
        let status = answer
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("not an HTTP answer: {answer:.80}"))?;
        let body = answer
            .split_once("\r\n\r\n")
            .map_or(String::new(), |(_, b)| b.to_string());
        Ok((status, body))
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("no answer from port {port} within {timeout:?}"))?
}

/// The parent pid of `pid`, from `/proc`.
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The children of `pid`.
pub fn children(pid: i32) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|&p| parent(p) == Some(pid))
        .collect()
}

/// SIGKILLs `pid` and, first, notes its children; then SIGKILLs those (PostgreSQL's children
/// each start a session of their own, so a process group does not reach them).
pub fn kill_tree(pid: i32) {
    let kids = children(pid);
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
    for k in kids {
        let _ = kill(Pid::from_raw(k), Signal::SIGKILL);
    }
}

/// SIGKILLs every process (other than this one) whose command line contains `marker`, until
/// none is left (at most 5 s); returns how many it killed.
pub fn kill_marked(marker: &str) -> usize {
    let me = nix::unistd::getpid().as_raw();
    let mut killed = 0;
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let marked: Vec<i32> = pids()
            .into_iter()
            .filter(|&p| p != me)
            .filter(|p| {
                std::fs::read(format!("/proc/{p}/cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
            })
            .collect();
        if marked.is_empty() || std::time::Instant::now() > until {
            return killed;
        }
        for p in marked {
            if kill(Pid::from_raw(p), Signal::SIGKILL).is_ok() {
                killed += 1;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts `cmd` in a process group of its own (so that teardown can kill the whole group), with
/// stdin closed and stdout and stderr appended to the file `log`.
pub fn spawn_logged(cmd: &mut std::process::Command, log: &Path) -> Result<Group, String> {
    use std::os::unix::process::CommandExt;
    let out = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    let child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{:?}: {e}", cmd.get_program()))?;
    Ok(Group { child: Some(child) })
}

/// A process started by [`spawn_logged`], the leader of its own process group: killed with its
/// whole group, and reaped, by [`Group::kill`] or when dropped.
pub struct Group {
    /// `None` once reaped: its pid may belong to someone else by then.
    child: Option<std::process::Child>,
}

impl Group {
    /// SIGKILLs the whole group and reaps its leader.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = kill(
                Pid::from_raw(-i32::try_from(child.id()).expect("a pid fits in i32")),
                Signal::SIGKILL,
            );
            let _ = child.wait();
        }
    }

    /// Whether the leader still runs: not reaped, and not a zombie that has exited.
    pub fn is_running(&self) -> bool {
        self.child.as_ref().is_some_and(|c| {
            std::fs::read_to_string(format!("/proc/{}/stat", c.id()))
                .ok()
                .and_then(|stat| {
                    let state = stat.rsplit_once(") ")?.1.chars().next()?;
                    Some(state != 'Z' && state != 'X')
                })
                .unwrap_or(false)
        })
    }

    /// Whether the leader has exited (and is reaped).
    pub fn exited(&mut self) -> bool {
        match self.child.as_mut().map(std::process::Child::try_wait) {
            None => true,
            Some(Ok(Some(_))) => {
                self.child = None;
                true
            }
            Some(_) => false,
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_distinct_reserved_and_not_the_system_servers() {
        let reserved = free_ports(9).unwrap();
        let others = free_ports(9).unwrap();
        assert!(reserved.ports.iter().all(|p| !others.ports.contains(p)));
        for p in &reserved.ports {
            let file = Path::new(RESERVED).join(p.to_string());
            let pid = std::fs::read_to_string(&file).unwrap();
            assert_eq!(pid, std::process::id().to_string());
        }
        let files: Vec<PathBuf> = reserved.files.clone();
        let ports = reserved.ports.clone();
        drop(reserved);
        assert!(files.iter().all(|f| !f.exists()), "released when dropped");
        let mut unique = ports.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), 9);
        assert!(ports.iter().all(|p| (20_000..32_000).contains(p)));
    }

    #[test]
    fn a_reservation_of_a_dead_run_is_taken_over() {
        std::fs::create_dir_all(RESERVED).unwrap();
        let (port, file) = (31_900..32_000)
            .map(|p: u16| (p, Path::new(RESERVED).join(p.to_string())))
            .find(|(_, f)| !f.exists())
            .expect("a port nobody has reserved");
        // A pid that cannot be running: above the kernel's pid_max.
        std::fs::write(&file, "4194305").unwrap();
        let taken = reserve(port).expect("a dead run's reservation");
        assert_eq!(
            std::fs::read_to_string(&taken).unwrap(),
            std::process::id().to_string()
        );
        assert!(reserve(port).is_none(), "a live run's reservation is kept");
        std::fs::remove_file(taken).unwrap();
    }

    #[test]
    fn kill_marked_kills_the_marked_process_only() {
        let marker = format!("tenure-ha-test-{:08x}", rand::random::<u32>());
        // A shell blocked in its builtin `read` forks nothing: a forked child not yet exec'd
        // would show the marked command line too, and be killed with it.
        let spawn = |arg: &str| {
            std::process::Command::new("sh")
                .args(["-c", "read -r line", arg])
                .stdin(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        };
        let mut marked = spawn(&marker);
        let mut other = spawn("unmarked");
        // Until it has exec'd, the child shows this test's command line.
        let cmdline = format!("/proc/{}/cmdline", marked.id());
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while !std::fs::read(&cmdline).is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
        {
            assert!(std::time::Instant::now() < until, "the child never exec'd");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(kill_marked(&marker), 1);
        let status = marked.wait().unwrap();
        assert!(!status.success());
        assert!(
            other.try_wait().unwrap().is_none(),
            "the unmarked one lives"
        );
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn a_group_runs_until_its_leader_exits_or_it_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        let mut exits = spawn_logged(
            std::process::Command::new("sh").args(["-c", "exit 3"]),
            &dir.path().join("exits.log"),
        )
        .unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(10);
        while exits.is_running() {
            assert!(std::time::Instant::now() < until, "sh never exited");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(exits.exited());
        let mut waits = spawn_logged(
            std::process::Command::new("sleep").arg("30"),
            &dir.path().join("waits.log"),
        )
        .unwrap();
        assert!(waits.is_running() && !waits.exited());
        waits.kill();
        assert!(!waits.is_running() && waits.exited());
    }

    #[tokio::test]
    async fn http_reads_the_status_and_body() {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0))
            .await
            .unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).await.unwrap();
            assert!(String::from_utf8_lossy(&buf[..n]).starts_with("POST /switchover HTTP/1.0"));
            s.write_all(b"HTTP/1.0 412 Precondition Failed\r\nX: y\r\n\r\nno candidate")
                .await
                .unwrap();
        });
        let answer = http(
            port,
            "POST",
            "/switchover",
            Some("{}"),
            Duration::from_secs(2),
        )
        .await;
        assert_eq!(answer, Ok((412, "no candidate".to_string())));
    }
}
