//! The real etcd of a comparison: Debian's etcd-server, on free loopback ports, its data in
//! a temporary directory under /tmp (removed when it stops).

use super::etcdctl_at;
use crate::support::{under_ci, wait_for_exit};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The real etcd's binary (Debian's etcd-server).
pub(crate) const ETCD: &str = "/usr/bin/etcd";
/// Debian's etcdctl (etcd-client).
pub(crate) const ETCDCTL: &str = "/usr/bin/etcdctl";

/// Whether Debian's etcd and etcdctl are installed; without them a side-by-side test prints
/// `SKIPPED: …` (a failure under `CI=true`: `.ci/run` installs them).
pub(crate) fn etcd_installed() -> bool {
    if Path::new(ETCD).exists() && Path::new(ETCDCTL).exists() {
        return true;
    }
    if under_ci() {
        panic!("{ETCD} and {ETCDCTL} are needed under CI=true (apt-get install etcd-server etcd-client)");
    }
    eprintln!("SKIPPED: {ETCD} or {ETCDCTL} missing (apt-get install etcd-server etcd-client)");
    false
}

/// A real etcd on free loopback ports, its data in a temporary directory; killed and its
/// data removed when dropped (and killed if the test process dies).
pub(crate) struct RealEtcd {
    child: Child,
    pub addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl RealEtcd {
    /// Starts one and waits until it answers (at most 30 s); a start that loses its ports to
    /// another process is tried again.
    pub(crate) fn start() -> RealEtcd {
        let mut last = String::new();
        for _ in 0..3 {
            match RealEtcd::try_start() {
                Ok(etcd) => return etcd,
                Err(e) => last = e,
            }
        }
        panic!("the real etcd did not start: {last}");
    }

    fn try_start() -> Result<RealEtcd, String> {
        let dir = tempfile::Builder::new()
            .prefix("tenure-test-etcd-")
            .tempdir_in("/tmp")
            .map_err(|e| e.to_string())?;
        let (client, peer) = (free_port(), free_port());
        let log = std::fs::File::create(dir.path().join("etcd.log")).map_err(|e| e.to_string())?;
        let mut command = Command::new(ETCD);
        command
            .arg("--name=reference")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls=http://{client}"))
            .arg(format!("--advertise-client-urls=http://{client}"))
            .arg(format!("--listen-peer-urls=http://{peer}"))
            .arg(format!("--initial-advertise-peer-urls=http://{peer}"))
            .arg(format!("--initial-cluster=reference=http://{peer}"))
            .arg("--logger=zap")
            .arg("--log-outputs=stderr")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        // SAFETY: prctl only, between fork and exec.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let child = command.spawn().map_err(|e| format!("spawn {ETCD}: {e}"))?;
        let mut etcd = RealEtcd {
            child,
            addr: client,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = etcd.child.try_wait() {
                return Err(format!("etcd exited ({status}):\n{}", etcd.log()));
            }
            if healthy(client) {
                return Ok(etcd);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("etcd did not answer within 30 s:\n{}", etcd.log()))
    }

    /// Turns authentication on: a user `root` (with etcd's root role) whose password is the
    /// test token, as tenure's `--token-file` holds it.
    pub(crate) fn enable_auth(&self) {
        let url = format!("http://{}", self.addr);
        let token = crate::support::serve::TOKEN;
        for args in [
            vec!["user", "add", &format!("root:{token}")],
            vec!["user", "grant-role", "root", "root"],
            vec!["auth", "enable"],
        ] {
            let out = etcdctl_at(&url, &args);
            assert_eq!(out.code, Some(0), "etcdctl {args:?}: {out:?}");
        }
    }

    /// What etcd logged.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

impl Drop for RealEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = wait_for_exit(&mut self.child, Duration::from_secs(10));
    }
}

/// A free loopback port (the kernel's choice, released for the server to take).
pub(crate) fn free_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address")
}

/// Whether `GET /health` answers 200 with `{"health":"true"}`. An etcd still starting may
/// accept the connection and close it without an answer: not yet healthy (asked again).
fn healthy(addr: SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200))
    else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = format!("GET /health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    let mut answer = Vec::new();
    if stream.write_all(request.as_bytes()).is_err() || stream.read_to_end(&mut answer).is_err() {
        return false;
    }
    let answer = String::from_utf8_lossy(&answer);
    answer.starts_with("HTTP/1.1 200") && answer.contains(r#""health":"true""#)
}
