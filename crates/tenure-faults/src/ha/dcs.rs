//! The DCS a Patroni cluster of the `ha` profile keeps its leader key in: etcd (the scenarios
//! where tenure runs *on* Patroni's database), or `tenure serve` itself, its Consul API on a
//! SQLite file of its own beside the cluster (the scenarios where Patroni runs *on* tenure).
//! Each member's Patroni reaches it through a fault proxy of its own (a partition cuts it).

use super::cluster::{self, Stage};
use super::procs::{self, http, Group};
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Which DCS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DcsKind {
    /// One etcd (Patroni's `etcd3`).
    Etcd,
    /// `tenure serve`'s Consul API (Patroni's `consul`), on SQLite: with its defaults (a new
    /// user's setup: Patroni's 5 s session at `ttl: 10` is refused, and Patroni adjusts to the
    /// 10 s minimum `/v1/agent/self` tells), or with `--session-ttl-min` this many seconds.
    TenureConsul { session_ttl_min: Option<u64> },
    /// `tenure serve`'s etcd API (Patroni's `etcd3`, which speaks etcd's JSON gateway), on
    /// SQLite, with its defaults.
    TenureEtcd,
}

/// The running DCS.
pub struct Dcs {
    pub kind: DcsKind,
    pub port: u16,
    /// etcd's peer port (unused by tenure).
    peer_port: u16,
    dir: PathBuf,
    marker: String,
    process: Option<Group>,
}

/// The `tenure` command: `TENURE_BIN`, or the one cargo built beside this program.
pub fn tenure_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os("TENURE_BIN") {
        return Some(PathBuf::from(bin));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir.join("tenure"), dir.parent()?.join("tenure")]
        .into_iter()
        .find(|p| p.is_file())
}

/// What a DCS of `kind` needs and this machine lacks.
pub fn missing(kind: DcsKind) -> Vec<String> {
    match kind {
        DcsKind::Etcd => cluster::missing_tools(&[("etcd", "etcd-server")]),
        DcsKind::TenureEtcd => {
            let mut missing = Vec::new();
            if tenure_binary().is_none() {
                missing.push(
                    "the tenure command beside tenure-faults (cargo build -p tenure-cli) or \
                     TENURE_BIN"
                        .to_string(),
                );
            }
            missing
        }
        DcsKind::TenureConsul { .. } => {
            let mut missing = Vec::new();
            if tenure_binary().is_none() {
                missing.push(
                    "the tenure command beside tenure-faults (cargo build -p tenure-cli) or \
                     TENURE_BIN"
                        .to_string(),
                );
            }
            // Patroni's Consul DCS imports python-consul (Debian's python3-consul).
            let consul = Command::new("/usr/bin/python3")
                .args(["-c", "import consul"])
                .output()
                .is_ok_and(|o| o.status.success());
            if !consul {
                missing.push("python3-consul (Debian), which Patroni's consul DCS imports".into());
            }
            missing
        }
    }
}

impl Dcs {
    /// Starts the DCS in `stage` on `port` (and `peer_port` for etcd), and waits until it
    /// answers.
    pub async fn start(
        kind: DcsKind,
        stage: &Stage,
        port: u16,
        peer_port: u16,
        timeout: Duration,
    ) -> Result<Dcs, String> {
        let mut dcs = Dcs {
            kind,
            port,
            peer_port,
            dir: stage.dir().to_path_buf(),
            marker: stage.marker().to_string(),
            process: None,
        };
        dcs.spawn()?;
        dcs.wait_up(timeout).await?;
        Ok(dcs)
    }

