//! Fenced writes from another language: a Python child under `tenure run` writes to the
//! application's table with the real driver of each database (psycopg 3, PyMySQL, sqlite3),
//! fenced with `TENURE_FENCE_SQL` and the `TENURE_NAME` / `TENURE_CANDIDATE` / `TENURE_TERM`
//! that `tenure run` exports (`tests/fence/writer.py`, the pattern of docs/guides/fencing.md).
//!
//! The scenario is a process pause: leader A's writer stops itself (SIGSTOP) before it writes,
//! and the test freezes A's whole process tree, as a paused VM would be. A's lease expires,
//! B takes over with a higher term and makes its own fenced write. Then only A's writer is
//! resumed and writes with its old term. With the fence, that write is refused and leaves no
//! row; the negative control — the same program without the fence — lands its stale write
//! after the newer tenure began, which shows the test can see the danger.
//!
//! The drivers come from PyPI (`.ci/run` installs them). Without them the test prints
//! `SKIPPED: …`, or fails under `CI=true`.

mod support;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};
use support::*;

per_backend!(async stale_write_is_refused_with_the_fence_and_lands_without_it);

fn writer() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fence/writer.py")
}

/// Whether python3 and the driver of `kind` are there; else `SKIPPED` (a failure under CI).
fn driver_ready(kind: BackendKind) -> bool {
    let module = match kind {
        BackendKind::Postgres => "psycopg",
        BackendKind::MySql => "pymysql",
        _ => "sqlite3",
    };
    let ok = std::process::Command::new("python3")
        .args(["-c", &format!("import {module}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let why = format!(
            "python3 with the {module} module is missing (pip install psycopg[binary] PyMySQL)"
        );
        assert!(!under_ci(), "CI=true: {why}");
        eprintln!("SKIPPED: {why}");
    }
    ok
}

async fn stale_write_is_refused_with_the_fence_and_lands_without_it(kind: BackendKind) {
    let Some(db) = TestDb::new(kind).await else {
        return;
    };
    if !driver_ready(kind) {
        return;
    }
    let store = db.store().await; // creates tenure's tables
    drop(store);
    for fenced in [true, false] {
        let table = format!(
            "{}app_{}",
            db.prefix,
            if fenced { "fenced" } else { "bare" }
        );
        db.execute_script(&format!(
            "CREATE TABLE {table} (term BIGINT NOT NULL, holder VARCHAR(200) NOT NULL)"
        ))
        .await;
        let run = Scenario::new(&db, &table, fenced);
        let (stale, current) = run.play();
        assert!(
            stale.term < current.term,
            "B took over with a higher term: {stale:?} {current:?}"
        );
        assert_eq!(
            current.event, "committed",
            "B's fenced write while it leads"
        );
        let rows = db.rows(&table.replacen(&db.prefix, "", 1)).await;
        if fenced {
            assert_eq!(
                stale.event, "refused",
                "the stale fenced write must be refused"
            );
            assert_eq!(rows, Some(1), "only B's write is in {table}");
        } else {
            // The negative control: without the fence the stale write lands after the newer
            // tenure's write — the danger the fence exists for.
            assert_eq!(stale.event, "committed", "the unfenced stale write lands");
            assert_eq!(rows, Some(2), "B's write and A's stale one are in {table}");
        }
    }
    db.drop_tables().await;
}

/// What one writer reported last.
#[derive(Debug)]
struct Report {
    event: String,
    term: u64,
}

struct Scenario<'a> {
    db: &'a TestDb,
    table: String,
    fenced: bool,
    name: String,
    out: PathBuf,
}

