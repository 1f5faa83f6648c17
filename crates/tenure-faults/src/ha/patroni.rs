//! A private Patroni-managed PostgreSQL cluster: one etcd, three Patroni members each with its
//! own PostgreSQL on its own port and data directory under a temporary directory, and HAProxy
//! routing to the primary by Patroni's REST health check (`OPTIONS /primary`). Everything
//! listens on 127.0.0.1, on free ports between 20000 and 32000.
//!
//! Each member has two fault proxies ([`Proxy`]) in front of its PostgreSQL: one that HAProxy
//! (so tenure) goes through, and one that is the member's `connect_address`, so the
//! replicas' WAL streams from it (the lossy-failover control cuts that one); and one between
//! its Patroni and etcd. A partition blackholes all three.
//!
//! Teardown ([`Drop`]) SIGKILLs every process whose command line contains the cluster's marker
//! (its temporary directory's name, also its Patroni scope and so PostgreSQL's
//! `cluster_name`, which every PostgreSQL child shows), then removes the directory.

use super::procs::{self, http};
use crate::proxy::{self, Proxy};
use nix::unistd::{Gid, Uid, User};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

/// Patroni's own timing: the leader key's ttl (s), its loop (s), its retry timeout (s). The
/// database fails over about one `TTL` after its primary dies.
pub const TTL: u64 = 8;
const LOOP_WAIT: u64 = 1;
const RETRY_TIMEOUT: u64 = 3;

/// The tools a Patroni cluster needs, and where they are missing, why.
pub fn missing() -> Vec<String> {
    let mut missing = Vec::new();
    for (tool, package) in [
        ("patroni", "patroni"),
        ("etcd", "etcd-server"),
        ("haproxy", "haproxy"),
    ] {
        if procs::which(tool).is_none() {
            missing.push(format!("{tool} (Debian package {package})"));
        }
    }
    if procs::pg_bin_dir().is_none() {
        missing.push("PostgreSQL server binaries under /usr/lib/postgresql/*/bin".into());
    }
    if User::from_name("postgres").ok().flatten().is_none() {
        missing.push("the user postgres (PostgreSQL refuses to run as root)".into());
    }
    if !Uid::effective().is_root() {
        missing.push("root (to run Patroni as the user postgres)".into());
    }
    missing
}

pub struct Member {
    pub name: String,
    pub pg_port: u16,
    pub rest_port: u16,
    /// HAProxy → this proxy → PostgreSQL.
    pub client_proxy: Proxy,
    /// The member's `connect_address`: replicas stream WAL through it.
    pub repl_proxy: Proxy,
    /// This member's Patroni → etcd.
    pub etcd_proxy: Proxy,
    dir: PathBuf,
    patroni: Option<Child>,
    pub alive: bool,
}

impl Member {
    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }
}

pub struct Patroni {
    /// Kept open until drop: the data of every member.
    dir: Option<tempfile::TempDir>,
    /// Where the logs go at teardown.
    logs: PathBuf,
    marker: String,
    pub sync: bool,
    pub haproxy_port: u16,
    pub members: Vec<Member>,
    etcd: Option<Child>,
    haproxy: Option<Child>,
}

/// One member's role in `GET /cluster`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Role {
    pub name: String,
    pub role: String,
    pub state: String,
    pub timeline: Option<u64>,
}

