//! A private MariaDB Galera cluster: three `mariadbd` (or one, a standalone server as far as its
//! clients can tell) with `wsrep_on` (Debian's `galera-4`),
//! each with its own ports and data directory under a temporary directory, and HAProxy sending
//! every connection to one node, the first that passes its check (`g1`; `g2` and `g3` are
//! backups, used only when `g1` is down), as Galera users are told to do for lock-style
//! workloads. Everything listens on 127.0.0.1, on free ports between 20000 and 32000.
//!
//! HAProxy's check is the usual `clustercheck`: an HTTP answer per node, 200 only while the
//! node is `Synced` in the primary component (served by a task of this process), so that a
//! node cut off from the others stops receiving clients.
//!
//! The first node is initialized with `mariadb-install-db` and bootstraps the cluster
//! (`--wsrep-new-cluster`); the others join with an rsync state transfer. `mariadbd` runs as
//! the user `mysql` (the rsync daemon of the state transfer drops root's rights).
//!
//! Teardown ([`Drop`]) kills the nodes, then the [`Stage`] kills HAProxy and every process
//! whose command line contains the cluster's marker, its temporary directory's name (the
//! state-transfer scripts and rsync), and keeps the logs.

use super::cluster::{self, proxy_to, Server, Stage};
use super::procs::{self, Group};
use crate::proxy::Proxy;
use nix::unistd::User;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tenure::BackendKind;

const PROVIDER: &str = "/usr/lib/galera/libgalera_smm.so";

/// The tools a Galera cluster needs, and where they are missing, why.
pub fn missing() -> Vec<String> {
    let mut missing = cluster::missing_tools(&[
        ("mariadbd", "mariadb-server"),
        ("mariadb-install-db", "mariadb-server"),
        ("wsrep_sst_rsync", "mariadb-server"),
        ("rsync", "rsync"),
        ("haproxy", "haproxy"),
        (PROVIDER, "galera-4"),
    ]);
    missing.extend(cluster::missing_user("mysql", "", "mariadbd"));
    missing
}

pub struct Node {
    pub name: String,
    pub port: u16,
    /// HAProxy → this proxy → the node.
    pub client_proxy: Proxy,
    /// The node's health check (HTTP, for HAProxy).
    pub check: Option<Check>,
    pub(super) dir: PathBuf,
    pub(super) child: Option<Group>,
    pub alive: bool,
}

impl Node {
    pub(super) fn cnf(&self) -> PathBuf {
        self.dir.join("my.cnf")
    }

    /// SIGKILLs the node's `mariadbd`, and reaps it.
    pub(super) fn kill(&mut self) {
        if let Some(mariadbd) = self.child.as_mut() {
            mariadbd.kill();
        }
        self.alive = false;
    }
}

pub struct Galera {
    /// The nodes' data and HAProxy; torn down after the nodes.
    stage: Stage,
    pub haproxy_port: u16,
    pub nodes: Vec<Node>,
}

