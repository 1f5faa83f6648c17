//! The one support module of the `tenure` binary's integration tests (every `tests/*.rs`
//! declares `mod support;`).
//!
//! - [`databases`]: where the test servers are, `SKIPPED: …` or a failure under `CI=true` when
//!   one is unreachable, fresh names and prefixes, dropping a prefix's tables (shared with the
//!   router's unit tests in `src/serve/tests/`). Re-exported here.
//! - [`tenure`]: the real binary as a [`Command`], with an environment that cannot leak into the
//!   user's own state (no inherited `TENURE_*` or OpenTelemetry exporter variables; `XDG_STATE_HOME` points into a
//!   temporary directory of this test process).
//! - [`TestDb`]: one database per test: a fresh SQLite file, or a fresh table prefix on the
//!   PostgreSQL / MariaDB servers; raw row counts through the library's own connection pools.
//! - [`run`] / [`Background`]: run the binary to completion (bounded), or in the background with
//!   its stdout read line by line.
//! - [`per_backend!`](crate::per_backend): one test per backend;
//!   [`tests_at_once!`](crate::tests_at_once): how many tests of a binary run at once.
//! - [`leaders`], [`child`], [`outage`]: `tenure run` / `lock` as real processes, the test
//!   child that logs its start and stop, and a database made unreachable for one process.
//! - [`serve`]: `tenure serve` as a real process and a small HTTP client.
//! - [`etcd`]: etcd's API side by side: a real etcd and `tenure serve --etcd-listen`, the same
//!   scenario against both, their transcripts compared.
#![allow(dead_code)]

pub(crate) mod child;
pub(crate) mod databases;
pub(crate) mod etcd;
pub(crate) mod leaders;
pub(crate) mod outage;
pub(crate) mod serve;

pub(crate) use databases::*;

use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
pub(crate) use tenure::BackendKind;
use tenure::{Store, StoreOptions};

/// One test per backend, `sqlite::NAME`, `postgres::NAME` and `mysql::NAME`, each calling
/// `NAME(kind)`: `per_backend!(a, b)` for plain functions, `per_backend!(async a, b)` for
/// async ones (each on its own tokio runtime).
#[macro_export]
macro_rules! per_backend {
    (async $($test:ident),* $(,)?) => {
        $crate::per_backend!(@async sqlite, Sqlite, $($test),*);
        $crate::per_backend!(@async postgres, Postgres, $($test),*);
        $crate::per_backend!(@async mysql, MySql, $($test),*);
    };
    (@async $module:ident, $kind:ident, $($test:ident),*) => {
        mod $module {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(tenure::BackendKind::$kind).await
                }
            )*
        }
    };
    (@sync $module:ident, $kind:ident, $($test:ident),*) => {
        mod $module {
            $( #[test] fn $test() { super::$test(tenure::BackendKind::$kind) } )*
        }
    };
    ($($test:ident),* $(,)?) => {
        $crate::per_backend!(@sync sqlite, Sqlite, $($test),*);
        $crate::per_backend!(@sync postgres, Postgres, $($test),*);
        $crate::per_backend!(@sync mysql, MySql, $($test),*);
    };
}

/// `tests_at_once!(N)`: the binary runs N tests at once unless `--test-threads` or
/// `RUST_TEST_THREADS` says otherwise (libtest reads the variable when its `main` starts,
/// after this). For binaries whose tests mostly wait — on their processes, a ttl, a poll
/// interval — which libtest's default (the cores: two here) leaves the machine idle for.
#[macro_export]
macro_rules! tests_at_once {
    ($n:literal) => {
        #[ctor::ctor(unsafe)]
        fn tests_at_once() {
            if std::env::var_os("RUST_TEST_THREADS").is_none() {
                std::env::set_var("RUST_TEST_THREADS", stringify!($n));
            }
        }
    };
}

/// A tokio runtime on this thread, for the library calls of a synchronous test.
pub(crate) fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// How long a command run by [`run`] may take before the test fails.
pub(crate) const RUN_LIMIT: Duration = Duration::from_secs(30);

/// `XDG_STATE_HOME` for commands run without a database URL, so that they never reach the
/// user's own database. Not created here: only a command that uses the default makes it.
pub(crate) fn scratch_state_home() -> PathBuf {
    std::env::temp_dir().join(format!("tenure-cli-test-{}-state", std::process::id()))
}

