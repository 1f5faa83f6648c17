//! One round of each fault against a running cluster. Every round records `fault_start` and
//! `fault_end` in the nemesis history, undoes its fault, and waits for a leader again.

use super::cluster::Cluster;
use crate::dbserver;
use crate::event::{self, Kind, Resource};
use crate::proxy;
use crate::scenario::Fault;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::Rng;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::time::sleep;

/// Per-scenario nemesis state that outlives one round.
pub struct Nemesis {
    pub rng: StdRng,
    /// The libfaketime offset file of the clock scenario.
    pub clock_file: Option<std::path::PathBuf>,
    clock_offset_s: i64,
    proxy_turn: usize,
    /// The faults injected, by name.
    pub injected: Vec<String>,
    /// Database sessions killed by the sessions fault.
    pub sessions_killed: u64,
}

/// The libfaketime preload of Debian's `faketime` package.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// The environment that puts a node's wall clock under the offset in `file`, re-read on every
/// call, with `CLOCK_MONOTONIC` left alone.
pub fn faketime_env(file: &Path) -> Vec<(String, String)> {
    vec![
        ("LD_PRELOAD".into(), LIBFAKETIME.into()),
        ("FAKETIME_TIMESTAMP_FILE".into(), file.display().to_string()),
        ("FAKETIME_NO_CACHE".into(), "1".into()),
        ("FAKETIME_DONT_FAKE_MONOTONIC".into(), "1".into()),
    ]
}

impl Nemesis {
    pub fn new(rng: StdRng, clock_file: Option<std::path::PathBuf>) -> Nemesis {
        Nemesis {
            rng,
            clock_file,
            clock_offset_s: 0,
            proxy_turn: 0,
            injected: Vec::new(),
            sessions_killed: 0,
        }
    }

    fn start(&mut self, c: &Cluster, fault: &str, target: &str) {
        self.injected.push(fault.to_string());
        c.nemesis.record(Kind::FaultStart {
            fault: fault.into(),
            target: target.into(),
        });
    }

    fn end(c: &Cluster, fault: &str, target: &str) {
        c.nemesis.record(Kind::FaultEnd {
            fault: fault.into(),
            target: target.into(),
        });
    }

    /// One round of `fault`.
    pub async fn round(&mut self, c: &mut Cluster, fault: Fault) -> Result<(), String> {
        let ttl = c.settings.ttl;
        if fault == Fault::KillAny {
            return self.kill_any(c).await;
        }
        let recover = ttl * 4;
        let Some(leader) = c.wait_leader(recover).await else {
            return Err("no leader before the round".into());
        };
        let id = c.nodes[leader].id.clone();
        let pid = c.nodes[leader].pid().ok_or("the leader has no pid")?;
        // A short random delay, so that faults land at different points of the renew cycle.
        sleep(Duration::from_millis(
            self.rng.gen_range(0..ttl.as_millis() as u64 / 4),
        ))
        .await;
        match fault {
            Fault::Kill => {
                self.start(c, "kill", &id);
                c.kill(leader).await;
                Self::end(c, "kill", &id);
                c.wait_leader(recover).await;
                c.spawn(c.nodes[leader].slot)?;
            }
            Fault::Pause => {
                wait_for_work(&c.nodes[leader].events, ttl).await;
                self.start(c, "pause", &id);
                signal(pid, Signal::SIGSTOP)?;
                sleep(ttl * 2).await;
                signal(pid, Signal::SIGCONT)?;
                Self::end(c, "pause", &id);
            }
            Fault::Starve => {
                self.start(c, "starve", &id);
                let hogs = starve(pid, &c.settings.exe, ttl * 2)?;
                sleep(ttl * 2).await;
                unstarve(pid, hogs).await?;
                Self::end(c, "starve", &id);
            }
            Fault::Proxy => {
                let faults = [
                    ("latency", proxy::Fault::Latency(ttl / 4)),
                    ("blackhole", proxy::Fault::Blackhole),
                    ("reset", proxy::Fault::Reset),
                    ("cut_after_request", proxy::Fault::CutAfterRequest),
                    ("one_way_loss", proxy::Fault::OneWayLoss),
                ];
                if self.proxy_turn == 0 {
                    // A seeded order, the same for every backend of one seed.
                    self.proxy_turn = self.rng.gen_range(0..faults.len()) + faults.len();
                }
                let (name, f) = faults[self.proxy_turn % faults.len()];
                self.proxy_turn += 1;
                let proxy = &c.proxies[c.nodes[leader].slot];
                self.start(c, name, &id);
                proxy.set(f);
                sleep(ttl + ttl / 4).await;
                proxy.set(proxy::Fault::Pass);
                Self::end(c, name, &id);
            }
            Fault::Sessions => {
                self.start(c, "kill_sessions", "*");
                let until = tokio::time::Instant::now() + ttl * 2;
                let mut killed = 0;
                while tokio::time::Instant::now() < until {
                    killed += dbserver::kill_sessions(c.kind, &c.url).await?;
                    sleep(Duration::from_millis(200)).await;
                }
                Self::end(c, "kill_sessions", "*");
                self.sessions_killed += killed;
                if killed == 0 {
                    return Err("no session was killed".into());
                }
            }
            Fault::Restart => {
                let kind = c.kind;
                let _restore = dbserver::Restore(kind);
                self.start(c, "restart", "*");
                tokio::task::spawn_blocking(move || dbserver::stop(kind))
                    .await
                    .map_err(|e| e.to_string())??;
                sleep(ttl).await;
                tokio::task::spawn_blocking(move || dbserver::ensure_up(kind))
                    .await
                    .map_err(|e| e.to_string())??;
                Self::end(c, "restart", "*");
            }
            Fault::Clock => {
                let file = self.clock_file.clone().ok_or("no clock file")?;
                let hours = self.rng.gen_range(1..=6i64);
                let jump = if self.clock_offset_s > 0 {
                    -hours
                } else {
                    hours
                } * 3600;
                self.clock_offset_s += jump;
                let name = format!("clock_jump_{jump:+}s");
                self.start(c, &name, "*");
                std::fs::write(&file, format!("{:+}\n", self.clock_offset_s))
                    .map_err(|e| e.to_string())?;
                sleep(ttl * 2).await;
                Self::end(c, &name, "*");
            }
            Fault::KillAny => unreachable!("handled above"),
            Fault::StopInTransaction => {
                std::fs::write(c.stop_file(&id), b"").map_err(|e| e.to_string())?;
                if !wait_stopped(pid, ttl * 2).await {
                    let _ = std::fs::remove_file(c.stop_file(&id));
                    return Err(format!("{id} did not stop inside a transaction"));
                }
                self.start(c, "stop_in_transaction", &id);
                sleep(ttl * 2).await;
                signal(pid, Signal::SIGCONT)?;
                Self::end(c, "stop_in_transaction", &id);
            }
        }
        if c.wait_leader(recover * 2).await.is_none() {
            return Err(format!(
                "no leader within {:?} after {fault:?}",
                recover * 2
            ));
        }
        Ok(())
    }
}

