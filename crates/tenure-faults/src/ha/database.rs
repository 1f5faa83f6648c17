//! The cluster a scenario runs on, Patroni, Galera or a MariaDB pair, behind one face: build it, find its
//! primary, kill a member, and measure when a write through HAProxy first commits on another
//! member (the database's failover).

use super::cluster;
use super::galera::Galera;
use super::patroni::{self, Patroni};
use super::replication::Replication;
use super::scenario::ClusterKind;
use crate::clock;
use std::time::Duration;
use tenure::BackendKind;
use tokio::time::sleep;

/// The cluster a scenario runs on.
pub enum Database {
    Patroni(Patroni),
    Galera(Galera),
    /// A MariaDB primary and its asynchronous replica.
    Replication(Replication),
}

impl Database {
    /// Builds a cluster of `kind`; its logs are copied to `logs` when it is torn down.
    pub async fn start(kind: ClusterKind, logs: &std::path::Path) -> Result<Database, String> {
        // Generous, for a loaded 2-core machine (builds there took 10-20 s); the wait ends as
        // soon as the cluster is up, or as soon as a member's process has exited.
        let timeout = Duration::from_secs(120);
        Ok(match kind {
            ClusterKind::Galera => Database::Galera(Galera::start(3, timeout, logs).await?),
            ClusterKind::MariaDb => Database::Galera(Galera::start(1, timeout, logs).await?),
            ClusterKind::MariaDbAsync => {
                Database::Replication(Replication::start(timeout, logs).await?)
            }
            kind => Database::Patroni(
                Patroni::start(kind == ClusterKind::PatroniSync, timeout, logs).await?,
            ),
        })
    }

    pub fn kind(&self) -> BackendKind {
        match self {
            Database::Patroni(_) => BackendKind::Postgres,
            Database::Galera(_) | Database::Replication(_) => BackendKind::MySql,
        }
    }

    pub fn admin_url(&self) -> String {
        match self {
            Database::Patroni(p) => p.url("postgres"),
            Database::Galera(g) => g.url("mysql"),
            Database::Replication(r) => r.url("mysql"),
        }
    }

    /// The member clients write to now: Patroni's leader, HAProxy's first live Galera node, or
    /// the MariaDB server that takes writes.
    pub async fn primary(&self) -> Option<usize> {
        match self {
            Database::Patroni(p) => p.primary().await,
            Database::Galera(g) => g.primary().await,
            Database::Replication(r) => r.primary().await,
        }
    }

    /// The name and server port of member `i`.
    pub fn member(&self, i: usize) -> (String, u16) {
        match self {
            Database::Patroni(p) => (p.members[i].name.clone(), p.members[i].pg_port),
            Database::Galera(g) => (g.nodes[i].name.clone(), g.nodes[i].port),
            Database::Replication(r) => (r.nodes[i].name.clone(), r.nodes[i].port),
        }
    }

    /// A URL of database `db` on member `i` itself, not through HAProxy.
    pub fn direct_url(&self, i: usize, db: &str) -> String {
        match self {
            Database::Patroni(p) => p.direct_url(i, db),
            Database::Galera(g) => g.direct_url(i, db),
            Database::Replication(r) => r.direct_url(i, db),
        }
    }

    pub fn kill(&mut self, i: usize) {
        match self {
            Database::Patroni(p) => p.kill(i),
            Database::Galera(g) => g.kill(i),
            Database::Replication(r) => r.kill(i),
        }
    }

    pub async fn roles(&self) -> Result<Vec<patroni::Role>, String> {
        match self {
            Database::Patroni(p) => p.roles().await,
            Database::Galera(_) | Database::Replication(_) => Err("no manager".into()),
        }
    }
}

/// From `since` (monotonic ns), how long until a write through `url` committed on a server
/// other than the one on `old_port`: a probe starts every 100 ms (each waits up to 2 s, so a
/// probe stuck on the old primary does not hide a new one), for at most `timeout`.
pub(super) async fn wait_writable(
    kind: BackendKind,
    url: &str,
    old_port: u16,
    since: u64,
    timeout: Duration,
) -> Option<Duration> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let until = tokio::time::Instant::now() + timeout;
    let mut probes = tokio::task::JoinSet::new();
    loop {
        let tx = tx.clone();
        let url = url.to_string();
        probes.spawn(async move {
            let probe = cluster::write_probe(kind, &url, Duration::from_secs(2)).await;
            if let Ok(port) = probe {
                if port != old_port {
                    let _ = tx.send(clock::now_ns());
                }
            }
        });
        tokio::select! {
            Some(at) = rx.recv() => return Some(clock::between(since, at)),
            () = sleep(Duration::from_millis(100)) => {}
        }
        if tokio::time::Instant::now() >= until {
            return None;
        }
    }
}