/// The `tenure` binary with a clean environment: no inherited `TENURE_DATABASE_URL`,
/// `TENURE_TABLE_PREFIX` or `TENURE_LOG`, `XDG_STATE_HOME` in a scratch directory (so a command
/// without `--database-url` never touches the user's own database), stdin closed.
pub(crate) fn tenure() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tenure"));
    c.env_remove("TENURE_DATABASE_URL")
        .env_remove("TENURE_TABLE_PREFIX")
        .env_remove("TENURE_LOG")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_PROTOCOL")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_EXPORTER")
        .env("XDG_STATE_HOME", scratch_state_home())
        .stdin(Stdio::null());
    c
}

/// What a finished command printed, and how it ended.
#[derive(Debug)]
pub(crate) struct Output {
    /// The exit code (`None` if killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub took: Duration,
}

impl Output {
    /// stdout as one JSON value (the `--json` answer of a read or admin command).
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(self.stdout.trim_end()).unwrap_or_else(|e| {
            panic!("stdout is not one JSON value ({e}):\n{self}");
        })
    }

    /// The lines of stderr that carry a message: without the `tenure: database …` banner,
    /// blank lines and clap's `For more information, try '--help'.` hint.
    pub(crate) fn message_lines(&self) -> Vec<&str> {
        self.stderr
            .lines()
            .filter(|l| {
                !l.trim().is_empty()
                    && !l.starts_with("tenure: database ")
                    && !l.starts_with("For more information, try")
            })
            .collect()
    }

    /// The `tenure: database …` banner, if printed.
    pub(crate) fn banner(&self) -> Option<&str> {
        self.stderr
            .lines()
            .find_map(|l| l.strip_prefix("tenure: database "))
    }

    /// Panics (showing everything) unless the command exited with `code`.
    pub(crate) fn expect_code(&self, code: i32) -> &Output {
        assert_eq!(self.code, Some(code), "unexpected exit code:\n{self}");
        self
    }
}

impl std::fmt::Display for Output {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "exit {:?} after {:?}\n--- stdout\n{}--- stderr\n{}---",
            self.code, self.took, self.stdout, self.stderr
        )
    }
}

