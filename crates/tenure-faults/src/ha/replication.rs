//! A private MariaDB pair with asynchronous binlog replication, the topology orchestrator
//! manages: a primary `m1` (`server_id` 1) and a replica `m2` (`server_id` 2,
//! `read_only = 1`) that replicates from it by GTID, each with its own ports and data directory
//! under a temporary directory, run as `mysql`. HAProxy sends every connection to the server
//! that takes writes: its check (a task of this process) answers 200 only while
//! `@@global.read_only = 0`, as HAProxy is set up in front of orchestrator-managed servers.
//!
//! [`Replication::promote`] promotes the replica the way orchestrator does
//! (`ApplyMySQLPromotionAfterMasterFailover`): `STOP SLAVE; RESET SLAVE ALL; SET GLOBAL
//! read_only = 0`; HAProxy then follows its check. What tenure's epochs need of a promotion
//! is only what replication needs anyway: every server its own `server_id`.
//!
//! Teardown ([`Drop`]) kills the servers, then the [`Stage`] kills HAProxy and every process
//! whose command line names the cluster's temporary directory, and keeps the logs.

use super::cluster::{self, proxy_to, Server, Stage};
use super::galera::{self, Check, Health, Node};
use super::procs;
use std::path::Path;
use std::process::Command;
use std::time::Duration;
use tenure::BackendKind;

/// The tools a replicated pair needs, and where they are missing, why.
pub fn missing() -> Vec<String> {
    let mut missing = cluster::missing_tools(&[
        ("mariadbd", "mariadb-server"),
        ("mariadb-install-db", "mariadb-server"),
        ("haproxy", "haproxy"),
    ]);
    missing.extend(cluster::missing_user("mysql", "", "mariadbd"));
    missing
}

pub struct Replication {
    /// The servers' data and HAProxy; torn down after the servers.
    stage: Stage,
    pub haproxy_port: u16,
    pub nodes: Vec<Node>,
}

