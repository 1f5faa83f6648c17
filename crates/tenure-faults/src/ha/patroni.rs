//! A private Patroni-managed PostgreSQL cluster: its DCS ([`Dcs`]: one etcd, or `tenure
//! serve`'s Consul API), three Patroni members each with its own PostgreSQL on its own port and
//! data directory under a temporary directory, and HAProxy routing to the primary by Patroni's
//! REST health check (`OPTIONS /primary`). Everything listens on 127.0.0.1, on free ports
//! between 20000 and 32000.
//!
//! Each member has two fault proxies ([`Proxy`]) in front of its PostgreSQL: one that HAProxy
//! (so tenure) goes through, and one that is the member's `connect_address`, so the
//! replicas' WAL streams from it (the lossy-failover control cuts that one); and one between
//! its Patroni and the DCS. A partition blackholes all three.
//!
//! Teardown ([`Drop`]) kills the members' Patroni and the DCS, then the [`Stage`] kills HAProxy and
//! every process whose command line contains the cluster's marker (its temporary directory's
//! name, also its Patroni scope and so PostgreSQL's `cluster_name`, which every PostgreSQL
//! child shows), and keeps the logs.

use super::cluster::{self, proxy_to, Server, Stage, Wait};
use super::dcs::{Dcs, DcsKind};
use super::procs::{self, http, Group};
use crate::proxy::{self, Proxy};
use nix::unistd::{Gid, Uid, User};
use serde_json::{json, Value};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tenure::BackendKind;

/// Patroni's own timing on etcd: the leader key's ttl (s), its loop (s), its retry timeout
/// (s). The database fails over about one `TTL` after its primary dies.
pub const TTL: u64 = 8;
const LOOP_WAIT: u64 = 1;
const RETRY_TIMEOUT: u64 = 3;

/// How a cluster is built: its replication, its DCS and Patroni's timing (s).
#[derive(Clone, Copy, Debug)]
pub struct Setup {
    pub sync: bool,
    pub dcs: DcsKind,
    pub ttl: u64,
    pub loop_wait: u64,
    pub retry_timeout: u64,
}

impl Setup {
    /// Patroni on etcd with the timing above.
    pub fn on_etcd(sync: bool) -> Setup {
        Setup {
            sync,
            dcs: DcsKind::Etcd,
            ttl: TTL,
            loop_wait: LOOP_WAIT,
            retry_timeout: RETRY_TIMEOUT,
        }
    }
}

/// The tools a Patroni cluster on `dcs` needs, and where they are missing, why.
pub fn missing(dcs: DcsKind) -> Vec<String> {
    let mut missing = cluster::missing_tools(&[("patroni", "patroni"), ("haproxy", "haproxy")]);
    missing.extend(super::dcs::missing(dcs));
    if procs::pg_bin_dir().is_none() {
        missing.push("PostgreSQL server binaries under /usr/lib/postgresql/*/bin".into());
    }
    missing.extend(cluster::missing_user(
        "postgres",
        " (PostgreSQL refuses to run as root)",
        "Patroni",
    ));
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
    /// This member's Patroni → the DCS.
    pub dcs_proxy: Proxy,
    dir: PathBuf,
    patroni: Option<Group>,
    pub alive: bool,
}

impl Member {
    fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }
}

pub struct Patroni {
    /// The data of every member, the DCS and HAProxy; torn down after the members.
    stage: Stage,
    pub sync: bool,
    pub haproxy_port: u16,
    pub members: Vec<Member>,
    /// Where Patroni keeps its leader key; stopped after the members.
    pub dcs: Dcs,
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
    /// Builds the cluster on etcd and waits until it has a primary that HAProxy routes to and
    /// every replica streams (and, in synchronous mode, one of them is the synchronous
    /// standby).
    pub async fn start(sync: bool, timeout: Duration, logs: &Path) -> Result<Patroni, String> {
        Patroni::start_with(Setup::on_etcd(sync), timeout, logs).await
    }

    /// Builds the cluster as `setup` says and waits until it is healthy.
    pub async fn start_with(
        setup: Setup,
        timeout: Duration,
        logs: &Path,
    ) -> Result<Patroni, String> {
        let missing = missing(setup.dcs);
        if !missing.is_empty() {
            return Err(format!("missing: {}", missing.join(", ")));
        }
        let bin_dir = procs::pg_bin_dir().ok_or("no PostgreSQL binaries")?;
        let pg = User::from_name("postgres")
            .map_err(|e| e.to_string())?
            .ok_or("no user postgres")?;
        let mut stage = Stage::new("tenure-ha-", logs)?;
        chown(stage.dir(), pg.uid, pg.gid)?;
        let marker = stage.marker().to_string();
        let root = stage.dir().to_path_buf();
        let n = 3;
        // The DCS's client and peer ports, HAProxy, and a PostgreSQL and a REST port per
        // member.
        let ports = stage.reserve_ports(3 + 2 * n)?;
        let (dcs_port, peer_port, haproxy_port) = (ports[0], ports[1], ports[2]);
        // Patroni 3.0 exits at once if its first request to etcd fails (through its proxy: a
        // connection closed, while etcd does not listen yet), and that member never joins: no
        // Patroni starts before the DCS answers.
        let dcs = Dcs::start(setup.dcs, &stage, dcs_port, peer_port, timeout).await?;
        let mut cluster = Patroni {
            stage,
            sync: setup.sync,
            haproxy_port,
            members: Vec::new(),
            dcs,
        };
        for i in 0..n {
            let (pg_port, rest_port) = (ports[3 + 2 * i], ports[4 + 2 * i]);
            let member_dir = root.join(format!("pg{}", i + 1));
            std::fs::create_dir(&member_dir).map_err(|e| e.to_string())?;
            chown(&member_dir, pg.uid, pg.gid)?;
            cluster.members.push(Member {
                name: format!("pg{}", i + 1),
                pg_port,
                rest_port,
                client_proxy: proxy_to(pg_port).await?,
                repl_proxy: proxy_to(pg_port).await?,
                dcs_proxy: proxy_to(dcs_port).await?,
                dir: member_dir,
                patroni: None,
                alive: true,
            });
        }
        for i in 0..n {
            let m = &cluster.members[i];
            let config = member_config(&marker, m, &bin_dir, &setup, &cluster.dcs);
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
            // All at once: the one that takes the DCS's initialize key bootstraps the cluster,
            // the others wait for it and then copy it.
            cluster.members[i].patroni = Some(child);
        }
        let config = haproxy_config(haproxy_port, &cluster.members);
        cluster.stage.start_haproxy(&config)?;
        cluster.wait_healthy(timeout).await?;
        Ok(cluster)
    }

