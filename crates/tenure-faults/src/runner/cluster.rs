//! A cluster of node processes on one name, as the nemesis drives it: spawn, find the leader,
//! kill and respawn, stop, and collect the history.

use crate::checker::DbAcquisition;
use crate::event::{self, Event, EventLog, Kind};
use crate::node::locks::LockSet;
use crate::proxy::Proxy;
use crate::resource::{self, Db};
use crate::scenario::{Fault, Scenario, Workload};
use crate::target::Target;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tenure::{BackendKind, Store};
use tokio::process::{Child, Command};

/// What every scenario shares.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The `tenure-faults` executable (re-run as `node` and `hog`).
    pub exe: PathBuf,
    pub ttl: Duration,
    pub nodes: usize,
    pub duration: Duration,
}

/// The one candidate id of every node in a shared-id scenario.
pub const SHARED_ID: &str = "shared-id";

/// One node process (one incarnation of a slot).
pub struct Node {
    pub id: String,
    /// The candidate / holder id it campaigns with.
    pub candidate: String,
    pub slot: usize,
    pub child: Child,
    pub events: PathBuf,
    pub alive: bool,
}

impl Node {
    pub fn pid(&self) -> Option<nix::unistd::Pid> {
        self.child
            .id()
            .filter(|_| self.alive)
            .map(|p| nix::unistd::Pid::from_raw(i32::try_from(p).expect("a pid fits in i32")))
    }
}

pub struct Cluster {
    pub dir: PathBuf,
    pub kind: BackendKind,
    /// The URL the nodes are given (`Cluster::start`: the target's).
    pub url: String,
    pub name: String,
    pub workload: Workload,
    /// The lock workload's leases (unused by the elector workload).
    pub locks: LockSet,
    pub shared_id: bool,
    /// Slot `i` campaigns with priority `i` (`Scenario::priorities`).
    pub priorities: bool,
    pub table: String,
    pub settings: Settings,
    pub nemesis: EventLog,
    pub nodes: Vec<Node>,
    /// One proxy per slot, when the scenario puts a network between nodes and the database.
    pub proxies: Vec<Proxy>,
    /// Extra environment of every node (`faketime`).
    pub env: Vec<(String, String)>,
    /// Whether the nodes mint terms in the database's epochs (`false`: `--no-epochs`, the
    /// negative control of an asynchronous failover). Set before the nodes are spawned.
    pub epochs: bool,
    store: Store,
    incarnations: Vec<u32>,
}

fn unique(prefix: &str) -> String {
    format!("{prefix}{:08x}", rand::random::<u32>())
}

impl Cluster {
    /// Creates the register table and starts `settings.nodes` nodes.
    pub async fn start(
        target: &Target,
        settings: &Settings,
        dir: &Path,
        scenario: &Scenario,
        env: Vec<(String, String)>,
    ) -> Result<Cluster, String> {
        let mut cluster = Cluster::prepare(target, settings, dir, scenario, env).await?;
        for slot in 0..settings.nodes {
            cluster.spawn(slot)?;
        }
        Ok(cluster)
    }

    /// Creates the register table, but starts no node: the caller may point the nodes
    /// elsewhere ([`Cluster::url`]: a replica of the target, say) and [`Cluster::spawn`] them.
    pub async fn prepare(
        target: &Target,
        settings: &Settings,
        dir: &Path,
        scenario: &Scenario,
        env: Vec<(String, String)>,
    ) -> Result<Cluster, String> {
        let proxied = scenario.fault == Fault::Proxy;
        let name = unique(&format!("faults-{}-", scenario.name));
        let spread = scenario.workload == Workload::Spread;
        let locks = LockSet {
            base: name.clone(),
            // The spreading group's shards: two per member.
            locks: if spread { 6 } else { 2 },
            permits: if spread { 0 } else { 2 },
            spread,
        };
        let slots = match scenario.workload {
            Workload::Elector => 1,
            Workload::Locks | Workload::Spread => locks.slots(),
            Workload::EtcdLock | Workload::EtcdUnfenced => {
                return Err("an etcd workload runs no node (crate::etcd)".into())
            }
        };
        let url = match target.kind {
            BackendKind::Sqlite => format!("sqlite://{}", dir.join("faults.db").display()),
            _ => target.url.clone(),
        };
        let (db, store) = Db::connect(&url, Duration::from_secs(10), true)
            .await
            .map_err(|e| e.to_string())?;
        store.migrate().await.map_err(|e| e.to_string())?;
        let table = unique("tf_register_");
        for sql in resource::setup_sql(target.kind, &table, slots) {
            db.execute(&sql).await?;
        }
        let mut proxies = Vec::new();
        if proxied {
            let upstream = upstream_addr(&url)?;
            for _ in 0..settings.nodes {
                proxies.push(Proxy::start(upstream).await.map_err(|e| e.to_string())?);
            }
        }
        let cluster = Cluster {
            dir: dir.to_path_buf(),
            kind: target.kind,
            url,
            name,
            workload: scenario.workload,
            locks,
            shared_id: scenario.shared_id,
            priorities: scenario.priorities,
            table,
            settings: settings.clone(),
            nemesis: EventLog::create(&dir.join("nemesis.jsonl"), "nemesis")
                .map_err(|e| e.to_string())?,
            nodes: Vec::new(),
            proxies,
            env,
            epochs: true,
            store,
            incarnations: vec![0; settings.nodes],
        };
        Ok(cluster)
    }

