//! etcd's v3 API side by side (`tests/etcd_*.rs`): the same scenario runs against a real etcd
//! (Debian's etcd-server 3.4, started on free loopback ports with its data in a temporary
//! directory under /tmp, removed when it stops) and against `tenure serve --etcd-listen` on
//! one backend, and their transcripts must be equal. A difference is a failing test unless
//! the scenario leaves that detail out of its transcript on purpose, saying why (and
//! docs/guides/etcd.md lists it).
//!
//! - [`side_by_side!`](crate::side_by_side): for each scenario, `etcd::NAME` (the real etcd
//!   alone: the scenario's own assertions hold on the reference) and `sqlite::NAME`,
//!   `postgres::NAME`, `mysql::NAME` (both, transcripts compared).
//! - [`Target`]: where a scenario sends its requests; [`Transcript`]: what it saw, with
//!   what differs by nature (cluster and member ids, lease ids, the Raft term) normalized.
//! - [`etcdctl`]: Debian's etcdctl 3.4 (`ETCDCTL_API=3`) against a target.

use super::serve::{http, Db, Reply, Server};
use super::{under_ci, wait_for_exit, BackendKind};
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
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

/// One side of a comparison: where a scenario sends its requests.
pub(crate) struct Target {
    /// The client address (gRPC and the JSON gateway).
    pub addr: SocketAddr,
    /// `etcd` or `tenure (sqlite)` …, for messages.
    pub label: String,
    /// The tenure server behind it, if it is one (for its log in failure messages).
    pub server: Option<Server>,
}

impl Target {
    /// `http://ADDR`, as etcd's clients take an endpoint.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A POST of `json` to the JSON gateway's `path`.
    pub(crate) fn post(&self, path: &str, json: &str) -> Reply {
        http(
            self.addr,
            "POST",
            path,
            &[("Content-Type", "application/json")],
            json.as_bytes(),
        )
    }

    /// What the tenure server printed, or nothing for the real etcd.
    pub(crate) fn log(&self) -> String {
        self.server.as_ref().map(Server::stderr).unwrap_or_default()
    }
}

// === the real etcd ===

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
        let token = super::serve::TOKEN;
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

/// Whether `GET /health` answers `{"health":"true"}`.
fn healthy(addr: SocketAddr) -> bool {
    let Ok(stream) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    drop(stream);
    let reply = http(addr, "GET", "/health", &[], b"");
    reply.status == 200 && reply.text().contains("true")
}

// === the comparison ===

/// A scenario: requests against a target, and what it saw.
pub(crate) type Scenario = fn(&Target) -> Transcript;

