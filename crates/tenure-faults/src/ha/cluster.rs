//! What the Patroni and Galera harnesses share:
//!
//! - [`Stage`]: the private directory a cluster lives in, whose name is the cluster's marker
//!   (every process of the cluster shows it in its command line), the processes that serve all
//!   its members (etcd, HAProxy), and the teardown: kill them, kill every process that still
//!   shows the marker, keep the logs; its ports are reserved among tenure-faults runs until
//!   then.
//! - [`haproxy_config`]: HAProxy in front of the members' client proxies ([`proxy_to`]), each
//!   member checked over HTTP.
//! - [`wait_until`]: waiting for the cluster (a state, a write) with a bound whose error says
//!   what was awaited and what was seen last, or, at once, why it can never come.
//! - [`write_probe`]: one write through a URL, answered with the port of the server that
//!   committed it.
//! - [`missing_tools`] / [`missing_user`]: what a harness needs and this machine lacks.
//! - [`install_mariadb`]: a MariaDB member's data directory, with what went wrong if it fails.

use super::procs::{self, Group};
use crate::proxy::Proxy;
use nix::unistd::{Uid, User};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use tenure::BackendKind;

/// Initializes the data directory of the MariaDB member configured by `cnf` with
/// `mariadb-install-db`. Its bootstrap server writes to the member's `log-error` file, not to
/// stderr, so a failure is told with the exit status, the tail of what the tool printed and the
/// tail of `error_log`.
pub fn install_mariadb(name: &str, cnf: &Path, error_log: &Path) -> Result<(), String> {
    let init = Command::new("mariadb-install-db")
        .arg(format!("--defaults-file={}", cnf.display()))
        .args(["--user=mysql", "--auth-root-authentication-method=normal"])
        .output()
        .map_err(|e| format!("mariadb-install-db ({name}): {e}"))?;
    if init.status.success() {
        return Ok(());
    }
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&init.stdout),
        String::from_utf8_lossy(&init.stderr)
    );
    let logged = std::fs::read_to_string(error_log).unwrap_or_default();
    Err(install_failure(
        name,
        &init.status.to_string(),
        &printed,
        error_log,
        &logged,
    ))
}

/// What a failed `mariadb-install-db` is told by: the member, the exit status, and the last
/// lines it printed and its bootstrap server logged.
fn install_failure(name: &str, status: &str, printed: &str, log: &Path, logged: &str) -> String {
    format!(
        "mariadb-install-db ({name}) {status}: printed {:?}; {} said {:?}",
        tail(printed, 3),
        log.display(),
        tail(logged, 3)
    )
}

/// The last `n` non-empty lines of `text`, joined by " | ".
fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// The tools of `(tool, Debian package)` that this machine lacks, as "tool (Debian package
/// package)".
pub fn missing_tools(tools: &[(&str, &str)]) -> Vec<String> {
    tools
        .iter()
        .filter(|(tool, _)| procs::which(tool).is_none())
        .map(|(tool, package)| format!("{tool} (Debian package {package})"))
        .collect()
}

/// What running a server as `user` needs: that user (`why` it must be that one) and root.
pub fn missing_user(user: &str, why: &str, server: &str) -> Vec<String> {
    let mut missing = Vec::new();
    if User::from_name(user).ok().flatten().is_none() {
        missing.push(format!("the user {user}{why}"));
    }
    if !Uid::effective().is_root() {
        missing.push(format!("root (to run {server} as the user {user})"));
    }
    missing
}

/// A private cluster's home. Its harness drops it last, once the members' own processes are
/// dead: it kills the processes it started (etcd, HAProxy), then every process whose command
/// line still shows the marker (PostgreSQL's children, Galera's state-transfer scripts), then
/// copies the logs and removes the directory.
pub struct Stage {
    dir: Option<tempfile::TempDir>,
    /// The directory's name: unique, and in the command line of every process of the cluster.
    marker: String,
    /// Where the logs go at teardown.
    logs: PathBuf,
    processes: Vec<Group>,
    /// The ports of the cluster, reserved until it is torn down.
    ports: Vec<procs::Ports>,
}