impl Replication {
    /// Builds the primary and its replica, starts replication and waits until the replica
    /// replicates and a write through HAProxy commits on the primary.
    pub async fn start(timeout: Duration, logs: &Path) -> Result<Replication, String> {
        let (mut stage, mysql) = galera::mariadb_stage("tenure-replication-", missing(), logs)?;
        // HAProxy, and a client port per server.
        let ports = stage.reserve_ports(3)?;
        let mut cluster = Replication {
            stage,
            haproxy_port: ports[0],
            nodes: Vec::new(),
        };
        let root = cluster.stage.dir().to_path_buf();
        for (i, &port) in ports[1..].iter().enumerate() {
            let k = i + 1;
            let node_dir = root.join(format!("m{k}"));
            std::fs::create_dir_all(node_dir.join("data")).map_err(|e| e.to_string())?;
            // Binlogs on both (the replica's, so that it can be promoted: log_slave_updates),
            // durable commits, the replica read-only and not replicating until told to.
            let cnf = format!(
                "[mariadbd]\ndatadir={d}/data\nsocket={d}/sock\npid-file={d}/pid\nport={port}\n\
                 bind-address=127.0.0.1\nuser=mysql\nlog-error={d}/error.log\nskip-name-resolve\n\
                 innodb_buffer_pool_size=32M\ndefault_storage_engine=InnoDB\n\
                 server_id={k}\nlog_bin={d}/binlog\nbinlog_format=ROW\nlog_slave_updates=ON\n\
                 relay_log={d}/relay\nsync_binlog=1\ninnodb_flush_log_at_trx_commit=1\n\
                 skip_slave_start\nread_only={ro}\n",
                d = node_dir.display(),
                ro = u8::from(i > 0),
            );
            std::fs::write(node_dir.join("my.cnf"), cnf).map_err(|e| e.to_string())?;
            galera::chown_tree(&node_dir, mysql.uid.as_raw(), mysql.gid.as_raw())?;
            let url = format!("mysql://root@127.0.0.1:{port}/mysql");
            cluster.nodes.push(Node {
                name: format!("m{k}"),
                port,
                client_proxy: proxy_to(port).await?,
                check: Some(
                    Check::start(url, Health::Writable)
                        .await
                        .map_err(|e| e.to_string())?,
                ),
                dir: node_dir,
                child: None,
                alive: true,
            });
        }
        for i in 0..cluster.nodes.len() {
            let node = &cluster.nodes[i];
            cluster::install_mariadb(&node.name, &node.cnf(), &node.dir.join("error.log"))?;
            let mut cmd = Command::new(procs::which("mariadbd").ok_or("no mariadbd")?);
            cmd.arg(format!("--defaults-file={}", node.cnf().display()));
            let child =
                procs::spawn_logged(cmd.current_dir(&node.dir), &node.dir.join("mariadbd.out"))?;
            cluster.nodes[i].child = Some(child);
        }
        let until = tokio::time::Instant::now() + timeout;
        let within = || until.saturating_duration_since(tokio::time::Instant::now());
        for i in 0..cluster.nodes.len() {
            let name = cluster.nodes[i].name.clone();
            let cluster = &cluster;
            cluster::wait_until(
                &format!("{name} to answer"),
                within(),
                Duration::from_millis(250),
                || async move { Ok(cluster.query(i, "SELECT 1").await?) },
            )
            .await?;
        }
        // The replica starts from the primary's first binlog event (its own GTID position is
        // empty): both were initialized alike, and everything since is in that binlog.
        let primary_port = cluster.nodes[0].port;
        cluster
            .sql(
                1,
                &format!(
                    "CHANGE MASTER TO MASTER_HOST = '127.0.0.1', MASTER_PORT = {primary_port}, \
                     MASTER_USER = 'root', MASTER_PASSWORD = '', MASTER_USE_GTID = slave_pos, \
                     MASTER_CONNECT_RETRY = 1"
                ),
            )
            .await?;
        cluster.sql(1, "START SLAVE").await?;
        let config = haproxy_config(cluster.haproxy_port, &cluster.nodes);
        cluster.stage.start_haproxy(&config)?;
        let url = cluster.url("mysql");
        cluster::wait_until(
            "a write through HAProxy",
            within(),
            Duration::from_millis(250),
            || async {
                let probe = cluster::write_probe(BackendKind::MySql, &url, Duration::from_secs(2));
                Ok(probe.await?)
            },
        )
        .await?;
        let cluster_ref = &cluster;
        cluster::wait_until(
            "the replica to apply the primary's writes",
            within(),
            Duration::from_millis(250),
            || async move { Ok(cluster_ref.caught_up(Duration::from_secs(2)).await?) },
        )
        .await?;
        Ok(cluster)
    }