/// One test per scenario on the real etcd alone (`etcd::NAME`) and one per backend comparing
/// tenure with it (`sqlite::NAME`, `postgres::NAME`, `mysql::NAME`).
///
/// `side_by_side!(token: NAME, …)`: the same with authentication on both sides — tenure with
/// `--token-file` (the test token, [`TOKEN`](super::serve::TOKEN)), the real etcd with a user
/// `root` whose password is that token, and auth enabled.
#[macro_export]
macro_rules! side_by_side {
    (token: $($scenario:ident),* $(,)?) => {
        mod etcd {
            $( #[test] fn $scenario() { $crate::support::etcd::reference_with(true, super::$scenario) } )*
        }
        $crate::side_by_side!(@backend token, sqlite, Sqlite, $($scenario),*);
        $crate::side_by_side!(@backend token, postgres, Postgres, $($scenario),*);
        $crate::side_by_side!(@backend token, mysql, MySql, $($scenario),*);
    };
    (@backend token, $module:ident, $kind:ident, $($scenario:ident),*) => {
        mod $module {
            $(
                #[test]
                fn $scenario() {
                    $crate::support::etcd::compare_with(true, tenure::BackendKind::$kind, super::$scenario)
                }
            )*
        }
    };
    ($($scenario:ident),* $(,)?) => {
        mod etcd {
            $( #[test] fn $scenario() { $crate::support::etcd::reference(super::$scenario) } )*
        }
        $crate::side_by_side!(@backend sqlite, Sqlite, $($scenario),*);
        $crate::side_by_side!(@backend postgres, Postgres, $($scenario),*);
        $crate::side_by_side!(@backend mysql, MySql, $($scenario),*);
    };
    (@backend $module:ident, $kind:ident, $($scenario:ident),*) => {
        mod $module {
            $(
                #[test]
                fn $scenario() {
                    $crate::support::etcd::compare(tenure::BackendKind::$kind, super::$scenario)
                }
            )*
        }
    };
}

/// Runs `scenario` on a real etcd (its own assertions must hold there).
pub(crate) fn reference(scenario: Scenario) {
    reference_with(false, scenario);
}

/// The same, with authentication on (`token`; see the macro).
pub(crate) fn reference_with(token: bool, scenario: Scenario) {
    if !etcd_installed() {
        return;
    }
    let etcd = RealEtcd::start();
    let target = Target {
        addr: etcd.addr,
        label: "etcd".into(),
        server: None,
    };
    if token {
        etcd.enable_auth();
    }
    let transcript = scenario(&target);
    if std::env::var_os("TENURE_TEST_SHOW_TRANSCRIPT").is_some() {
        eprintln!("{}", transcript.lines.join("\n"));
    }
    assert!(
        !transcript.lines.is_empty(),
        "a scenario records what it saw"
    );
}

/// Runs `scenario` on a real etcd and on `tenure serve --etcd-listen` on `kind`; their
/// transcripts must be equal.
pub(crate) fn compare(kind: BackendKind, scenario: Scenario) {
    compare_with(false, kind, scenario);
}

/// The same, with authentication on both sides (`token`; see the macro).
pub(crate) fn compare_with(token: bool, kind: BackendKind, scenario: Scenario) {
    if !etcd_installed() {
        return;
    }
    let runtime = super::runtime();
    let Some(db) = runtime.block_on(Db::new(kind)) else {
        return;
    };
    let expected = {
        let etcd = RealEtcd::start();
        if token {
            etcd.enable_auth();
        }
        scenario(&Target {
            addr: etcd.addr,
            label: "etcd".into(),
            server: None,
        })
    };
    let target = if token {
        tokened_target(&db)
    } else {
        tenure_target(&db)
    };
    let seen = scenario(&target);
    if seen.lines != expected.lines {
        panic!(
            "tenure on {kind} answered differently from etcd\n{}\n--- tenure serve's log\n{}",
            diff(&expected.lines, &seen.lines),
            target.log()
        );
    }
    drop(target);
    runtime.block_on(db.drop_tables());
}

/// `tenure serve --etcd-listen 127.0.0.1:0` on `db`, as a target.
pub(crate) fn tenure_target(db: &Db) -> Target {
    tenure_target_with(db, &[])
}

/// `tenure serve --etcd-listen 127.0.0.1:0 --token-file …` (the test token) on `db`.
pub(crate) fn tokened_target(db: &Db) -> Target {
    let server = db.serve(&["--etcd-listen", "127.0.0.1:0"]);
    let addr = server
        .etcd
        .unwrap_or_else(|| panic!("no etcd listener:\n{}", server.stderr()));
    Target {
        addr,
        label: format!("tenure ({}, with a token)", db.kind),
        server: Some(server),
    }
}

/// The same with more flags (without `--token-file`: a fresh etcd has no auth either).
pub(crate) fn tenure_target_with(db: &Db, flags: &[&str]) -> Target {
    let mut args = vec!["--etcd-listen", "127.0.0.1:0"];
    args.extend_from_slice(flags);
    let server = db.serve_without_token(&args);
    let addr = server
        .etcd
        .unwrap_or_else(|| panic!("no etcd listener:\n{}", server.stderr()));
    Target {
        addr,
        label: format!("tenure ({})", db.kind),
        server: Some(server),
    }
}

/// The two transcripts line by line, differences marked.
fn diff(expected: &[String], seen: &[String]) -> String {
    let mut out = String::from("    etcd | tenure\n");
    for i in 0..expected.len().max(seen.len()) {
        let (e, s) = (expected.get(i), seen.get(i));
        let mark = if e == s { "  " } else { "≠ " };
        out.push_str(&format!(
            "{mark}{:>3}: {}\n       {}\n",
            i,
            e.map_or("<none>", String::as_str),
            s.map_or("<none>", String::as_str)
        ));
    }
    out
}

// === transcripts ===

/// What a scenario saw, line by line, with what differs between any two etcds by nature
/// replaced by stable names: ids registered with [`Transcript::alias`], and in JSON the
/// headers' `cluster_id`, `member_id` and `raft_term`.
#[derive(Debug, Default)]
pub(crate) struct Transcript {
    pub lines: Vec<String>,
    aliases: Vec<(String, String)>,
}

impl Transcript {
    pub(crate) fn new() -> Transcript {
        Transcript::default()
    }

    /// From now on, `raw` (a lease id …) reads `name` in what is recorded.
    pub(crate) fn alias(&mut self, raw: impl Into<String>, name: impl Into<String>) {
        let raw = raw.into();
        if !raw.is_empty() {
            self.aliases.push((raw, name.into()));
        }
    }

    /// Records `what` happened and saw `text` (aliases applied).
    pub(crate) fn record(&mut self, what: &str, text: impl AsRef<str>) {
        let mut text = text.as_ref().trim_end().to_string();
        for (raw, name) in &self.aliases {
            text = text.replace(raw.as_str(), name);
        }
        self.lines.push(format!("{what}: {text}"));
    }

    /// Records a JSON answer with the ids of the cluster, the member and the Raft term left
    /// out (aliases applied to its text).
    pub(crate) fn record_json(&mut self, what: &str, json: &Value) {
        let mut json = json.clone();
        strip_ids(&mut json);
        self.record(what, json.to_string());
    }

    /// Records what etcdctl printed and how it ended.
    pub(crate) fn record_run(&mut self, what: &str, output: &Ctl) {
        self.record(what, output.summary());
    }
}

/// Leaves out what differs between two etcds by nature, wherever it sits.
pub(crate) fn strip_ids(json: &mut Value) {
    match json {
        Value::Object(map) => {
            for key in ["cluster_id", "member_id", "raft_term"] {
                map.remove(key);
            }
            for value in map.values_mut() {
                strip_ids(value);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip_ids),
        _ => {}
    }
}

// === etcdctl ===

/// What an etcdctl run printed and how it ended.
#[derive(Debug)]
pub(crate) struct Ctl {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Ctl {
    /// The exit code, stdout and the `Error:` lines of stderr (its retry warnings carry
    /// timestamps and client ids, different on every run).
    pub(crate) fn summary(&self) -> String {
        let errors: Vec<&str> = self
            .stderr
            .lines()
            .filter(|l| l.starts_with("Error:"))
            .collect();
        format!(
            "exit {:?} | {} | {}",
            self.code,
            self.stdout.trim_end().replace('\n', " ⏎ "),
            errors.join(" ⏎ ")
        )
    }

    /// Without the time a call took (`took = 1.2ms`), which differs on every run.
    pub(crate) fn without_timing(&self) -> Ctl {
        let scrub = |text: &str| {
            text.lines()
                .map(|l| match l.find("took = ") {
                    Some(i) => format!("{}took = …", &l[..i]),
                    None => l.to_string(),
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        Ctl {
            code: self.code,
            stdout: scrub(&self.stdout),
            stderr: scrub(&self.stderr),
        }
    }

    /// stdout as JSON (`-w json`), with the header's ids left out.
    pub(crate) fn json(&self) -> Value {
        let mut json: Value = serde_json::from_str(self.stdout.trim()).unwrap_or_else(|e| {
            panic!("etcdctl printed no JSON ({e}): {self:?}");
        });
        strip_ids(&mut json);
        json
    }
}

/// etcdctl (API 3) against `target`: `--endpoints=http://ADDR`, bounded in time.
pub(crate) fn etcdctl_command(target: &Target) -> Command {
    etcdctl_command_at(&target.url())
}

/// etcdctl (API 3) against the endpoints `endpoints`, as given to `--endpoints`.
pub(crate) fn etcdctl_command_at(endpoints: &str) -> Command {
    let mut command = Command::new(ETCDCTL);
    command
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--dial-timeout=5s")
        .arg("--command-timeout=15s")
        .stdin(Stdio::null());
    command
}

/// Runs etcdctl with `args` against `target` to completion (at most 30 s).
pub(crate) fn etcdctl(target: &Target, args: &[&str]) -> Ctl {
    etcdctl_input(target, args, None)
}

/// Runs etcdctl with `args` against `endpoints` (as `--endpoints` takes them).
pub(crate) fn etcdctl_at(endpoints: &str, args: &[&str]) -> Ctl {
    run_etcdctl(etcdctl_command_at(endpoints), args, None)
}

/// The same, with `input` on its standard input.
pub(crate) fn etcdctl_input(target: &Target, args: &[&str], input: Option<&[u8]>) -> Ctl {
    run_etcdctl(etcdctl_command(target), args, input)
}

fn run_etcdctl(mut command: Command, args: &[&str], input: Option<&[u8]>) -> Ctl {
    command.args(args);
    if input.is_some() {
        command.stdin(Stdio::piped());
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn etcdctl");
    if let Some(input) = input {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        let input = input.to_vec();
        std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
    }
    let out = read_all(child.stdout.take().expect("stdout"));
    let err = read_all(child.stderr.take().expect("stderr"));
    let Some(status) = wait_for_exit(&mut child, Duration::from_secs(30)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("etcdctl {args:?} did not finish within 30 s");
    };
    Ctl {
        code: status.code(),
        stdout: out.join().expect("stdout"),
        stderr: err.join().expect("stderr"),
    }
}

fn read_all(pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut text = String::new();
        let _ = BufReader::new(pipe).read_to_string(&mut text);
        text
    })
}

/// A long-running client (`etcdctl watch`, `etcdctl lock … -- cmd`, a Python script) whose
/// stdout is read line by line; killed when dropped.
pub(crate) struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    stderr: std::thread::JoinHandle<String>,
}

impl Running {
    /// Starts `command` with its stdout and stderr read.
    pub(crate) fn spawn(command: &mut Command) -> Running {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn a client");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = read_all(child.stderr.take().expect("stderr"));
        Running {
            child,
            lines,
            stderr,
        }
    }

    /// The next line of stdout, waiting at most `within`.
    pub(crate) fn line(&self, within: Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    /// The next `n` lines, each within `within`; panics (naming `what`) if one does not come.
    pub(crate) fn lines(&self, n: usize, within: Duration, what: &str) -> Vec<String> {
        (0..n)
            .map(|i| {
                self.line(within)
                    .unwrap_or_else(|| panic!("{what}: line {i} did not come within {within:?}"))
            })
            .collect()
    }

    /// Whether the process has exited.
    pub(crate) fn exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Sends `signal` to the process.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(i32::try_from(self.child.id()).expect("pid"));
        let _ = nix::sys::signal::kill(pid, signal);
    }

    /// Waits at most `within` for the exit: its code, every line of stdout and stderr; panics
    /// if it is still running then.
    pub(crate) fn complete(mut self, within: Duration) -> (Option<i32>, Vec<String>, String) {
        let Some(status) = wait_for_exit(&mut self.child, within) else {
            panic!("a client did not finish within {within:?}");
        };
        let stderr = std::mem::replace(&mut self.stderr, std::thread::spawn(String::new));
        let stderr = stderr.join().unwrap_or_default();
        // The reader ends with the pipe, after the last line.
        let mut lines = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            lines.push(line);
        }
        (status.code(), lines, stderr)
    }

    /// Waits at most `within` for the exit; its code and stderr (`None`: still running).
    pub(crate) fn finish(mut self, within: Duration) -> Option<(Option<i32>, String)> {
        let status = wait_for_exit(&mut self.child, within)?;
        let _ = self.child.kill();
        let stderr = std::mem::replace(&mut self.stderr, std::thread::spawn(String::new));
        Some((status.code(), stderr.join().unwrap_or_default()))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// === the JSON gateway's streams ===

/// A streamed answer of the JSON gateway (`/v3/watch`, `/v3/lease/keepalive`), as Patroni
/// reads it: HTTP/1.1, chunked, one JSON object a line. Closed when dropped.
pub(crate) struct GatewayStream {
    /// The HTTP status.
    pub status: u16,
    lines: mpsc::Receiver<String>,
    stream: std::net::TcpStream,
}

impl GatewayStream {
    /// POSTs `json` to `path` and reads the answer's head.
    pub(crate) fn open(addr: SocketAddr, path: &str, json: &str) -> GatewayStream {
        use std::io::Write;
        let mut stream = std::net::TcpStream::connect(addr).expect("connect");
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{json}",
            json.len()
        );
        stream.write_all(request.as_bytes()).expect("send");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut head = String::new();
        reader.read_line(&mut head).expect("status line");
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {head:?}"));
        let mut chunked = false;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header");
            if line.trim().is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            chunked |= lower.starts_with("transfer-encoding:") && lower.contains("chunked");
        }
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            let mut pending = Vec::new();
            let emit = |bytes: &[u8], pending: &mut Vec<u8>| -> bool {
                pending.extend_from_slice(bytes);
                while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                    let line: Vec<u8> = pending.drain(..=end).collect();
                    let text = String::from_utf8_lossy(&line).trim().to_string();
                    if !text.is_empty() && tx.send(text).is_err() {
                        return false;
                    }
                }
                true
            };
            if !chunked {
                let mut rest = Vec::new();
                let _ = reader.read_to_end(&mut rest);
                rest.push(b'\n');
                emit(&rest, &mut pending);
                return;
            }
            loop {
                let mut size = String::new();
                if reader.read_line(&mut size).unwrap_or(0) == 0 {
                    return;
                }
                let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
                    return;
                };
                if size == 0 {
                    let _ = emit(b"\n", &mut pending);
                    return;
                }
                let mut chunk = vec![0; size + 2];
                if reader.read_exact(&mut chunk).is_err() {
                    return;
                }
                if !emit(&chunk[..size], &mut pending) {
                    return;
                }
            }
        });
        GatewayStream {
            status,
            lines,
            stream,
        }
    }

    /// The next JSON object of the answer, waiting at most `within`.
    pub(crate) fn next(&self, within: Duration) -> Option<Value> {
        let line = self.lines.recv_timeout(within).ok()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    }

    /// Everything until the answer ends (at most `within`).
    pub(crate) fn rest(&self, within: Duration) -> Vec<Value> {
        let deadline = Instant::now() + within;
        let mut all = Vec::new();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) => all.push(serde_json::from_str(&line).unwrap_or(Value::String(line))),
                Err(mpsc::RecvTimeoutError::Disconnected) => return all,
                Err(mpsc::RecvTimeoutError::Timeout) => break,
            }
        }
        panic!("the streamed answer did not end within {within:?}: {all:?}");
    }
}

impl Drop for GatewayStream {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}