impl Stage {
    /// A new temporary directory named `prefix` + random characters; its logs go to `logs`
    /// at teardown.
    pub fn new(prefix: &str, logs: &Path) -> Result<Stage, String> {
        let dir = tempfile::Builder::new()
            .prefix(prefix)
            .tempdir()
            .map_err(|e| e.to_string())?;
        let marker = dir
            .path()
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or("a temp dir without a name")?
            .to_string();
        Ok(Stage {
            dir: Some(dir),
            marker,
            logs: logs.to_path_buf(),
            processes: Vec::new(),
            ports: Vec::new(),
        })
    }

    /// The cluster's directory.
    pub fn dir(&self) -> &Path {
        self.dir.as_ref().expect("the cluster's directory").path()
    }

    pub fn marker(&self) -> &str {
        &self.marker
    }

    /// `n` free ports for the cluster's servers, reserved among tenure-faults runs until the
    /// cluster is torn down ([`procs::free_ports`]).
    pub fn reserve_ports(&mut self, n: usize) -> Result<Vec<u16>, String> {
        let reserved = procs::free_ports(n).map_err(|e| e.to_string())?;
        let ports = reserved.ports.clone();
        self.ports.push(reserved);
        Ok(ports)
    }

    /// Starts `cmd` in the cluster's directory, its output in `log` there; killed at teardown.
    pub fn spawn(&mut self, cmd: &mut Command, log: &str) -> Result<(), String> {
        let log = self.dir().join(log);
        let group = procs::spawn_logged(cmd.current_dir(self.dir()), &log)?;
        self.processes.push(group);
        Ok(())
    }

    /// Writes `config` to `haproxy.cfg` and starts HAProxy on it (`haproxy.log`).
    pub fn start_haproxy(&mut self, config: &str) -> Result<(), String> {
        let haproxy = procs::which("haproxy").ok_or("no haproxy")?;
        let cfg = self.dir().join("haproxy.cfg");
        std::fs::write(&cfg, config).map_err(|e| format!("{}: {e}", cfg.display()))?;
        self.spawn(
            Command::new(haproxy).arg("-db").arg("-f").arg(&cfg),
            "haproxy.log",
        )
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        self.processes.clear();
        procs::kill_marked(&self.marker);
        self.ports.clear();
        if let Some(dir) = self.dir.take() {
            procs::copy_logs(dir.path(), &self.logs);
        }
    }
}

/// A fault proxy on 127.0.0.1 in front of 127.0.0.1:`port`.
pub async fn proxy_to(port: u16) -> Result<Proxy, String> {
    Proxy::start(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
        .map_err(|e| e.to_string())
}

/// One server behind HAProxy.
pub struct Server<'a> {
    pub name: &'a str,
    /// Where HAProxy sends its clients: the member's client proxy.
    pub addr: SocketAddr,
    /// The port of its HTTP check.
    pub check_port: u16,
    /// More options of its `server` line (` backup`, say), each with its leading space.
    pub options: &'a str,
}