/// Runs `command` to completion (at most [`RUN_LIMIT`], then it is killed and the test fails).
pub(crate) fn run(command: &mut Command) -> Output {
    let started = Instant::now();
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tenure");
    let out = drain(child.stdout.take().expect("stdout"));
    let err = drain(child.stderr.take().expect("stderr"));
    let Some(status) = wait_for_exit(&mut child, RUN_LIMIT) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{command:?} did not finish within {RUN_LIMIT:?}");
    };
    Output {
        code: status.code(),
        stdout: out.join().expect("stdout reader"),
        stderr: err.join().expect("stderr reader"),
        took: started.elapsed(),
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// Waits at most `within` for `child` to exit; `None` if it still runs.
pub(crate) fn wait_for_exit(child: &mut Child, within: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A command running in the background, its stdout read line by line; killed when dropped.
pub(crate) struct Background {
    child: Child,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Background {
    pub(crate) fn spawn(command: &mut Command) -> Background {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {command:?}: {e}"));
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().expect("stdout");
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        let pipe = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                let mut s = sink.lock().expect("stderr lock");
                s.push_str(&line);
                s.push('\n');
            }
        });
        Background {
            child,
            lines,
            stderr,
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).expect("pid")
    }

    /// The next stdout line, waiting at most `timeout`; `None` on timeout or end of output.
    pub(crate) fn next_line(&self, timeout: Duration) -> Option<String> {
        self.lines.recv_timeout(timeout).ok()
    }

    /// The next `n` lines of stdout, each within `within`; panics (naming `what`) if one does
    /// not come.
    pub(crate) fn lines(&self, n: usize, within: Duration, what: &str) -> Vec<String> {
        (0..n)
            .map(|i| {
                self.next_line(within)
                    .unwrap_or_else(|| panic!("{what}: line {i} did not come within {within:?}"))
            })
            .collect()
    }

    /// Waits at most `within` for the exit (else panics): its code, every line of stdout left,
    /// and stderr.
    pub(crate) fn complete(mut self, within: Duration) -> (Option<i32>, Vec<String>, String) {
        let status = self
            .wait_timeout(within)
            .unwrap_or_else(|| panic!("a process did not finish within {within:?}"));
        // The reader ends with the pipe, after the last line.
        let mut lines = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(Duration::from_secs(5)) {
            lines.push(line);
        }
        (status.code(), lines, self.stderr())
    }

    /// Everything printed on stderr so far.
    pub(crate) fn stderr(&self) -> String {
        self.stderr.lock().expect("stderr lock").clone()
    }

    /// Sends `signal` to the process.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal).expect("kill");
    }

    /// Waits at most `timeout` for the process to exit.
    pub(crate) fn wait_timeout(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_for_exit(&mut self.child, timeout)
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A database of one test: a fresh SQLite file (in a temporary directory), or a fresh table
/// prefix on a PostgreSQL / MariaDB server. Nothing is created until asked: the SQLite file
/// does not exist and the prefix has no tables until a command or [`TestDb::store`] makes them.
pub(crate) struct TestDb {
    pub kind: BackendKind,
    pub url: String,
    pub prefix: String,
    raw: Raw,
    dir: tempfile::TempDir,
}

enum Raw {
    Postgres(tenure::backend::postgres::PostgresBackend),
    MySql(tenure::backend::mysql::MySqlBackend),
    Sqlite(PathBuf),
}

impl TestDb {
    /// A database for one test on `kind`, or `None` (after printing `SKIPPED: …`) when the
    /// server is unreachable and `CI` is not `true`; under CI that panics.
    pub(crate) async fn new(kind: BackendKind) -> Option<TestDb> {
        let dir = tempfile::Builder::new()
            .prefix("tenure-cli-test-")
            .tempdir()
            .expect("temp dir");
        let prefix = fresh_prefix();
        // Connecting a backend directly neither creates nor checks tables.
        let options = StoreOptions::default()
            .table_prefix(prefix.clone())
            .timeout(Duration::from_secs(5));
        let (url, raw) = match kind {
            BackendKind::Postgres => {
                let url = postgres_url();
                match tenure::backend::postgres::PostgresBackend::connect(&url, &options).await {
                    Ok(b) => (url, Raw::Postgres(b)),
                    Err(e) => return unreachable(kind, e),
                }
            }
            BackendKind::MySql => {
                let url = mysql_url();
                match tenure::backend::mysql::MySqlBackend::connect(&url, &options).await {
                    Ok(b) => (url, Raw::MySql(b)),
                    Err(e) => return unreachable(kind, e),
                }
            }
            _ => {
                let path = sqlite_file(dir.path());
                (format!("sqlite://{}", path.display()), Raw::Sqlite(path))
            }
        };
        Some(TestDb {
            kind,
            url,
            prefix,
            raw,
            dir,
        })
    }

    /// A temporary directory that lives as long as this database.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Store options for this database (its prefix, tables created on first use).
    pub(crate) fn options(&self) -> StoreOptions {
        StoreOptions::default()
            .table_prefix(self.prefix.clone())
            .timeout(Duration::from_secs(10))
    }

    /// A library store on this database (creates the tables).
    pub(crate) async fn store(&self) -> Store {
        Store::connect_with(&self.url, self.options())
            .await
            .unwrap_or_else(|e| panic!("connect {}: {e}", self.kind))
    }

    /// `tenure` on this database (`TENURE_DATABASE_URL` and `TENURE_TABLE_PREFIX` set; flags on
    /// the command line override them).
    pub(crate) fn tenure(&self) -> Command {
        let mut c = tenure();
        c.env("TENURE_DATABASE_URL", &self.url)
            .env("TENURE_TABLE_PREFIX", &self.prefix);
        c
    }

    /// Runs `tenure ARGS…` on this database.
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        run(self.tenure().args(args))
    }

    /// Whether the SQLite file exists (always `true` for the servers).
    pub(crate) fn file_exists(&self) -> bool {
        match &self.raw {
            Raw::Sqlite(path) => path.exists(),
            _ => true,
        }
    }

    /// Rows in `<prefix><table>` (`lease`, `history`, `schema`), or `None` if it does not
    /// exist. Never creates anything (not even the SQLite file).
    pub(crate) async fn rows(&self, table: &str) -> Option<i64> {
        let table = format!("{}{table}", self.prefix);
        match &self.raw {
            Raw::Postgres(b) => {
                let exists: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.tables \
                     WHERE table_schema = current_schema() AND table_name = $1",
                )
                .bind(&table)
                .fetch_one(b.pool())
                .await
                .expect("information_schema");
                if exists == 0 {
                    return None;
                }
                Some(
                    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
                        .fetch_one(b.pool())
                        .await
                        .expect("count"),
                )
            }
            Raw::MySql(b) => {
                let exists: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM information_schema.tables \
                     WHERE table_schema = DATABASE() AND table_name = ?",
                )
                .bind(&table)
                .fetch_one(b.pool())
                .await
                .expect("information_schema");
                if exists == 0 {
                    return None;
                }
                Some(
                    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
                        .fetch_one(b.pool())
                        .await
                        .expect("count"),
                )
            }
            Raw::Sqlite(path) => {
                if !path.exists() {
                    return None;
                }
                use sqlx::Connection;
                let mut conn = sqlx::SqliteConnection::connect(&format!(
                    "sqlite://{}?mode=ro",
                    path.display()
                ))
                .await
                .expect("open sqlite file");
                let exists: i64 = sqlx::query_scalar(
                    "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
                )
                .bind(&table)
                .fetch_one(&mut conn)
                .await
                .expect("sqlite_master");
                if exists == 0 {
                    return None;
                }
                Some(
                    sqlx::query_scalar(&format!("SELECT COUNT(*) FROM {table}"))
                        .fetch_one(&mut conn)
                        .await
                        .expect("count"),
                )
            }
        }
    }

    /// Panics unless the lease and history tables of this prefix are absent or empty.
    pub(crate) async fn assert_untouched(&self, context: &str) {
        for table in ["lease", "history"] {
            let rows = self.rows(table).await;
            assert!(
                matches!(rows, None | Some(0)),
                "{context}: {}{table} on {} has {rows:?} rows",
                self.prefix,
                self.kind
            );
        }
    }

    /// Runs a script of statements (e.g. `tenure migrate --print`) on this database.
    pub(crate) async fn execute_script(&self, script: &str) {
        match &self.raw {
            Raw::Postgres(b) => {
                sqlx::raw_sql(script)
                    .execute(b.pool())
                    .await
                    .expect("script");
            }
            Raw::MySql(b) => {
                // As the mysql client reads it: `DELIMITER //` lines end a routine's body.
                for statement in mysql_client_statements(script) {
                    sqlx::raw_sql(&statement)
                        .execute(b.pool())
                        .await
                        .unwrap_or_else(|e| panic!("{e}: {statement}"));
                }
            }
            Raw::Sqlite(path) => {
                use sqlx::Connection;
                let mut conn = sqlx::SqliteConnection::connect(&format!(
                    "sqlite://{}?mode=rwc",
                    path.display()
                ))
                .await
                .expect("open sqlite file");
                sqlx::raw_sql(script)
                    .execute(&mut conn)
                    .await
                    .expect("script");
            }
        }
    }

    /// Drops this prefix's tables on the servers (the SQLite file goes with its directory).
    /// Call it at the end of a test; a failed test leaves its tables for inspection.
    pub(crate) async fn drop_tables(&self) {
        drop_tables(self.kind, &self.url, &self.prefix).await;
    }
}