    /// A URL of database `db` through HAProxy.
    pub fn url(&self, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.haproxy_port)
    }

    /// A URL of database `db` on server `i` itself, not through HAProxy.
    pub fn direct_url(&self, i: usize, db: &str) -> String {
        format!("mysql://root@127.0.0.1:{}/{db}", self.nodes[i].port)
    }

    /// Runs `sql` on server `i` itself.
    pub async fn sql(&self, i: usize, sql: &str) -> Result<(), String> {
        self.query(i, sql).await.map(|_| ())
    }

    /// Runs `sql` on server `i` itself; the first column of its first row as text, if any.
    async fn query(&self, i: usize, sql: &str) -> Result<Option<String>, String> {
        use sqlx::{Connection, Row};
        let ask = async {
            let mut c = sqlx::MySqlConnection::connect(&self.direct_url(i, "mysql"))
                .await
                .map_err(|e| e.to_string())?;
            let row = sqlx::query(sql)
                .fetch_optional(&mut c)
                .await
                .map_err(|e| format!("{sql}: {e}"))?;
            let _ = c.close().await;
            Ok::<_, String>(row.and_then(|r| r.try_get::<String, _>(0).ok()))
        };
        tokio::time::timeout(Duration::from_secs(10), ask)
            .await
            .map_err(|_| format!("{}: no answer to {sql} within 10 s", self.nodes[i].name))?
    }

    /// Waits up to `timeout` for the replica to have applied everything the primary has
    /// written so far (`MASTER_GTID_WAIT` on the primary's `@@gtid_binlog_pos`).
    pub async fn caught_up(&self, timeout: Duration) -> Result<(), String> {
        let pos = self
            .query(0, "SELECT CAST(@@gtid_binlog_pos AS CHAR)")
            .await?
            .unwrap_or_default();
        let waited = self
            .query(
                1,
                &format!(
                    "SELECT CAST(MASTER_GTID_WAIT('{pos}', {}) AS CHAR)",
                    timeout.as_secs_f64()
                ),
            )
            .await?;
        match waited.as_deref() {
            Some("0") => Ok(()),
            other => Err(format!(
                "the replica has not applied {pos} within {timeout:?} ({other:?})"
            )),
        }
    }

    /// The server HAProxy sends to: the first live one that takes writes.
    pub async fn primary(&self) -> Option<usize> {
        for (i, n) in self.nodes.iter().enumerate() {
            if n.alive && galera::writable(&self.direct_url(i, "mysql")).await {
                return Some(i);
            }
        }
        None
    }

    /// Stops the replica's SQL thread: it still receives the primary's binlog into its relay
    /// log, but applies nothing more (a delayed or broken replica).
    pub async fn stop_applying(&self) -> Result<(), String> {
        self.sql(1, "STOP SLAVE SQL_THREAD").await
    }

    /// Promotes the replica as orchestrator does: replication stopped and forgotten (its relay
    /// log, with whatever it had not applied, discarded), then writable.
    pub async fn promote(&self) -> Result<(), String> {
        for sql in ["STOP SLAVE", "RESET SLAVE ALL", "SET GLOBAL read_only = 0"] {
            self.sql(1, sql).await?;
        }
        Ok(())
    }

    /// SIGKILLs server `i` (its `mariadbd`), and reaps it.
    pub fn kill(&mut self, i: usize) {
        self.nodes[i].kill();
    }
}

impl Drop for Replication {
    fn drop(&mut self) {
        // Every server first, then the stage.
        self.nodes.clear();
    }
}

/// HAProxy sends every client to the server whose check says it takes writes.
fn haproxy_config(port: u16, nodes: &[Node]) -> String {
    let servers: Vec<Server<'_>> = nodes
        .iter()
        .map(|n| Server {
            name: &n.name,
            addr: n.client_proxy.addr(),
            check_port: n.check.as_ref().map_or(0, |c| c.port),
            options: "",
        })
        .collect();
    cluster::haproxy_config("primary", port, "GET /", &servers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::Proxy;
    use std::path::PathBuf;

    #[tokio::test]
    async fn haproxy_sends_to_whichever_server_its_check_finds_writable() {
        let upstream = std::net::SocketAddr::from(([127, 0, 0, 1], 9));
        let mut nodes = Vec::new();
        for i in 1..=2 {
            nodes.push(Node {
                name: format!("m{i}"),
                port: 0,
                client_proxy: Proxy::start(upstream).await.unwrap(),
                check: Some(
                    Check::start("mysql://root@127.0.0.1:9/mysql".into(), Health::Writable)
                        .await
                        .unwrap(),
                ),
                dir: PathBuf::from("/nonexistent"),
                child: None,
                alive: true,
            });
        }
        let cfg = haproxy_config(15000, &nodes);
        for n in &nodes {
            let line = format!(
                "server {} 127.0.0.1:{} maxconn 100 check port {}\n",
                n.name,
                n.client_proxy.addr().port(),
                n.check.as_ref().unwrap().port
            );
            assert!(cfg.contains(&line), "{line} in\n{cfg}");
        }
        assert!(!cfg.contains("backup"), "the check alone picks the writer");
        // Nothing listens there: the check says 503, so HAProxy sends nobody.
        let port = nodes[0].check.as_ref().unwrap().port;
        let (code, _) = procs::http(port, "GET", "/", None, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(code, 503);
    }
}
