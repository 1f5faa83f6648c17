//! A private ZooKeeper on 127.0.0.1 (Debian's `zookeeperd` jar run as a standalone server with
//! its own config and data dir, on a free port), killed when dropped, and kazoo's Election and
//! Lock recipes run by `peers/zk_peer.py` (embedded, written to the run's directory).

use crate::procs::{mono_ns, Proc};
use crate::report::Throughput;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

/// The Python side: kazoo's recipes.
const PEER_SCRIPT: &str = include_str!("../peers/zk_peer.py");

/// The kazoo release the docs pin (`python3 -m pip install kazoo==…`).
pub(crate) const KAZOO_PIN: &str = "2.11.0";

/// How to start ZooKeeper and its clients.
pub(crate) struct Tools<'a> {
    pub java: &'a Path,
    /// `zookeeper.jar` (its manifest names the other jars).
    pub jar: &'a Path,
    pub python: &'a Path,
    /// 0: a free one.
    pub port: u16,
}

/// The running server. Dropping it kills ZooKeeper and removes its data dir.
pub(crate) struct ZooKeeper {
    proc: Option<Proc>,
    _data: tempfile::TempDir,
    /// ZooKeeper's version (`srvr`), and kazoo's.
    pub version: String,
    pub kazoo: String,
    pub client: Kazoo,
}

/// How to run `zk_peer.py` against the server.
#[derive(Clone, Debug)]
pub(crate) struct Kazoo {
    pub python: PathBuf,
    pub script: PathBuf,
    /// `127.0.0.1:PORT`, as kazoo's `hosts`.
    pub hosts: String,
    /// The session timeout every client gets (the server's min and max).
    pub session: Duration,
}

/// The server's `zoo.cfg`: standalone, on 127.0.0.1 only, no admin server, and every session
/// timeout equal to `session` (a tick of a tenth of it, so that ZooKeeper allows it).
pub(crate) fn config(data: &Path, port: u16, session: Duration) -> String {
    let ms = session.as_millis().max(20);
    format!(
        "tickTime={}\nminSessionTimeout={ms}\nmaxSessionTimeout={ms}\ndataDir={}\n\
         clientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n",
        (ms / 10).max(1),
        data.display()
    )
}

/// The version in an answer to `srvr` (`Zookeeper version: 3.8.0-…, built on …`); `None` until
/// the server serves requests.
pub(crate) fn srvr_version(answer: &str) -> Option<String> {
    let line = answer
        .lines()
        .find_map(|l| l.strip_prefix("Zookeeper version: "))?;
    let v = line.split([',', '-']).next()?.trim();
    (!v.is_empty()).then(|| v.to_string())
}

async fn srvr(hosts: &str) -> Result<String, String> {
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(hosts).await?;
        s.write_all(b"srvr").await?;
        let mut out = String::new();
        s.read_to_string(&mut out).await?;
        Ok::<_, std::io::Error>(out)
    };
    tokio::time::timeout(Duration::from_secs(2), ask)
        .await
        .map_err(|_| "no answer".to_string())?
        .map_err(|e| e.to_string())
}

fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