pub(super) fn chown_tree(path: &Path, uid: u32, gid: u32) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if path.is_dir() {
        for e in std::fs::read_dir(path).map_err(|e| e.to_string())? {
            chown_tree(&e.map_err(|e| e.to_string())?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// The stage of MariaDB servers run as the user `mysql` (who must be able to enter its
/// directory), or what this machine lacks for them (`missing`).
pub(super) fn mariadb_stage(
    prefix: &str,
    missing: Vec<String>,
    logs: &Path,
) -> Result<(Stage, User), String> {
    if !missing.is_empty() {
        return Err(format!("missing: {}", missing.join(", ")));
    }
    let mysql = User::from_name("mysql")
        .map_err(|e| e.to_string())?
        .ok_or("no user mysql")?;
    let stage = Stage::new(prefix, logs)?;
    std::fs::set_permissions(
        stage.dir(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .map_err(|e| e.to_string())?;
    Ok((stage, mysql))
}

impl Galera {
    /// Builds a cluster of `n` nodes and waits until all are synced and a write through
    /// HAProxy commits.
    pub async fn start(n: usize, timeout: Duration, logs: &Path) -> Result<Galera, String> {
        let (mut stage, mysql) = mariadb_stage("tenure-galera-", missing(), logs)?;
        // HAProxy, and per node: client, group communication, IST, SST.
        let ports = stage.reserve_ports(1 + 4 * n)?;
        let mut cluster = Galera {
            stage,
            haproxy_port: ports[0],
            nodes: Vec::new(),
        };
        let root = cluster.dir().to_path_buf();
        let gcomm: Vec<String> = (0..n)
            .map(|i| format!("127.0.0.1:{}", ports[2 + 4 * i]))
            .collect();
        for i in 0..n {
            let [port, group, ist, sst] = [
                ports[1 + 4 * i],
                ports[2 + 4 * i],
                ports[3 + 4 * i],
                ports[4 + 4 * i],
            ];
            let node_dir = root.join(format!("g{}", i + 1));
            std::fs::create_dir_all(node_dir.join("data")).map_err(|e| e.to_string())?;
            let cnf = format!(
                "[mariadbd]\ndatadir={d}/data\nsocket={d}/sock\npid-file={d}/pid\nport={port}\n\
                 bind-address=127.0.0.1\nuser=mysql\nlog-error={d}/error.log\nskip-name-resolve\n\
                 innodb_buffer_pool_size=32M\nbinlog_format=ROW\ndefault_storage_engine=InnoDB\n\
                 innodb_autoinc_lock_mode=2\nwsrep_on=ON\nwsrep_provider={PROVIDER}\n\
                 wsrep_cluster_name=tenure-galera\nwsrep_cluster_address=gcomm://{all}\n\
                 wsrep_node_address=127.0.0.1:{group}\nwsrep_node_name=g{k}\n\
                 wsrep_provider_options=\"gmcast.listen_addr=tcp://127.0.0.1:{group};\
                 ist.recv_addr=127.0.0.1:{ist};base_port={group}\"\n\
                 wsrep_sst_method=rsync\nwsrep_sst_receive_address=127.0.0.1:{sst}\n",
                d = node_dir.display(),
                all = gcomm.join(","),
                k = i + 1,
            );
            std::fs::write(node_dir.join("my.cnf"), cnf).map_err(|e| e.to_string())?;
            chown_tree(&node_dir, mysql.uid.as_raw(), mysql.gid.as_raw())?;
            cluster.nodes.push(Node {
                name: format!("g{}", i + 1),
                port,
                client_proxy: proxy_to(port).await?,
                check: Some(
                    Check::start(
                        format!("mysql://root@127.0.0.1:{port}/mysql"),
                        Health::Synced,
                    )
                    .await
                    .map_err(|e| e.to_string())?,
                ),
                dir: node_dir,
                child: None,
                alive: true,
            });
        }
        let first = &cluster.nodes[0];
        cluster::install_mariadb(&first.name, &first.cnf(), &first.dir.join("error.log"))?;
        cluster.start_node(0, true)?;
        let until = tokio::time::Instant::now() + timeout;
        cluster.wait_synced(0, until).await?;
        for i in 1..n {
            cluster.start_node(i, false)?;
            cluster.wait_synced(i, until).await?;
        }
        let config = haproxy_config(cluster.haproxy_port, &cluster.nodes);
        cluster.stage.start_haproxy(&config)?;
        let url = cluster.url("mysql");
        cluster::wait_until(
            "a write through HAProxy",
            until.saturating_duration_since(tokio::time::Instant::now()),
            Duration::from_millis(250),
            || async {
                let probe = cluster::write_probe(BackendKind::MySql, &url, Duration::from_secs(2));
                Ok(probe.await?)
            },
        )
        .await?;
        Ok(cluster)
    }

    fn start_node(&mut self, i: usize, bootstrap: bool) -> Result<(), String> {
        let node = &self.nodes[i];
        let mut cmd = Command::new(procs::which("mariadbd").ok_or("no mariadbd")?);
        cmd.arg(format!("--defaults-file={}", node.cnf().display()));
        if bootstrap {
            cmd.arg("--wsrep-new-cluster");
        }
        let child =
            procs::spawn_logged(cmd.current_dir(&node.dir), &node.dir.join("mariadbd.out"))?;
        self.nodes[i].child = Some(child);
        Ok(())
    }

    /// A URL of database `db` on node `i` itself, not through HAProxy.
    pub fn direct_url(&self, i: usize, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.nodes[i].port)
    }

    /// Runs `sql` on node `i` itself.
    pub async fn sql(&self, i: usize, sql: &str) -> Result<(), String> {
        use sqlx::Connection;
        let mut c = sqlx::MySqlConnection::connect(&self.direct_url(i, "mysql"))
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query(sql)
            .execute(&mut c)
            .await
            .map_err(|e| format!("{sql}: {e}"))?;
        Ok(())
    }

    /// `wsrep_local_state_comment` of node `i`.
    pub async fn state(&self, i: usize) -> Result<String, String> {
        use sqlx::Connection;
        let attempt = async {
            let mut c = sqlx::MySqlConnection::connect(&self.direct_url(i, "mysql"))
                .await
                .map_err(|e| e.to_string())?;
            let (_, v): (String, String) =
                sqlx::query_as("SHOW STATUS LIKE 'wsrep_local_state_comment'")
                    .fetch_one(&mut c)
                    .await
                    .map_err(|e| e.to_string())?;
            Ok::<String, String>(v)
        };
        tokio::time::timeout(Duration::from_secs(1), attempt)
            .await
            .map_err(|_| "no answer".to_string())?
    }

    /// Waits until node `i` says it is `Synced`, at most until `until`.
    async fn wait_synced(&self, i: usize, until: tokio::time::Instant) -> Result<(), String> {
        cluster::wait_until(
            &format!("Galera node g{} to be synced", i + 1),
            until.saturating_duration_since(tokio::time::Instant::now()),
            Duration::from_millis(250),
            || async move {
                match self.state(i).await? {
                    s if s == "Synced" => Ok(()),
                    s => Err(s.into()),
                }
            },
        )
        .await
    }

    pub fn dir(&self) -> &Path {
        self.stage.dir()
    }

    /// A URL of database `db` through HAProxy.
    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.haproxy_port)
    }

    /// The node HAProxy sends to: the first one that passes its check.
    pub async fn primary(&self) -> Option<usize> {
        for (i, n) in self.nodes.iter().enumerate() {
            if n.alive && healthy(&self.direct_url(i, "mysql")).await {
                return Some(i);
            }
        }
        None
    }

    /// Cuts node `i` off from the other nodes (or heals it) with Galera's own switch,
    /// `gmcast.isolate`: its group traffic stops; its clients still reach it.
    pub async fn isolate(&self, i: usize, cut: bool) -> Result<(), String> {
        self.sql(
            i,
            &format!(
                "SET GLOBAL wsrep_provider_options = 'gmcast.isolate={}'",
                u8::from(cut)
            ),
        )
        .await
    }

    /// SIGKILLs node `i` (its `mariadbd`).
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }

    /// Stops node `i` cleanly (`mariadb-admin shutdown`: it leaves the cluster) and waits for
    /// it to exit.
    pub async fn shutdown(&mut self, i: usize) -> Result<(), String> {
        let sock = self.nodes[i].dir.join("sock");
        let out = tokio::process::Command::new("mariadb-admin")
            .arg(format!("--socket={}", sock.display()))
            .args(["-u", "root", "shutdown"])
            .output()
            .await
            .map_err(|e| format!("mariadb-admin: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mariadb-admin shutdown: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        if let Some(mut mariadbd) = self.nodes[i].child.take() {
            let within = Duration::from_secs(30);
            let exited = cluster::wait_until(
                "mariadbd to exit after its shutdown",
                within,
                Duration::from_millis(50),
                || {
                    let exited = mariadbd.exited();
                    async move {
                        exited
                            .then_some(())
                            .ok_or_else(|| "running".to_string().into())
                    }
                },
            )
            .await;
            exited.map_err(|e| format!("the node did not stop: {e}"))?;
        }
        self.nodes[i].alive = false;
        Ok(())
    }
}

impl Drop for Galera {
    fn drop(&mut self) {
        // Every node first, then the stage.
        self.nodes.clear();
    }
}

/// HAProxy sends every client to `g1` while it passes its check, else to one backup.
fn haproxy_config(port: u16, nodes: &[Node]) -> String {
    let servers: Vec<Server<'_>> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| Server {
            name: &n.name,
            addr: n.client_proxy.addr(),
            check_port: n.check.as_ref().map_or(0, |c| c.port),
            // When g1 is back, the backup's sessions are cut, so that writes never go to two
            // nodes at once.
            options: if i == 0 {
                " on-marked-up shutdown-backup-sessions"
            } else {
                " backup"
            },
        })
        .collect();
    cluster::haproxy_config("galera", port, "GET /", &servers)
}