impl Patroni {
    /// Builds the cluster and waits until it has a primary that HAProxy routes to and every
    /// replica streams (and, in synchronous mode, one of them is the synchronous standby).
    pub async fn start(sync: bool, timeout: Duration, logs: &Path) -> Result<Patroni, String> {
        let missing = missing();
        if !missing.is_empty() {
            return Err(format!("missing: {}", missing.join(", ")));
        }
        let bin_dir = procs::pg_bin_dir().ok_or("no PostgreSQL binaries")?;
        let pg = User::from_name("postgres")
            .map_err(|e| e.to_string())?
            .ok_or("no user postgres")?;
        let dir = tempfile::Builder::new()
            .prefix("tenure-ha-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let marker = dir
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("a temp dir without a name")?
            .to_string();
        chown(dir.path(), pg.uid, pg.gid)?;
        let n = 3;
        // etcd client and peer, HAProxy, and a PostgreSQL and a REST port per member.
        let ports = procs::free_ports(3 + 2 * n).map_err(|e| e.to_string())?;
        let (etcd_port, peer_port, haproxy_port) = (ports[0], ports[1], ports[2]);
        let mut cluster = Patroni {
            dir: Some(dir),
            logs: logs.to_path_buf(),
            marker: marker.clone(),
            sync,
            haproxy_port,
            members: Vec::new(),
            etcd: None,
            haproxy: None,
        };
        let root = cluster.dir().to_path_buf();
        let etcd_dir = root.join("etcd");
        cluster.etcd = Some(procs::spawn_logged(
            Command::new("etcd")
                .arg("--name")
                .arg(&marker)
                .arg("--data-dir")
                .arg(&etcd_dir)
                .arg(format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"))
                .arg(format!(
                    "--advertise-client-urls=http://127.0.0.1:{etcd_port}"
                ))
                .arg(format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"))
                .arg(format!(
                    "--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"
                ))
                .arg(format!(
                    "--initial-cluster={marker}=http://127.0.0.1:{peer_port}"
                ))
                .current_dir(&root),
            &root.join("etcd.log"),
        )?);
        for i in 0..n {
            let (pg_port, rest_port) = (ports[3 + 2 * i], ports[4 + 2 * i]);
            let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], pg_port));
            let member_dir = root.join(format!("pg{}", i + 1));
            std::fs::create_dir(&member_dir).map_err(|e| e.to_string())?;
            chown(&member_dir, pg.uid, pg.gid)?;
            cluster.members.push(Member {
                name: format!("pg{}", i + 1),
                pg_port,
                rest_port,
                client_proxy: Proxy::start(upstream).await.map_err(|e| e.to_string())?,
                repl_proxy: Proxy::start(upstream).await.map_err(|e| e.to_string())?,
                etcd_proxy: Proxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], etcd_port)))
                    .await
                    .map_err(|e| e.to_string())?,
                dir: member_dir,
                patroni: None,
                alive: true,
            });
        }
        for i in 0..n {
            let m = &cluster.members[i];
            let config = member_config(&marker, m, &bin_dir, sync);
            let file = m.dir.join("patroni.yml");
            // JSON is YAML.
            std::fs::write(&file, serde_json::to_string_pretty(&config).unwrap())
                .map_err(|e| e.to_string())?;
            chown(&file, pg.uid, pg.gid)?;
            let child = procs::spawn_logged(
                Command::new("patroni")
                    .arg(&file)
                    .uid(pg.uid.as_raw())
                    .gid(pg.gid.as_raw())
                    .env("HOME", &m.dir)
                    .current_dir(&m.dir),
                &m.dir.join("patroni.log"),
            )?;
            cluster.members[i].patroni = Some(child);
            // Let the first member bootstrap before the others look for a leader.
            if i == 0 {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        let cfg = root.join("haproxy.cfg");
        std::fs::write(&cfg, haproxy_config(haproxy_port, &cluster.members))
            .map_err(|e| e.to_string())?;
        cluster.haproxy = Some(procs::spawn_logged(
            Command::new("haproxy")
                .arg("-db")
                .arg("-f")
                .arg(&cfg)
                .current_dir(&root),
            &root.join("haproxy.log"),
        )?);
        cluster.wait_healthy(timeout).await?;
        Ok(cluster)
    }

    /// The temporary directory of the cluster.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the cluster's directory").path()
    }

    /// A URL of database `db` through HAProxy.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.haproxy_port)
    }

    /// A URL of database `db` on member `i`'s PostgreSQL itself: not through HAProxy, nor
    /// through the member's proxies.
    pub fn direct_url(&self, i: usize, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{db}",
            self.members[i].pg_port
        )
    }

    /// Every live member's view of the cluster (`GET /cluster` of the first that answers).
    pub async fn roles(&self) -> Result<Vec<Role>, String> {
        let mut last = String::from("no live member");
        for m in self.members.iter().filter(|m| m.alive) {
            match http(m.rest_port, "GET", "/cluster", None, Duration::from_secs(1)).await {
                Ok((200, body)) => {
                    let v: Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
                    let roles = v["members"]
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|m| Role {
                                    name: m["name"].as_str().unwrap_or("").to_string(),
                                    role: m["role"].as_str().unwrap_or("").to_string(),
                                    state: m["state"].as_str().unwrap_or("").to_string(),
                                    timeline: m["timeline"].as_u64(),
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    return Ok(roles);
                }
                Ok((code, body)) => last = format!("{}: {code} {body:.200}", m.name),
                Err(e) => last = format!("{}: {e}", m.name),
            }
        }
        Err(last)
    }

    /// The index of the member Patroni names leader.
    pub async fn primary(&self) -> Option<usize> {
        let roles = self.roles().await.ok()?;
        let leader = roles.iter().find(|r| r.role == "leader")?;
        self.members.iter().position(|m| m.name == leader.name)
    }

    /// The synchronous standby, if any.
    pub async fn sync_standby(&self) -> Option<usize> {
        let roles = self.roles().await.ok()?;
        let standby = roles.iter().find(|r| r.role == "sync_standby")?;
        self.members.iter().position(|m| m.name == standby.name)
    }

    /// Waits until a leader runs and every other live member runs as a replica (in
    /// synchronous mode: one of them the synchronous standby), and a write through HAProxy
    /// commits.
    pub async fn wait_healthy(&self, timeout: Duration) -> Result<(), String> {
        let until = tokio::time::Instant::now() + timeout;
        let live = self.members.iter().filter(|m| m.alive).count();
        let mut last;
        loop {
            match self.roles().await {
                Ok(roles) => {
                    let running = roles.iter().filter(|r| r.state == "running").count();
                    let leader = roles.iter().any(|r| r.role == "leader");
                    let standby = !self.sync || roles.iter().any(|r| r.role == "sync_standby");
                    if leader && standby && running == live && roles.len() == live {
                        let url = self.url("postgres");
                        if write_probe(&url, Duration::from_secs(2)).await.is_ok() {
                            return Ok(());
                        }
                    }
                    last = format!("{roles:?}");
                }
                Err(e) => last = e,
            }
            if tokio::time::Instant::now() >= until {
                return Err(format!(
                    "the Patroni cluster was not healthy within {timeout:?} (last: {last})"
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// SIGKILLs member `i` whole, as a lost machine: Patroni, its PostgreSQL and every
    /// PostgreSQL child.
    pub fn kill(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Some(child) = m.patroni.as_mut() {
            procs::kill_group(child.id() as i32);
            let _ = child.wait();
        }
        let pid_file = m.data_dir().join("postmaster.pid");
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|s| s.lines().next()?.trim().parse::<i32>().ok())
        {
            procs::kill_tree(pid);
        }
        m.alive = false;
    }

    /// Asks Patroni for a switchover from the leader to `candidate`.
    pub async fn switchover(&self, leader: usize, candidate: usize) -> Result<(), String> {
        let body = json!({
            "leader": self.members[leader].name,
            "candidate": self.members[candidate].name,
        })
        .to_string();
        let (code, answer) = http(
            self.members[leader].rest_port,
            "POST",
            "/switchover",
            Some(&body),
            Duration::from_secs(30),
        )
        .await?;
        if code == 200 {
            Ok(())
        } else {
            Err(format!("switchover: {code} {answer:.300}"))
        }
    }

    /// Partitions member `i` from everyone (or heals it): its clients (HAProxy), its replicas'
    /// WAL streams and its Patroni's etcd all go through proxies that now hold every byte. Its
    /// REST API stays reachable, so HAProxy follows what its Patroni reports.
    pub fn partition(&self, i: usize, cut: bool) {
        let fault = if cut {
            proxy::Fault::Blackhole
        } else {
            proxy::Fault::Pass
        };
        let m = &self.members[i];
        for p in [&m.client_proxy, &m.repl_proxy, &m.etcd_proxy] {
            p.set(fault);
        }
    }

    /// Cuts (or heals) the WAL stream out of member `i`: its `connect_address` proxy holds
    /// every byte (a partition without RST).
    pub fn cut_replication(&self, i: usize, cut: bool) {
        self.members[i].repl_proxy.set(if cut {
            proxy::Fault::Blackhole
        } else {
            proxy::Fault::Pass
        });
    }
}

impl Drop for Patroni {
    fn drop(&mut self) {
        for m in &mut self.members {
            if let Some(c) = m.patroni.as_mut() {
                procs::kill_group(c.id() as i32);
                let _ = c.wait();
            }
        }
        for c in [self.haproxy.as_mut(), self.etcd.as_mut()]
            .into_iter()
            .flatten()
        {
            procs::kill_group(c.id() as i32);
            let _ = c.wait();
        }
        procs::kill_marked(&self.marker);
        if let Some(dir) = self.dir.take() {
            procs::copy_logs(dir.path(), &self.logs);
        }
    }
}

fn chown(path: &Path, uid: Uid, gid: Gid) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(uid.as_raw()), Some(gid.as_raw()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn member_config(scope: &str, m: &Member, bin_dir: &Path, sync: bool) -> Value {
    let repl = m.repl_proxy.addr();
    let etcd = m.etcd_proxy.addr();
    json!({
        "scope": scope,
        "name": m.name,
        "log": {"level": "INFO"},
        "restapi": {
            "listen": format!("127.0.0.1:{}", m.rest_port),
            "connect_address": format!("127.0.0.1:{}", m.rest_port),
        },
        // `use_proxies`: talk to etcd only through the given address (no discovery of its
        // advertised one), so that the proxy can partition this member from it.
        "etcd3": {"hosts": format!("{}:{}", etcd.ip(), etcd.port()), "use_proxies": true},
        "bootstrap": {
            "dcs": {
                "ttl": TTL,
                "loop_wait": LOOP_WAIT,
                "retry_timeout": RETRY_TIMEOUT,
                // The control must be able to fail over to a replica that is behind.
                "maximum_lag_on_failover": 1u64 << 30,
                "synchronous_mode": sync,
                "postgresql": {
                    "use_pg_rewind": false,
                    "parameters": {
                        "max_connections": 60,
                        "wal_keep_size": "64MB",
                        "wal_sender_timeout": "60s",
                        "wal_receiver_timeout": "60s",
                    },
                },
            },
            "initdb": [{"encoding": "UTF8"}, {"auth": "trust"}],
            "pg_hba": [
                "local all all trust",
                "host all all 127.0.0.1/32 trust",
                "host replication all 127.0.0.1/32 trust",
            ],
        },
        "postgresql": {
            "listen": format!("127.0.0.1:{}", m.pg_port),
            "connect_address": format!("{}:{}", repl.ip(), repl.port()),
            "data_dir": m.data_dir(),
            "bin_dir": bin_dir,
            "pgpass": m.dir.join("pgpass"),
            "authentication": {
                "superuser": {"username": "postgres", "password": "tenure"},
                "replication": {"username": "replicator", "password": "tenure"},
            },
            "parameters": {
                "unix_socket_directories": m.dir,
                "shared_buffers": "16MB",
                "fsync": "on",
            },
        },
    })
}

fn haproxy_config(port: u16, members: &[Member]) -> String {
    let mut cfg = format!(
        "global\n    maxconn 300\n\ndefaults\n    mode tcp\n    timeout connect 1s\n    \
         timeout client 1h\n    timeout server 1h\n    timeout check 1s\n\n\
         listen primary\n    bind 127.0.0.1:{port}\n    option httpchk OPTIONS /primary\n    \
         http-check expect status 200\n    \
         default-server inter 250ms fall 2 rise 1 on-marked-down shutdown-sessions\n"
    );
    for m in members {
        let a = m.client_proxy.addr();
        cfg.push_str(&format!(
            "    server {} {}:{} maxconn 100 check port {}\n",
            m.name,
            a.ip(),
            a.port(),
            m.rest_port
        ));
    }
    cfg
}

/// One write through `url` (a probe table in its database), within `timeout`: the database is
/// writable for clients. Returns the port of the server that committed it.
pub async fn write_probe(url: &str, timeout: Duration) -> Result<u16, String> {
    use sqlx::Connection;
    let attempt = async {
        let mut c = sqlx::PgConnection::connect(url)
            .await
            .map_err(|e| e.to_string())?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS tf_probe (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .execute(&mut c)
        .await
        .map_err(|e| e.to_string())?;
        sqlx::query(
            "INSERT INTO tf_probe VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = tf_probe.n + 1",
        )
        .execute(&mut c)
        .await
        .map_err(|e| e.to_string())?;
        let port: i32 = sqlx::query_scalar("SELECT inet_server_port()")
            .fetch_one(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        let _ = c.close().await;
        Ok::<u16, String>(port as u16)
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| format!("no write within {timeout:?}"))?
}

/// Whether the server at `url` is a standby (`pg_is_in_recovery()`), within `timeout`.
pub async fn in_recovery(url: &str, timeout: Duration) -> Result<bool, String> {
    use sqlx::Connection;
    let ask = async {
        let mut c = sqlx::PgConnection::connect(url)
            .await
            .map_err(|e| e.to_string())?;
        let standby: bool = sqlx::query_scalar("SELECT pg_is_in_recovery()")
            .fetch_one(&mut c)
            .await
            .map_err(|e| e.to_string())?;
        let _ = c.close().await;
        Ok::<bool, String>(standby)
    };
    tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn haproxy_checks_each_members_rest_api_and_routes_through_its_proxy() {
        let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
        let mut members = Vec::new();
        for (i, rest_port) in [(1, 18001), (2, 18002)] {
            members.push(Member {
                name: format!("pg{i}"),
                pg_port: 0,
                rest_port,
                client_proxy: Proxy::start(upstream).await.unwrap(),
                repl_proxy: Proxy::start(upstream).await.unwrap(),
                etcd_proxy: Proxy::start(upstream).await.unwrap(),
                dir: PathBuf::from("/nonexistent"),
                patroni: None,
                alive: true,
            });
        }
        let cfg = haproxy_config(15000, &members);
        assert!(cfg.contains("bind 127.0.0.1:15000"));
        assert!(cfg.contains("option httpchk OPTIONS /primary"));
        for m in &members {
            let line = format!(
                "server {} 127.0.0.1:{} maxconn 100 check port {}",
                m.name,
                m.client_proxy.addr().port(),
                m.rest_port
            );
            assert!(cfg.contains(&line), "{line} in\n{cfg}");
        }
        let config = member_config("scope-x", &members[0], Path::new("/bin"), true);
        assert_eq!(config["bootstrap"]["dcs"]["synchronous_mode"], true);
        let repl = members[0].repl_proxy.addr().port();
        assert_eq!(
            config["postgresql"]["connect_address"],
            format!("127.0.0.1:{repl}")
        );
        assert_eq!(config["etcd3"]["use_proxies"], true);
    }
}