impl Nemesis {
    /// The lock workload has no one leader: let it churn for one to two ttls, then SIGKILL a
    /// random live node and start its slot again at once (with the same holder id where the
    /// scenario shares one), so that its locks are taken only after they expire.
    async fn kill_any(&mut self, c: &mut Cluster) -> Result<(), String> {
        let ttl = c.settings.ttl;
        sleep(ttl + ttl.mul_f64(self.rng.gen_range(0.0..1.0))).await;
        let live: Vec<usize> = (0..c.nodes.len()).filter(|&i| c.nodes[i].alive).collect();
        if live.is_empty() {
            return Err("no live node".into());
        }
        let i = live[self.rng.gen_range(0..live.len())];
        let id = c.nodes[i].id.clone();
        self.start(c, "kill", &id);
        c.kill(i).await;
        Self::end(c, "kill", &id);
        c.spawn(c.nodes[i].slot)
    }
}

fn signal(pid: Pid, signal: Signal) -> Result<(), String> {
    kill(pid, signal).map_err(|e| format!("{signal} to {pid}: {e}"))
}

/// Waits (up to a ttl) until the node's last event on each resource is an issued operation:
/// both loops are then inside their "work", so a pause now makes both writes stale.
async fn wait_for_work(events: &Path, ttl: Duration) {
    let until = tokio::time::Instant::now() + ttl;
    while tokio::time::Instant::now() < until {
        let history = event::read(events).unwrap_or_default();
        let working = |resource: Resource| {
            history
                .iter()
                .rev()
                .find_map(|e| match &e.kind {
                    Kind::OpIssued { resource: r, .. } if *r == resource => Some(true),
                    Kind::OpAccepted { resource: r, .. } | Kind::OpRejected { resource: r, .. }
                        if *r == resource =>
                    {
                        Some(false)
                    }
                    _ => None,
                })
                .unwrap_or(false)
        };
        if working(Resource::Fenced) && working(Resource::Unfenced) {
            return;
        }
        sleep(Duration::from_millis(5)).await;
    }
}

/// Whether the process is in the stopped state (`T`), polled up to `timeout`.
async fn wait_stopped(pid: Pid, timeout: Duration) -> bool {
    let until = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < until {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // The state follows the parenthesized command name.
        if stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('T'))
        {
            return true;
        }
        sleep(Duration::from_millis(10)).await;
    }
    false
}

fn threads(pid: Pid) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let status = std::process::Command::new(program)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("{program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} {}: {status}", args.join(" ")))
    }
}

/// Pins every thread of `pid` to CPU 0 at nice 19 and starts four busy loops on CPU 0.
fn starve(
    pid: Pid,
    exe: &Path,
    for_how_long: Duration,
) -> Result<Vec<std::process::Child>, String> {
    run("taskset", &["-a", "-p", "0x1", &pid.to_string()])?;
    for tid in threads(pid) {
        let _ = run("renice", &["-n", "19", "-p", &tid]);
    }
    let exe = exe.display().to_string();
    let ms = (for_how_long.as_millis() + 1000).to_string();
    (0..4)
        .map(|_| {
            std::process::Command::new("taskset")
                .args(["-c", "0", &exe, "hog", "--ms", &ms])
                .spawn()
                .map_err(|e| format!("taskset: {e}"))
        })
        .collect()
}

/// Ends the busy loops and gives `pid` every CPU and nice 0 again.
async fn unstarve(pid: Pid, hogs: Vec<std::process::Child>) -> Result<(), String> {
    for mut hog in hogs {
        let _ = hog.kill();
        let _ = hog.wait();
    }
    let all = format!("{:#x}", (1u64 << num_cpus()) - 1);
    run("taskset", &["-a", "-p", &all, &pid.to_string()])?;
    for tid in threads(pid) {
        let _ = run("renice", &["-n", "0", "-p", &tid]);
    }
    Ok(())
}

fn num_cpus() -> u32 {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get() as u32)
        .min(63)
}
