//! The clients: each runs `etcdctl --endpoints … lock --ttl T NAME tenure-faults etcd-child …`
//! again and again until told to stop, each run a holder of its own (`c<client>-<run>`), in a
//! process group of its own (etcdctl and its command: what the nemesis kills or pauses).

use super::child::ChildConfig;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;

/// What every client runs.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// The `tenure-faults` executable (its `etcd-child`).
    pub exe: PathBuf,
    /// The lock's name.
    pub name: String,
    /// The lock session's ttl (`etcdctl lock --ttl`, whole seconds).
    pub ttl_s: u64,
    /// Every client's command, but for its holder id and client number.
    pub child: ChildConfig,
}

/// What the clients have done so far, and the etcdctl each runs now.
#[derive(Debug, Default)]
pub struct Seen {
    /// The process group (etcdctl's pid) each client runs now, if any.
    pub running: Vec<Option<i32>>,
    /// Runs that exited 0 (the lock taken, the command done, the lock released).
    pub completed: usize,
    /// Runs that exited otherwise (killed, refused by the fence, a connection lost, …).
    pub failed: usize,
    /// The last failure's log line, for the notes.
    pub last_failure: Option<String>,
}

/// The running clients.
pub struct Clients {
    pub seen: Arc<Mutex<Seen>>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Clients {
    /// Starts `n` clients; client `i` is given the endpoints `endpoints(i)`.
    pub fn start(config: &ClientConfig, n: usize, endpoints: impl Fn(usize) -> String) -> Clients {
        let seen = Arc::new(Mutex::new(Seen {
            running: vec![None; n],
            ..Seen::default()
        }));
        let (stop, stopped) = watch::channel(false);
        let tasks = (0..n)
            .map(|i| {
                let (config, seen, stopped) = (config.clone(), seen.clone(), stopped.clone());
                tokio::spawn(client(i, endpoints(i), config, seen, stopped))
            })
            .collect();
        Clients { seen, stop, tasks }
    }

    /// The process group client `i` runs now.
    pub fn running(&self, i: usize) -> Option<i32> {
        self.seen.lock().ok()?.running.get(i).copied().flatten()
    }

    /// Lets every run in progress end (within `grace`; then SIGKILLs its group) and starts no
    /// other.
    pub async fn stop(self, grace: Duration) -> Arc<Mutex<Seen>> {
        let _ = self.stop.send(true);
        let all = futures_join(self.tasks);
        if tokio::time::timeout(grace, all).await.is_err() {
            if let Ok(seen) = self.seen.lock() {
                for pgid in seen.running.iter().flatten() {
                    kill_group(*pgid, nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
        self.seen
    }
}

async fn futures_join(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for t in tasks {
        let _ = t.await;
    }
}

/// Sends `signal` to the process group `pgid`.
pub fn kill_group(pgid: i32, signal: nix::sys::signal::Signal) {
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(-pgid), signal);
}

/// The etcdctl command of one run.
fn command(
    config: &ClientConfig,
    endpoints: &str,
    holder: &str,
    i: usize,
) -> tokio::process::Command {
    let c = &config.child;
    let mut cmd = tokio::process::Command::new("etcdctl");
    cmd.arg(format!("--endpoints={endpoints}"))
        .arg("--dial-timeout=2s")
        .arg("lock")
        .arg(format!("--ttl={}", config.ttl_s))
        .arg(&config.name)
        .arg("--")
        .arg(&config.exe)
        .arg("etcd-child")
        .arg("--url")
        .arg(&c.url)
        .arg("--table")
        .arg(&c.table)
        .arg("--holder")
        .arg(holder)
        .arg("--client")
        .arg(i.to_string())
        .arg("--work-ms")
        .arg(c.work.as_millis().to_string())
        .arg("--dir")
        .arg(&c.dir);
    if let Some(fence) = &c.fence_sql {
        cmd.arg("--fence-sql").arg(fence);
    }
    cmd.env("ETCDCTL_API", "3")
        .stdin(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

async fn client(
    i: usize,
    endpoints: String,
    config: ClientConfig,
    seen: Arc<Mutex<Seen>>,
    mut stopped: watch::Receiver<bool>,
) {
    let log = config.child.dir.join(format!("client-{i}.log"));
    let mut run = 0;
    while !*stopped.borrow() {
        run += 1;
        let holder = format!("c{i}-{run}");
        // A killed run's command may have left its mark.
        let _ = std::fs::remove_file(config.child.dir.join(format!("working-{i}")));
        let mut cmd = command(&config, &endpoints, &holder, i);
        if let Some((out, err)) = log_files(&log) {
            cmd.stdout(out).stderr(err);
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                note_failure(&seen, format!("{holder}: etcdctl: {e}"));
                let _ = tokio::time::timeout(Duration::from_secs(1), stopped.changed()).await;
                continue;
            }
        };
        let pgid = child.id().and_then(|p| i32::try_from(p).ok());
        if let Ok(mut s) = seen.lock() {
            s.running[i] = pgid;
        }
        let status = child.wait().await;
        let ok = matches!(&status, Ok(st) if st.success());
        if let Ok(mut s) = seen.lock() {
            s.running[i] = None;
            if ok {
                s.completed += 1;
            } else {
                s.failed += 1;
                s.last_failure = Some(format!("{holder}: {status:?} (client-{i}.log)"));
            }
        }
        if !ok {
            // Not a hot loop against a server that refuses every run.
            let _ = tokio::time::timeout(Duration::from_millis(200), stopped.changed()).await;
        }
    }
}

fn note_failure(seen: &Arc<Mutex<Seen>>, what: String) {
    if let Ok(mut s) = seen.lock() {
        s.failed += 1;
        s.last_failure = Some(what);
    }
}

/// The client's log, appended to by every run (stdout and stderr).
fn log_files(log: &Path) -> Option<(std::fs::File, std::fs::File)> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .ok()?;
    let err = out.try_clone().ok()?;
    Some((out, err))
}