impl ZooKeeper {
    /// Checks kazoo, starts ZooKeeper with every session timeout `session`, and waits until it
    /// serves requests. `dir` receives the script and the server's log.
    pub(crate) async fn start(
        tools: &Tools<'_>,
        session: Duration,
        dir: &Path,
    ) -> Result<Self, String> {
        let script = dir.join("zk_peer.py");
        std::fs::write(&script, PEER_SCRIPT).map_err(|e| e.to_string())?;
        let kazoo = std::process::Command::new(tools.python)
            .arg(&script)
            .arg("version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .ok_or_else(|| {
                format!(
                    "no kazoo for {} (`python3 -m pip install kazoo=={KAZOO_PIN}`)",
                    tools.python.display()
                )
            })?;
        if !tools.jar.is_file() || !tools.java.is_file() {
            return Err(format!(
                "no {} or {} (`apt-get install zookeeperd`)",
                tools.jar.display(),
                tools.java.display()
            ));
        }
        let data = tempfile::tempdir().map_err(|e| e.to_string())?;
        let port = match tools.port {
            0 => free_port()?,
            p => p,
        };
        let cfg = data.path().join("zoo.cfg");
        std::fs::write(&cfg, config(&data.path().join("data"), port, session))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(tools.java);
        cmd.arg("-Xmx256m")
            .arg("-cp")
            .arg(tools.jar)
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&cfg);
        let log = dir.join("zookeeper.log");
        let proc = Proc::spawn(cmd, &log).map_err(|e| format!("{}: {e}", tools.java.display()))?;
        let mut zk = ZooKeeper {
            proc: Some(proc),
            _data: data,
            version: String::new(),
            kazoo,
            client: Kazoo {
                python: tools.python.to_path_buf(),
                script,
                hosts: format!("127.0.0.1:{port}"),
                session,
            },
        };
        for _ in 0..150 {
            if let Some(v) = srvr(&zk.client.hosts)
                .await
                .ok()
                .and_then(|a| srvr_version(&a))
            {
                zk.version = v;
                return Ok(zk);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "ZooKeeper did not serve on {} within 15 s (see {})",
            zk.client.hosts,
            log.display()
        ))
    }

    /// Kills ZooKeeper now.
    pub(crate) async fn stop(mut self) {
        if let Some(p) = self.proc.take() {
            p.finish(Duration::ZERO).await;
        }
    }

    /// `zk_peer.py locks` in `tasks` processes, each its own client on its own lock name, all
    /// measuring the same window of `run` after `warmup`.
    pub(crate) async fn lock_cycles(
        &self,
        tasks: usize,
        warmup: Duration,
        run: Duration,
        dir: &Path,
    ) -> Result<Throughput, String> {
        // Time for the interpreters to import kazoo and connect before the window opens.
        let lead = Duration::from_secs(3);
        let start_at = mono_ns() + i64::try_from(lead.as_nanos()).expect("3 s in ns fits in i64");
        let mut procs = Vec::new();
        let mut outs = Vec::new();
        for i in 0..tasks {
            let out = dir.join(format!("zk-locks-{tasks}-{i}.json"));
            let _ = std::fs::remove_file(&out);
            let mut c = self.client.peer("locks");
            c.arg("--name")
                .arg(crate::locks::lock_name(i))
                .arg("--start-at")
                .arg(start_at.to_string())
                .arg("--warmup")
                .arg(warmup.as_secs_f64().to_string())
                .arg("--run")
                .arg(run.as_secs_f64().to_string())
                .arg("--out")
                .arg(&out);
            procs.push(Proc::spawn(c, &dir.join("zk-locks.log")).map_err(|e| e.to_string())?);
            outs.push(out);
        }
        let deadline = tokio::time::Instant::now() + lead + warmup + run + Duration::from_secs(30);
        let mut parts = Vec::new();
        for (mut p, out) in procs.into_iter().zip(outs) {
            let status = tokio::time::timeout_at(deadline, p.child.wait()).await;
            if !matches!(status, Ok(Ok(s)) if s.success()) {
                return Err(format!(
                    "kazoo lock task failed or hung ({status:?}), see {}",
                    dir.join("zk-locks.log").display()
                ));
            }
            let text = std::fs::read_to_string(&out).map_err(|e| e.to_string())?;
            let part: Part = serde_json::from_str(&text).map_err(|e| e.to_string())?;
            if part.late_ms > 0.0 {
                eprintln!(
                    "  kazoo lock task started {:.0} ms late (its warm-up was that much shorter)",
                    part.late_ms
                );
            }
            parts.push(part);
        }
        Ok(Throughput::merge(
            tasks,
            run,
            parts
                .into_iter()
                .map(|p| (p.latencies_ms, p.errors, p.first_error)),
        ))
    }
}

impl Kazoo {
    /// `python3 zk_peer.py WHAT --hosts … --timeout …`.
    pub(crate) fn peer(&self, what: &str) -> Command {
        let mut c = Command::new(&self.python);
        c.arg(&self.script)
            .arg(what)
            .arg("--hosts")
            .arg(&self.hosts)
            .arg("--timeout")
            .arg(self.session.as_secs_f64().to_string());
        c
    }

    /// One candidate of kazoo's Election on `name`, running `cmd` while it leads.
    pub(crate) fn election_command(&self, name: &str, id: &str, cmd: &[String]) -> Command {
        let mut c = self.peer("election");
        c.arg("--path")
            .arg(format!("/tenure-bench/election/{name}"))
            .arg("--id")
            .arg(id)
            .arg("--")
            .args(cmd);
        c
    }
}

/// What one `zk_peer.py locks` task writes.
#[derive(Deserialize)]
struct Part {
    latencies_ms: Vec<f64>,
    errors: usize,
    first_error: Option<String>,
    #[serde(default)]
    late_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn srvr_answers() {
        let up = "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\n\
                  Latency min/avg/max: 0/0.0/0\nMode: standalone\n";
        assert_eq!(srvr_version(up).as_deref(), Some("3.8.0"));
        assert_eq!(
            srvr_version("Zookeeper version: 3.9.2, built on x\n").as_deref(),
            Some("3.9.2")
        );
        assert_eq!(
            srvr_version("This ZooKeeper instance is not currently serving requests\n"),
            None
        );
        assert_eq!(srvr_version(""), None);
    }

    #[test]
    fn config_sets_every_session_to_the_ttl() {
        let c = config(Path::new("/d"), 2181, Duration::from_secs(2));
        assert!(c.contains("tickTime=200\n"), "{c}");
        assert!(
            c.contains("minSessionTimeout=2000\nmaxSessionTimeout=2000\n"),
            "{c}"
        );
        assert!(c.contains("dataDir=/d\nclientPort=2181\nclientPortAddress=127.0.0.1\n"));
        assert!(c.contains("admin.enableServer=false"));
        let tiny = config(Path::new("/d"), 1, Duration::from_millis(5));
        assert!(
            tiny.contains("tickTime=2\nminSessionTimeout=20\n"),
            "{tiny}"
        );
    }
}
