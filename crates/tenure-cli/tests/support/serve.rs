//! `tenure serve` in the tests (`tests/serve_*.rs`):
//!
//! - [`Db`]: one test's database ([`TestDb`]) with a library store on it.
//! - [`Server`]: the real binary serving on 127.0.0.1 with an ephemeral port. It is stopped
//!   when dropped, and dies with the test's thread if the test process dies (parent-death
//!   signal), so no server outlives its test.
//! - [`http`]: a small HTTP/1.1 client on a plain socket, so that a test can also send what a
//!   polite client would not (oversized or malformed requests).

use super::{wait_for_exit, TestDb};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::ops::Deref;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
pub(crate) use tenure::BackendKind;
use tenure::Store;

// === databases ===

/// One test's database, with a library store on it (tables created) for setting up and
/// checking leases.
pub(crate) struct Db {
    pub store: Store,
    db: TestDb,
}

impl Deref for Db {
    type Target = TestDb;

    fn deref(&self) -> &TestDb {
        &self.db
    }
}

impl Db {
    /// A database on `kind`, or `None` after printing `SKIPPED: …` (panics under CI=true).
    pub(crate) async fn new(kind: BackendKind) -> Option<Db> {
        let db = TestDb::new(kind).await?;
        let store = db.store().await;
        Some(Db { store, db })
    }

    /// `tenure serve ARGS…` on this database, started and listening.
    pub(crate) fn serve(&self, args: &[&str]) -> Server {
        Server::start(self, args, true)
    }

    /// `tenure serve ARGS…` without `--token-file` (as a fresh etcd, which has no auth).
    pub(crate) fn serve_without_token(&self, args: &[&str]) -> Server {
        Server::start(self, args, false)
    }

    /// A campaign through the library (not through a server).
    pub(crate) async fn campaign(&self, name: &str, who: &str, ttl_ms: u64) -> tenure::Applied {
        let op = super::campaign_op(who, ttl_ms);
        self.store.apply(name, &op, who).await.expect("campaign")
    }

    /// The live holder of `name`, if any.
    pub(crate) async fn holder(&self, name: &str) -> Option<String> {
        self.store
            .leader(name)
            .await
            .expect("leader")
            .map(|l| l.holder)
    }
}

// === the server ===

/// The admin token every test server reads from its token file.
pub(crate) const TOKEN: &str = "serve-test-token-4b7c1e";

/// A running `tenure serve`.
pub(crate) struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// The etcd API's address, with `--etcd-listen`.
    pub etcd: Option<SocketAddr>,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    fn start(db: &Db, args: &[&str], token: bool) -> Server {
        let mut command = db.tenure();
        command.env("XDG_STATE_HOME", db.dir().join("state")).args([
            "serve",
            "--listen",
            "127.0.0.1:0",
        ]);
        if token {
            let token_file = db.dir().join("token");
            std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
            command.arg("--token-file").arg(&token_file);
        }
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: prctl only, between fork and exec.
        unsafe {
            command.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                    .map_err(std::io::Error::from)
            });
        }
        let mut child = command.spawn().expect("spawn tenure serve");
        let (tx, rx) = mpsc::channel();
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let pipe = child.stderr.take().expect("stderr");
        let etcd = Arc::new(Mutex::new(None));
        let etcd_seen = Arc::clone(&etcd);
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                // Printed before the main listener's line.
                if let Some(addr) = line.strip_prefix("tenure: etcd API on http://") {
                    *etcd_seen.lock().expect("etcd address") = addr.parse::<SocketAddr>().ok();
                }
                if let Some(addr) = line.strip_prefix("tenure: listening on http://") {
                    let _ = tx.send(addr.to_string());
                }
                let mut all = sink.lock().expect("stderr");
                all.push_str(&line);
                all.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(addr) => addr.parse().expect("a socket address"),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "tenure serve did not start:\n{}",
                    stderr.lock().expect("stderr")
                );
            }
        };
        let etcd = *etcd.lock().expect("etcd address");
        Server {
            child,
            addr,
            etcd,
            stderr,
        }
    }

    /// The URL of `path` on this server.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub(crate) fn get(&self, path: &str) -> Reply {
        http(self.addr, "GET", path, &[], b"")
    }

    /// POST with the admin token and a JSON body.
    pub(crate) fn admin(&self, path: &str, body: &str) -> Reply {
        let auth = format!("Bearer {TOKEN}");
        http(
            self.addr,
            "POST",
            path,
            &[
                ("Authorization", &auth),
                ("Content-Type", "application/json"),
            ],
            body.as_bytes(),
        )
    }

    /// Everything the server printed on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr").clone()
    }

    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    /// SIGKILL: the server dies as in a crash, without leaving anything.
    pub(crate) fn signal_kill(&self) {
        let pid = nix::unistd::Pid::from_raw(self.pid());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }

    /// SIGTERM, then waits (at most `within`) for the exit.
    pub(crate) fn terminate(&mut self, within: Duration) -> Option<ExitStatus> {
        let pid = nix::unistd::Pid::from_raw(self.pid());
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        wait_for_exit(&mut self.child, within)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            if self.terminate(Duration::from_secs(5)).is_none() {
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
        }
    }
}

// === a small HTTP client ===

/// An HTTP answer.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: u16,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The `X-Tenure-Index` header.
    pub(crate) fn index(&self) -> u64 {
        self.header("x-tenure-index")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no index header: {self:?}"))
    }

    /// Panics unless this is `status` with a JSON error that mentions `needle`.
    pub(crate) fn assert_error(&self, status: u16, needle: &str) {
        assert_eq!(self.status, status, "{}", self.text());
        let body = self.json();
        let message = body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no JSON error: {body}"));
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }
}

/// One request on a fresh connection (`Connection: close`).
pub(crate) fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Reply {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    if !body.is_empty() || method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    raw(addr, &request)
}

/// Sends `request` as it is and reads the answer (at most 60 s).
pub(crate) fn raw(addr: SocketAddr, request: &[u8]) -> Reply {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    // The server may answer (413) and close before reading everything: a failed write is fine.
    let _ = stream.write_all(request);
    let mut bytes = Vec::new();
    let _ = stream.read_to_end(&mut bytes);
    parse(&bytes)
}

fn parse(bytes: &[u8]) -> Reply {
    let split = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or_else(|| panic!("no complete answer: {:?}", String::from_utf8_lossy(bytes)));
    let head = String::from_utf8_lossy(&bytes[..split]);
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .expect("status line");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let rest = &bytes[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked {
        unchunk(rest)
    } else {
        rest.to_vec()
    };
    Reply {
        status,
        headers,
        body,
    }
}

fn unchunk(mut rest: &[u8]) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let Some(end) = rest.windows(2).position(|w| w == b"\r\n") else {
            return body;
        };
        let size_text = String::from_utf8_lossy(&rest[..end]);
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or(0);
        if size == 0 {
            return body;
        }
        let start = end + 2;
        body.extend_from_slice(&rest[start..(start + size).min(rest.len())]);
        rest = &rest[(start + size + 2).min(rest.len())..];
    }
}

/// Polls `check` every 20 ms until it returns `Some`, at most `within`.
pub(crate) fn eventually<T>(
    within: Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "not within {within:?}: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A scratch path under `dir`.
pub(crate) fn path_in(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}
