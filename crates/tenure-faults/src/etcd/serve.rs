//! The `tenure serve --etcd-listen` processes the clients talk to: one or two on the scenario's
//! database, each on reserved loopback ports (its etcd API, and `--listen` for its own), each
//! started, SIGKILLed and started again as the nemesis asks.

use crate::ha::cluster::{self, Wait};
use crate::ha::procs::{self, http, Group, Ports};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// One `tenure serve`.
pub struct Serve {
    pub index: usize,
    /// Its etcd API's port (the clients' endpoint).
    pub etcd_port: u16,
    /// Its own HTTP API's port (`--listen`).
    listen_port: u16,
    bin: PathBuf,
    url: String,
    dir: PathBuf,
    process: Option<Group>,
    starts: u32,
}

/// The servers of one scenario and the ports they hold.
pub struct Serves {
    pub serves: Vec<Serve>,
    _ports: Ports,
}

impl Serves {
    /// Starts `n` servers on `url`, logging into `dir`, and waits until each answers.
    pub async fn start(bin: &Path, url: &str, n: usize, dir: &Path) -> Result<Serves, String> {
        let ports = procs::free_ports(2 * n).map_err(|e| e.to_string())?;
        let mut serves = Vec::new();
        for index in 0..n {
            let mut serve = Serve {
                index,
                etcd_port: ports.ports[2 * index],
                listen_port: ports.ports[2 * index + 1],
                bin: bin.to_path_buf(),
                url: url.to_string(),
                dir: dir.to_path_buf(),
                process: None,
                starts: 0,
            };
            serve.start(Duration::from_secs(60)).await?;
            serves.push(serve);
        }
        Ok(Serves {
            serves,
            _ports: ports,
        })
    }

    /// Every server's endpoint, `first` first (etcdctl's `--endpoints`).
    pub fn endpoints(&self, first: usize) -> String {
        let n = self.serves.len();
        (0..n)
            .map(|i| format!("127.0.0.1:{}", self.serves[(first + i) % n].etcd_port))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Serve {
    /// Starts it (again) and waits until its etcd API answers `/version`.
    pub async fn start(&mut self, timeout: Duration) -> Result<(), String> {
        self.kill();
        self.starts += 1;
        let log = self
            .dir
            .join(format!("serve-{}-{}.log", self.index, self.starts));
        let mut command = Command::new(&self.bin);
        command
            .arg("serve")
            .arg("--database-url")
            .arg(&self.url)
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.listen_port))
            .arg("--etcd-listen")
            .arg(format!("127.0.0.1:{}", self.etcd_port))
            .env("RUST_LOG", "info");
        self.process = Some(procs::spawn_logged(command.current_dir(&self.dir), &log)?);
        let (port, process) = (self.etcd_port, &mut self.process);
        let what = format!("tenure serve {} to answer on 127.0.0.1:{port}", self.index);
        cluster::wait_until(&what, timeout, Duration::from_millis(100), || {
            let exited = process.as_mut().is_none_or(Group::exited);
            let log = log.clone();
            async move {
                if exited {
                    return Err(Wait::Never(format!(
                        "tenure serve exited: {}",
                        procs::log_tail(&log, 5)
                    )));
                }
                match http(port, "GET", "/version", None, Duration::from_secs(2)).await? {
                    (200, _) => Ok(()),
                    (code, body) => Err(format!("{code} {body:.100}").into()),
                }
            }
        })
        .await
    }

    /// SIGKILLs it (and reaps it); its clients' connections break.
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }
}