/// A script's statements as the mysql client splits them: at `;`, or at the delimiter a
/// `DELIMITER` line sets (the client's command, which the server never sees), and at the end.
pub(crate) fn mysql_client_statements(script: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let (mut delimiter, mut current) = (";".to_string(), String::new());
    for line in script.lines() {
        if let Some(d) = line.trim().strip_prefix("DELIMITER ") {
            delimiter = d.trim().to_string();
            continue;
        }
        current.push_str(line);
        current.push('\n');
        while let Some(end) = current.find(delimiter.as_str()) {
            let statement = current[..end].trim().to_string();
            current = current[end + delimiter.len()..].to_string();
            if !statement.is_empty() {
                statements.push(statement);
            }
        }
    }
    // The client runs a last statement without its delimiter at the end of the input.
    if !current.trim().is_empty() {
        statements.push(current.trim().to_string());
    }
    statements
}

/// The set of keys of a JSON object.
pub(crate) fn keys(value: &Value) -> BTreeSet<&str> {
    value
        .as_object()
        .unwrap_or_else(|| panic!("not a JSON object: {value}"))
        .keys()
        .map(String::as_str)
        .collect()
}

/// Panics unless `value` is an object with exactly `expected` as keys.
pub(crate) fn assert_keys(value: &Value, expected: &[&str]) {
    let expected: BTreeSet<&str> = expected.iter().copied().collect();
    assert_eq!(keys(value), expected, "keys of {value}");
}

/// Parses an RFC 3339 UTC timestamp (`…Z`) as tenure prints it.
pub(crate) fn rfc3339(value: &Value) -> chrono::DateTime<chrono::Utc> {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("not a timestamp string: {value}"));
    assert!(text.ends_with('Z'), "not UTC: {text}");
    chrono::DateTime::parse_from_rfc3339(text)
        .unwrap_or_else(|e| panic!("not RFC 3339 ({e}): {text}"))
        .with_timezone(&chrono::Utc)
}

/// A database instant as tenure prints it (RFC 3339, UTC, milliseconds).
pub(crate) fn db_time(t: tenure::DbTime) -> String {
    t.to_utc()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}