    fn spawn(&mut self) -> Result<(), String> {
        let (mut command, log) = match self.kind {
            DcsKind::Etcd => {
                let (port, peer, marker) = (self.port, self.peer_port, &self.marker);
                let mut c = Command::new("etcd");
                c.arg("--name")
                    .arg(marker)
                    .arg("--data-dir")
                    .arg(self.dir.join("etcd"))
                    .arg(format!("--listen-client-urls=http://127.0.0.1:{port}"))
                    .arg(format!("--advertise-client-urls=http://127.0.0.1:{port}"))
                    .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer}"))
                    .arg(format!(
                        "--initial-advertise-peer-urls=http://127.0.0.1:{peer}"
                    ))
                    .arg(format!(
                        "--initial-cluster={marker}=http://127.0.0.1:{peer}"
                    ));
                (c, "etcd.log")
            }
            DcsKind::TenureConsul { session_ttl_min } => {
                let bin = tenure_binary().ok_or("no tenure binary")?;
                let mut c = Command::new(bin);
                c.arg("serve")
                    .arg("--listen")
                    .arg(format!("127.0.0.1:{}", self.port))
                    .arg("--database-url")
                    .arg(format!("sqlite://{}", self.dir.join("dcs.db").display()))
                    .env("RUST_LOG", "info");
                if let Some(min) = session_ttl_min {
                    c.arg("--session-ttl-min").arg(format!("{min}s"));
                }
                (c, "tenure-serve.log")
            }
            DcsKind::TenureEtcd => {
                // The etcd API on the DCS's port; tenure's own HTTP API (and /metrics) on the
                // port etcd would peer on.
                let bin = tenure_binary().ok_or("no tenure binary")?;
                let mut c = Command::new(bin);
                c.arg("serve")
                    .arg("--listen")
                    .arg(format!("127.0.0.1:{}", self.peer_port))
                    .arg("--etcd-listen")
                    .arg(format!("127.0.0.1:{}", self.port))
                    .arg("--database-url")
                    .arg(format!("sqlite://{}", self.dir.join("dcs.db").display()))
                    .env("RUST_LOG", "info");
                (c, "tenure-serve.log")
            }
        };
        let log = self.log_path(log);
        let group = procs::spawn_logged(command.current_dir(&self.dir), &log)?;
        self.process = Some(group);
        Ok(())
    }

    fn log_path(&self, name: &str) -> PathBuf {
        // A restart appends a new log beside the first.
        let mut path = self.dir.join(name);
        let mut n = 1;
        while path.exists() {
            n += 1;
            path = self.dir.join(format!("{n}-{name}"));
        }
        path
    }

    /// Waits until it answers its health check.
    pub async fn wait_up(&mut self, timeout: Duration) -> Result<(), String> {
        let port = self.port;
        let what = format!("the DCS ({:?}) to answer on 127.0.0.1:{port}", self.kind);
        let path = match self.kind {
            DcsKind::Etcd => "/health",
            DcsKind::TenureConsul { .. } => "/v1/agent/self",
            DcsKind::TenureEtcd => "/version",
        };
        let process = &mut self.process;
        cluster::wait_until(&what, timeout, Duration::from_millis(100), || {
            let exited = process.as_mut().is_none_or(Group::exited);
            async move {
                if exited {
                    return Err(cluster::Wait::Never("the DCS exited".into()));
                }
                match http(port, "GET", path, None, Duration::from_secs(2)).await? {
                    (200, _) => Ok(()),
                    (code, body) => Err(format!("{code} {body:.100}").into()),
                }
            }
        })
        .await
    }

    /// Its section of a member's `patroni.yml`, reaching it through `proxy`.
    pub fn member_config(&self, proxy: SocketAddr) -> (&'static str, Value) {
        let host = format!("{}:{}", proxy.ip(), proxy.port());
        match self.kind {
            // `use_proxies`: only the given address (no discovery of the advertised one), so
            // that the proxy can partition the member from it.
            DcsKind::Etcd | DcsKind::TenureEtcd => {
                ("etcd3", json!({"hosts": host, "use_proxies": true}))
            }
            DcsKind::TenureConsul { .. } => {
                ("consul", json!({"host": host, "register_service": false}))
            }
        }
    }

    /// SIGKILLs it (its clients' requests fail until [`restart`](Dcs::restart)).
    pub fn kill(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }

    /// Starts it again on the same port and data, and waits until it answers.
    pub async fn restart(&mut self, timeout: Duration) -> Result<(), String> {
        self.kill();
        self.spawn()?;
        self.wait_up(timeout).await
    }

    /// The requests tenure serve's DCS API has answered so far (`/metrics`:
    /// `tenure_consul_requests_total`, or `tenure_etcd_calls_total`, summed over its labels).
    pub async fn requests(&self) -> Result<f64, String> {
        let (port, metric) = match self.kind {
            DcsKind::TenureEtcd => (self.peer_port, "tenure_etcd_calls_total"),
            _ => (self.port, "tenure_consul_requests_total"),
        };
        let (code, body) = http(port, "GET", "/metrics", None, Duration::from_secs(5)).await?;
        if code != 200 {
            return Err(format!("/metrics: {code} {body:.100}"));
        }
        Ok(sum_of(&body, metric))
    }

    /// Where its data and logs are.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

#[cfg(test)]
impl Dcs {
    /// A DCS that was never started (for the configuration tests).
    pub(crate) fn unstarted(kind: DcsKind, port: u16) -> Dcs {
        Dcs {
            kind,
            port,
            peer_port: 0,
            dir: PathBuf::from("/nonexistent"),
            marker: "m".into(),
            process: None,
        }
    }
}

impl Drop for Dcs {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The sum of every sample of `metric` in a Prometheus text exposition.
fn sum_of(text: &str, metric: &str) -> f64 {
    text.lines()
        .filter(|l| {
            l.strip_prefix(metric)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_a_counter_over_its_labels() {
        let text = "# HELP tenure_consul_requests_total x\n\
                    # TYPE tenure_consul_requests_total counter\n\
                    tenure_consul_requests_total{method=\"GET\",route=\"/v1/kv/{*key}\",status=\"200\"} 12\n\
                    tenure_consul_requests_total{method=\"PUT\",route=\"/v1/session/renew/{id}\",status=\"200\"} 3\n\
                    tenure_consul_requests_total_other 100\n";
        assert_eq!(sum_of(text, "tenure_consul_requests_total"), 15.0);
    }

    #[test]
    fn a_tenure_dcs_is_patronis_consul() {
        let dcs = Dcs::unstarted(
            DcsKind::TenureConsul {
                session_ttl_min: None,
            },
            1,
        );
        let (key, config) = dcs.member_config(SocketAddr::from(([127, 0, 0, 1], 18500)));
        assert_eq!(key, "consul");
        assert_eq!(config["host"], "127.0.0.1:18500");
        assert_eq!(config["register_service"], false);
    }
}