    /// The temporary directory of the cluster.
    pub fn dir(&self) -> &Path {
        self.stage.dir()
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
    /// commits. A member whose Patroni has exited would never join: that ends the wait at
    /// once, with the end of its log.
    pub async fn wait_healthy(&self, timeout: Duration) -> Result<(), String> {
        let live = self.members.iter().filter(|m| m.alive).count();
        let what = format!(
            "the Patroni cluster to be healthy (a leader and {live} members running{}, a write \
             through HAProxy)",
            if self.sync {
                ", one of them the synchronous standby"
            } else {
                ""
            }
        );
        cluster::wait_until(&what, timeout, Duration::from_millis(250), || async {
            if let Some(m) = self
                .members
                .iter()
                .find(|m| m.alive && !m.patroni.as_ref().is_some_and(Group::is_running))
            {
                return Err(Wait::Never(format!(
                    "{}'s Patroni exited; its log ends: {}",
                    m.name,
                    procs::log_tail(&m.dir.join("patroni.log"), 3)
                )));
            }
            let roles = self.roles().await?;
            let running = roles.iter().filter(|r| r.state == "running").count();
            let leader = roles.iter().any(|r| r.role == "leader");
            let standby = !self.sync || roles.iter().any(|r| r.role == "sync_standby");
            if !(leader && standby && running == live && roles.len() == live) {
                return Err(format!("{roles:?}").into());
            }
            let url = self.url("postgres");
            cluster::write_probe(BackendKind::Postgres, &url, Duration::from_secs(2))
                .await
                .map_err(|e| format!("{roles:?}, no write: {e}"))?;
            Ok(())
        })
        .await
    }

    /// SIGKILLs member `i` whole, as a lost machine: Patroni, its PostgreSQL and every
    /// PostgreSQL child.
    pub fn kill(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Some(patroni) = m.patroni.as_mut() {
            patroni.kill();
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
    /// WAL streams and its Patroni's DCS all go through proxies that now hold every byte. Its
    /// REST API stays reachable, so HAProxy follows what its Patroni reports.
    pub fn partition(&self, i: usize, cut: bool) {
        let fault = if cut {
            proxy::Fault::Blackhole
        } else {
            proxy::Fault::Pass
        };
        let m = &self.members[i];
        for p in [&m.client_proxy, &m.repl_proxy, &m.dcs_proxy] {
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
        // Every Patroni first (so that none restarts its PostgreSQL), then the DCS and the
        // stage.
        self.members.clear();
        self.dcs.kill();
    }
}

fn chown(path: &Path, uid: Uid, gid: Gid) -> Result<(), String> {
    std::os::unix::fs::chown(path, Some(uid.as_raw()), Some(gid.as_raw()))
        .map_err(|e| format!("{}: {e}", path.display()))
}

fn member_config(scope: &str, m: &Member, bin_dir: &Path, setup: &Setup, dcs: &Dcs) -> Value {
    let repl = m.repl_proxy.addr();
    let (dcs_key, dcs_section) = dcs.member_config(m.dcs_proxy.addr());
    let mut config = json!({
        "scope": scope,
        "name": m.name,
        "log": {"level": "INFO"},
        "restapi": {
            "listen": format!("127.0.0.1:{}", m.rest_port),
            "connect_address": format!("127.0.0.1:{}", m.rest_port),
        },
        "bootstrap": {
            "dcs": {
                "ttl": setup.ttl,
                "loop_wait": setup.loop_wait,
                "retry_timeout": setup.retry_timeout,
                // The control must be able to fail over to a replica that is behind.
                "maximum_lag_on_failover": 1u64 << 30,
                "synchronous_mode": setup.sync,
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
    });
    config[dcs_key] = dcs_section;
    config
}

/// HAProxy sends every client to the member whose Patroni answers `OPTIONS /primary` with 200.
fn haproxy_config(port: u16, members: &[Member]) -> String {
    let servers: Vec<Server<'_>> = members
        .iter()
        .map(|m| Server {
            name: &m.name,
            addr: m.client_proxy.addr(),
            check_port: m.rest_port,
            options: "",
        })
        .collect();
    cluster::haproxy_config("primary", port, "OPTIONS /primary", &servers)
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
                dcs_proxy: Proxy::start(upstream).await.unwrap(),
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
        let etcd = Dcs::unstarted(DcsKind::Etcd, 2379);
        let config = member_config(
            "scope-x",
            &members[0],
            Path::new("/bin"),
            &Setup::on_etcd(true),
            &etcd,
        );
        assert_eq!(config["bootstrap"]["dcs"]["synchronous_mode"], true);
        let repl = members[0].repl_proxy.addr().port();
        assert_eq!(
            config["postgresql"]["connect_address"],
            format!("127.0.0.1:{repl}")
        );
        assert_eq!(config["etcd3"]["use_proxies"], true);
    }
}