impl<'a> Scenario<'a> {
    fn new(db: &'a TestDb, table: &str, fenced: bool) -> Scenario<'a> {
        let name = unique("fence");
        let out = db.dir().join(format!("{name}.jsonl"));
        Scenario {
            db,
            table: table.to_string(),
            fenced,
            name,
            out,
        }
    }

    fn leader(&self, id: &str, pause: bool) -> Child {
        self.db
            .tenure()
            .args(["run", &self.name, "--ttl", "2s", "--candidate", id, "--"])
            .arg("python3")
            .arg(writer())
            .env("APP_BACKEND", self.db.kind.to_string())
            .env("APP_URL", &self.db.url)
            .env("APP_TABLE", &self.table)
            .env("APP_OUT", &self.out)
            .env("APP_FENCE", if self.fenced { "1" } else { "0" })
            .env("APP_PAUSE", if pause { "1" } else { "0" })
            .stdout(Stdio::null())
            .stderr(
                std::fs::File::create(self.db.dir().join(format!("{}-{id}.log", self.name)))
                    .expect("log file"),
            )
            .spawn()
            .expect("spawn tenure run")
    }

    /// Plays the pause; returns A's last report (the stale writer) and B's.
    fn play(&self) -> (Report, Report) {
        let mut a = self.leader("a", true);
        let paused = self.wait_for(|e| e["event"] == "paused", "A's writer to pause itself");
        let term_a = paused["term"].as_u64().expect("term");
        // Freeze A's tree but its (already stopped) writer, as a paused machine would be.
        let tree = descendants(i32::try_from(a.id()).expect("a pid fits in i32"));
        let _cleanup = KillOnDrop(tree.clone());
        let writers: Vec<i32> = tree.iter().copied().filter(|p| is_writer(*p)).collect();
        assert!(!writers.is_empty(), "A's writer is in A's process tree");
        for pid in tree.iter().filter(|p| !writers.contains(p)) {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGSTOP);
        }
        let mut b = self.leader("b", false);
        let current = self.wait_for(
            |e| e["event"] == "committed" && e["term"].as_u64() > Some(term_a),
            "B to take over and write",
        );
        assert!(
            wait_for_exit(&mut b, Duration::from_secs(30)).is_some(),
            "B's tenure run exits after its command"
        );
        // Only A's writer wakes up, with its old term.
        for pid in &writers {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGCONT);
        }
        let stale = self.wait_for(
            |e| {
                e["term"].as_u64() == Some(term_a)
                    && (e["event"] == "refused" || e["event"] == "committed")
            },
            "A's writer to try its stale write",
        );
        drop(_cleanup);
        let _ = a.kill();
        let _ = a.wait();
        (report(&stale), report(&current))
    }

    /// Waits (at most 60 s) for an event of the writers that matches.
    fn wait_for(&self, matches: impl Fn(&Value) -> bool, what: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(&self.out).unwrap_or_default();
            if let Some(event) = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|e| matches(e))
            {
                return event;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; events so far:\n{text}\nlogs:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Scenario<'_> {
    /// The stderr of both `tenure run`s, for a failure's message.
    fn logs(&self) -> String {
        ["a", "b"]
            .iter()
            .map(|id| {
                let path = self.db.dir().join(format!("{}-{id}.log", self.name));
                format!(
                    "--- {id}:\n{}",
                    std::fs::read_to_string(path).unwrap_or_default()
                )
            })
            .collect()
    }
}

/// Kills A's frozen tree however the test ends (a stopped process dies of SIGKILL too).
struct KillOnDrop(Vec<i32>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = kill(Pid::from_raw(*pid), Signal::SIGKILL);
        }
    }
}

fn report(event: &Value) -> Report {
    Report {
        event: event["event"].as_str().unwrap_or_default().to_string(),
        term: event["term"].as_u64().unwrap_or_default(),
    }
}

/// `root` and every process below it, from `/proc`.
fn descendants(root: i32) -> Vec<i32> {
    let mut parents: Vec<(i32, i32)> = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The fields after the command name, which is in parentheses and may hold spaces.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        if let Some(ppid) = rest.split_whitespace().nth(1).and_then(|p| p.parse().ok()) {
            parents.push((pid, ppid));
        }
    }
    let mut tree = vec![root];
    let mut i = 0;
    while i < tree.len() {
        let parent = tree[i];
        tree.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    tree
}

/// The Python writer itself (tenure's own processes name `writer.py` among their arguments).
fn is_writer(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
        let argv: Vec<&[u8]> = c.split(|b| *b == 0).collect();
        argv.first().is_some_and(|a| a.ends_with(b"python3"))
            && argv.get(1).is_some_and(|a| a.ends_with(b"writer.py"))
    })
}