    /// The stop file of a node: if it appears, the node stops itself inside its next fenced
    /// write transaction.
    pub fn stop_file(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.stop"))
    }

    /// The priority `slot` campaigns with: its index where the scenario has priorities.
    fn priority_of(&self, slot: usize) -> i32 {
        if self.priorities {
            i32::try_from(slot).unwrap_or(i32::MAX)
        } else {
            0
        }
    }

    /// Starts a new incarnation of `slot`.
    pub fn spawn(&mut self, slot: usize) -> Result<(), String> {
        self.incarnations[slot] += 1;
        let id = format!("n{}.{}", slot + 1, self.incarnations[slot]);
        let candidate = if self.shared_id {
            SHARED_ID.to_string()
        } else {
            id.clone()
        };
        let workload = match self.workload {
            Workload::Elector => "elector",
            Workload::Locks => "locks",
            Workload::Spread => "spread",
            Workload::EtcdLock | Workload::EtcdUnfenced => "etcd",
        };
        let events = self.dir.join(format!("{id}.jsonl"));
        let url = match self.proxies.get(slot) {
            Some(proxy) => via(&self.url, proxy.addr())?,
            None => self.url.clone(),
        };
        let log_path = self.dir.join(format!("{id}.log"));
        let log =
            std::fs::File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let child = Command::new(&self.settings.exe)
            .arg("node")
            .args(["--url", &url, "--name", &self.name, "--id", &id])
            .args(["--candidate", &candidate, "--workload", workload])
            .args(["--locks", &self.locks.locks.to_string()])
            .args(["--permits", &self.locks.permits.to_string()])
            .arg("--events")
            .arg(&events)
            .args(["--ttl-ms", &self.settings.ttl.as_millis().to_string()])
            .args(["--table", &self.table])
            .args(["--work-ms", &crate::node::WORK.as_millis().to_string()])
            .arg("--stop-file")
            .arg(self.stop_file(&id))
            .args(["--priority", &self.priority_of(slot).to_string()])
            .args((!self.epochs).then_some("--no-epochs"))
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("{}: {e}", self.settings.exe.display()))?;
        self.nodes.push(Node {
            id,
            candidate,
            slot,
            child,
            events,
            alive: true,
        });
        Ok(())
    }

    /// The index of the live node the database names as leader now. When several live nodes
    /// share the holder's id, it is the one whose history says it leads (the first of them if
    /// more than one does; none if none does yet).
    ///
    /// Under the clock fault on SQLite, the database clock is each process's own wall clock and
    /// the runner's is not faked: there the holder column is taken as it is, without the
    /// runner's (different) view of its expiry.
    pub async fn leader(&self) -> Option<usize> {
        let holder = if self.kind == BackendKind::Sqlite && !self.env.is_empty() {
            let snapshot = self.store.get(&self.name).await.ok()?;
            snapshot.leases.into_iter().next()?.holder?
        } else {
            self.store.leader(&self.name).await.ok()??.holder
        };
        let named = |n: &Node| n.alive && n.candidate == holder;
        if !self.shared_id {
            return self.nodes.iter().position(named);
        }
        self.nodes
            .iter()
            .position(|n| named(n) && believes(&n.events))
    }

    /// Waits up to `timeout` for a live leader.
    pub async fn wait_leader(&self, timeout: Duration) -> Option<usize> {
        let until = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(i) = self.leader().await {
                return Some(i);
            }
            if tokio::time::Instant::now() >= until {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGKILLs node `i` and reaps it.
    pub async fn kill(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let _ = node.child.start_kill();
        let _ = node.child.wait().await;
        node.alive = false;
    }

    /// Stops every node: SIGCONT (a stopped node cannot exit), SIGTERM, and SIGKILL after 5 s.
    pub async fn stop_all(&mut self) {
        use nix::sys::signal::{kill, Signal};
        for node in &self.nodes {
            if let Some(pid) = node.pid() {
                let _ = kill(pid, Signal::SIGCONT);
                let _ = kill(pid, Signal::SIGTERM);
            }
        }
        for node in &mut self.nodes {
            if node.alive {
                if tokio::time::timeout(Duration::from_secs(5), node.child.wait())
                    .await
                    .is_err()
                {
                    let _ = node.child.start_kill();
                    let _ = node.child.wait().await;
                }
                node.alive = false;
            }
        }
    }

    /// The merged history of every node and the nemesis, and for each lease the nodes held
    /// (the election, or every lock and permit), the database's acquisitions in the order it
    /// recorded them.
    pub async fn collect(&self) -> Result<(Vec<Event>, Leases), String> {
        let mut histories =
            vec![event::read(&self.dir.join("nemesis.jsonl")).map_err(|e| e.to_string())?];
        for node in &self.nodes {
            histories.push(event::read(&node.events).unwrap_or_default());
        }
        let names = match self.workload {
            Workload::Elector => vec![self.name.clone()],
            Workload::Locks | Workload::Spread => self.locks.leases(),
            Workload::EtcdLock | Workload::EtcdUnfenced => Vec::new(),
        };
        let mut leases = HashMap::new();
        for name in names {
            let acquisitions = self.acquisitions(&name).await?;
            leases.insert(name, acquisitions);
        }
        Ok((event::merge(histories), leases))
    }

    async fn acquisitions(&self, name: &str) -> Result<Vec<DbAcquisition>, String> {
        let mut rows = self
            .store
            .history(name, 100_000)
            .await
            .map_err(|e| e.to_string())?;
        rows.sort_by_key(|r| r.id);
        let acquisitions = rows
            .into_iter()
            .filter(|r| {
                matches!(
                    r.event.as_str(),
                    "acquired" | "taken_over_expired" | "forced"
                )
            })
            .map(|r| DbAcquisition {
                term: r.term,
                holder: r.holder.unwrap_or_default(),
            })
            .collect();
        Ok(acquisitions)
    }
}

/// The database's acquisitions of each lease, by name.
pub type Leases = HashMap<String, Vec<DbAcquisition>>;

/// Whether a node's history ends inside a tenure: its last `gained` has no `stepped_down`.
fn believes(events: &Path) -> bool {
    event::read(events)
        .unwrap_or_default()
        .iter()
        .rev()
        .find_map(|e| match e.kind {
            Kind::Gained { .. } => Some(true),
            Kind::SteppedDown { .. } => Some(false),
            _ => None,
        })
        .unwrap_or(false)
}

/// The host and port a database URL points at.
fn upstream_addr(url: &str) -> Result<std::net::SocketAddr, String> {
    let parsed = url::Url::parse(url).map_err(|e| e.to_string())?;
    let host = parsed.host_str().ok_or("the URL has no host")?;
    let port = parsed
        .port_or_known_default()
        .or(match parsed.scheme() {
            "mysql" | "mariadb" => Some(3306),
            _ => Some(5432),
        })
        .unwrap_or(5432);
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port))
        .map_err(|e| e.to_string())?
        .next()
        .ok_or_else(|| format!("{host} has no address"))
}

/// `url` with its host and port replaced by `addr`.
fn via(url: &str, addr: std::net::SocketAddr) -> Result<String, String> {
    let mut parsed = url::Url::parse(url).map_err(|e| e.to_string())?;
    parsed
        .set_host(Some(&addr.ip().to_string()))
        .map_err(|e| e.to_string())?;
    parsed
        .set_port(Some(addr.port()))
        .map_err(|()| "cannot set the port".to_string())?;
    Ok(parsed.to_string())
}