/// HAProxy's configuration: one TCP listener `listen` on 127.0.0.1:`port` in front of
/// `servers`, each checked with the HTTP request `check` (200 = take clients) every 250 ms,
/// marked down after two failed checks (its sessions cut at once) and up after one.
pub fn haproxy_config(listen: &str, port: u16, check: &str, servers: &[Server<'_>]) -> String {
    let mut cfg = format!(
        "global\n    maxconn 300\n\ndefaults\n    mode tcp\n    timeout connect 1s\n    \
         timeout client 1h\n    timeout server 1h\n    timeout check 1s\n\n\
         listen {listen}\n    bind 127.0.0.1:{port}\n    option httpchk {check}\n    \
         http-check expect status 200\n    \
         default-server inter 250ms fall 2 rise 1 on-marked-down shutdown-sessions\n"
    );
    for s in servers {
        cfg.push_str(&format!(
            "    server {} {}:{} maxconn 100 check port {}{}\n",
            s.name,
            s.addr.ip(),
            s.addr.port(),
            s.check_port,
            s.options
        ));
    }
    cfg
}

/// What a check saw instead of what it waits for.
#[derive(Debug, PartialEq, Eq)]
pub enum Wait {
    /// Not yet: what it saw.
    NotYet(String),
    /// Never: why it cannot come any more (a process it needs has exited, say).
    Never(String),
}

impl From<String> for Wait {
    fn from(seen: String) -> Wait {
        Wait::NotYet(seen)
    }
}

/// Asks `check` every `every` until it answers `Ok`, for at most `within`, or until it says
/// [`Wait::Never`]. The error says what was awaited (`what`), and the bound and what was seen
/// last, or why it could never come.
pub async fn wait_until<T, F, Fut>(
    what: &str,
    within: Duration,
    every: Duration,
    mut check: F,
) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Wait>>,
{
    let started = tokio::time::Instant::now();
    loop {
        let last = match check().await {
            Ok(v) => return Ok(v),
            Err(Wait::NotYet(seen)) => seen,
            Err(Wait::Never(why)) => {
                let after = started.elapsed();
                return Err(format!(
                    "gave up waiting for {what} after {:.1} s: {why}",
                    after.as_secs_f64()
                ));
            }
        };
        if started.elapsed() >= within {
            return Err(format!("waited {within:?} for {what}; last seen: {last}"));
        }
        tokio::time::sleep(every).await;
    }
}

/// One write through `url` (a probe table in its database), within `timeout`: the database is
/// writable for clients. Returns the port of the server that committed it.
pub async fn write_probe(kind: BackendKind, url: &str, timeout: Duration) -> Result<u16, String> {
    let attempt = async {
        match kind {
            BackendKind::MySql => mysql_probe(url).await,
            _ => postgres_probe(url).await,
        }
        .map_err(|e| e.to_string())
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .map_err(|_| format!("no write within {timeout:?}"))?
}

async fn postgres_probe(url: &str) -> Result<u16, sqlx::Error> {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(url).await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS tf_probe (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)")
        .execute(&mut c)
        .await?;
    sqlx::query(
        "INSERT INTO tf_probe VALUES (1, 1) ON CONFLICT (id) DO UPDATE SET n = tf_probe.n + 1",
    )
    .execute(&mut c)
    .await?;
    let port: i32 = sqlx::query_scalar("SELECT inet_server_port()")
        .fetch_one(&mut c)
        .await?;
    let _ = c.close().await;
    Ok(u16::try_from(port).expect("a TCP port"))
}

async fn mysql_probe(url: &str) -> Result<u16, sqlx::Error> {
    use sqlx::Connection;
    let mut c = sqlx::MySqlConnection::connect(url).await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS tf_probe (id INTEGER PRIMARY KEY, n BIGINT NOT NULL) \
         ENGINE=InnoDB",
    )
    .execute(&mut c)
    .await?;
    sqlx::query("INSERT INTO tf_probe VALUES (1, 1) ON DUPLICATE KEY UPDATE n = n + 1")
        .execute(&mut c)
        .await?;
    let port: i64 = sqlx::query_scalar("SELECT CAST(@@port AS SIGNED)")
        .fetch_one(&mut c)
        .await?;
    let _ = c.close().await;
    Ok(u16::try_from(port).expect("a TCP port"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_install_is_told_by_the_last_lines_that_say_something() {
        assert_eq!(tail("a\nb\n\n  \nc\nd\n", 3), "b | c | d");
        assert_eq!(tail("only\n", 3), "only");
        assert_eq!(tail("", 3), "");
    }

    #[test]
    fn a_failed_install_names_the_member_its_status_and_its_error_log() {
        let e = install_failure(
            "m2",
            "exit status: 1",
            "Installing MariaDB/MySQL system tables in '/x/data' ...\n",
            Path::new("/x/error.log"),
            "[Note] starting\n[ERROR] Can't start server: Bind on TCP/IP port\n",
        );
        assert_eq!(
            e,
            "mariadb-install-db (m2) exit status: 1: printed \"Installing MariaDB/MySQL system \
             tables in '/x/data' ...\"; /x/error.log said \"[Note] starting | [ERROR] Can't \
             start server: Bind on TCP/IP port\""
        );
    }

    #[test]
    fn haproxy_checks_each_server_over_http_and_sends_to_its_address() {
        let servers = [
            Server {
                name: "m1",
                addr: SocketAddr::from(([127, 0, 0, 1], 16001)),
                check_port: 18001,
                options: "",
            },
            Server {
                name: "m2",
                addr: SocketAddr::from(([127, 0, 0, 1], 16002)),
                check_port: 18002,
                options: " backup",
            },
        ];
        let cfg = haproxy_config("primary", 15000, "OPTIONS /primary", &servers);
        assert!(cfg.contains("listen primary\n    bind 127.0.0.1:15000\n"));
        assert!(cfg.contains("option httpchk OPTIONS /primary\n"));
        assert!(cfg.contains("on-marked-down shutdown-sessions"));
        assert!(cfg.contains("    server m1 127.0.0.1:16001 maxconn 100 check port 18001\n"));
        assert!(cfg.contains("    server m2 127.0.0.1:16002 maxconn 100 check port 18002 backup\n"));
    }

    #[tokio::test]
    async fn a_wait_that_ends_says_what_it_waited_for_and_what_it_saw_last() {
        let mut asked = 0;
        let got = wait_until("three", Duration::from_secs(5), Duration::ZERO, || {
            asked += 1;
            let n = asked;
            async move {
                if n == 3 {
                    Ok(n)
                } else {
                    Err(Wait::from(format!("{n}")))
                }
            }
        })
        .await;
        assert_eq!(got, Ok(3));
        let never = wait_until(
            "the cluster to be healthy",
            Duration::from_millis(30),
            Duration::from_millis(10),
            || async { Err::<(), _>(Wait::from("two members".to_string())) },
        )
        .await;
        assert_eq!(
            never,
            Err("waited 30ms for the cluster to be healthy; last seen: two members".to_string())
        );
        let dead = wait_until(
            "the cluster to be healthy",
            Duration::from_secs(60),
            Duration::from_millis(10),
            || async { Err::<(), _>(Wait::Never("pg3's Patroni exited".to_string())) },
        )
        .await
        .unwrap_err();
        assert!(
            dead.starts_with("gave up waiting for the cluster to be healthy after 0.")
                && dead.ends_with(" s: pg3's Patroni exited"),
            "at once, not after the bound: {dead}"
        );
    }

    #[test]
    fn the_stage_names_its_directory_by_its_marker_and_keeps_the_logs() {
        let logs = tempfile::tempdir().unwrap();
        let kept = logs.path().join("cluster-1");
        let dir = {
            let mut stage = Stage::new("tenure-stage-test-", &kept).unwrap();
            assert!(stage.marker().starts_with("tenure-stage-test-"));
            assert!(stage.dir().ends_with(stage.marker()));
            stage
                .spawn(Command::new("sh").args(["-c", "echo hello"]), "hello.log")
                .unwrap();
            let log = stage.dir().join("hello.log");
            let until = std::time::Instant::now() + Duration::from_secs(10);
            while std::fs::read_to_string(&log).unwrap_or_default() != "hello\n" {
                assert!(std::time::Instant::now() < until, "sh never wrote its log");
                std::thread::sleep(Duration::from_millis(10));
            }
            stage.dir().to_path_buf()
        };
        assert!(!dir.exists(), "removed at teardown");
        let kept_log = std::fs::read_to_string(kept.join("hello.log")).unwrap();
        assert_eq!(kept_log, "hello\n");
    }
}