/// Whether the node at `url` is `Synced` in the primary component (what `clustercheck` asks).
async fn healthy(url: &str) -> bool {
    use sqlx::Connection;
    let ask = async {
        let mut c = sqlx::MySqlConnection::connect(url).await.ok()?;
        let rows: Vec<(String, String)> = sqlx::query_as(
            "SHOW STATUS WHERE Variable_name IN \
             ('wsrep_local_state_comment', 'wsrep_cluster_status')",
        )
        .fetch_all(&mut c)
        .await
        .ok()?;
        let _ = c.close().await;
        let get = |name: &str| {
            rows.iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.as_str())
        };
        Some(
            get("wsrep_local_state_comment") == Some("Synced")
                && get("wsrep_cluster_status") == Some("Primary"),
        )
    };
    tokio::time::timeout(Duration::from_millis(800), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// What a node's check asks of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Galera: `Synced` in the primary component ([`healthy`]).
    Synced,
    /// Asynchronous replication: a server that takes writes, `@@global.read_only = 0`
    /// ([`writable`]), as HAProxy checks in front of an orchestrator-managed topology.
    Writable,
}

/// Whether the server at `url` takes writes: it answers, with `@@global.read_only = 0`.
pub(super) async fn writable(url: &str) -> bool {
    use sqlx::Connection;
    let ask = async {
        let mut c = sqlx::MySqlConnection::connect(url).await.ok()?;
        let read_only: i64 = sqlx::query_scalar("SELECT CAST(@@global.read_only AS SIGNED)")
            .fetch_one(&mut c)
            .await
            .ok()?;
        let _ = c.close().await;
        Some(read_only == 0)
    };
    tokio::time::timeout(Duration::from_millis(800), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// A node's HTTP health check for HAProxy: 200 while its [`Health`] holds, 503 otherwise.
pub struct Check {
    pub port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Check {
    pub(super) async fn start(url: String, health: Health) -> std::io::Result<Check> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let port = listener.local_addr()?.port();
        let url = std::sync::Arc::new(url);
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let url = url.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let _ = s.read(&mut buf).await;
                    let ok = match health {
                        Health::Synced => healthy(&url).await,
                        Health::Writable => writable(&url).await,
                    };
                    let answer: &[u8] = if ok {
                        b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
                    } else {
                        b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 5\r\n\r\ndown\n"
                    };
                    let _ = s.write_all(answer).await;
                });
            }
        });
        Ok(Check { port, task })
    }
}

impl Drop for Check {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn haproxy_sends_everything_to_the_first_node_and_keeps_the_others_as_backups() {
        let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
        let mut nodes = Vec::new();
        for i in 1..=3 {
            nodes.push(Node {
                name: format!("g{i}"),
                port: 0,
                client_proxy: Proxy::start(upstream).await.unwrap(),
                check: None,
                dir: PathBuf::from("/nonexistent"),
                child: None,
                alive: true,
            });
        }
        let cfg = haproxy_config(15000, &nodes);
        let servers: Vec<&str> = cfg
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("server "))
            .collect();
        assert_eq!(servers.len(), 3);
        assert!(servers[0].starts_with("server g1 ") && !servers[0].ends_with(" backup"));
        assert!(servers[0].ends_with("on-marked-up shutdown-backup-sessions"));
        assert!(servers[1..].iter().all(|s| s.ends_with(" backup")));
        assert!(cfg.contains("option httpchk GET /"));
        assert!(
            !cfg.contains("allbackups"),
            "one backup at a time: one writer"
        );
    }
}
