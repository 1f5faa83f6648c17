//! The status page end to end in headless Chromium (Debian's `chromium`), driven over the
//! DevTools protocol on a pipe (`--remote-debugging-pipe`): the page shows every name, counts
//! the time left down live, sees a leader change while it is open, and its admin button
//! pauses a name (recorded with the browser's address); a lock taken through the Consul API
//! shows like any other, held by its session. A screenshot is taken into the test's
//! directory; with `TENURE_UPDATE_SCREENSHOT=1` it also replaces `docs/status-page.png`.
//!
//! Without Chromium this test prints `SKIPPED: …`, unless `TENURE_TEST_REQUIRE_CHROMIUM=1`
//! (set by `.ci/run`), where that is a failure.

mod support;

use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::runtime;
use support::serve::*;

// === a small DevTools client ===

/// Chromium with its DevTools protocol on fds 3 (commands in) and 4 (answers out).
struct Browser {
    child: Child,
    commands: File,
    answers: BufReader<File>,
    next_id: u64,
    session: Option<String>,
}

fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("TENURE_TEST_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("chromium"));
    let found = Command::new(&path)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        return Some(path);
    }
    if std::env::var("TENURE_TEST_REQUIRE_CHROMIUM").as_deref() == Ok("1") {
        panic!("chromium is not installed, and TENURE_TEST_REQUIRE_CHROMIUM=1");
    }
    eprintln!("SKIPPED: chromium is not installed (apt-get install chromium); set TENURE_TEST_REQUIRE_CHROMIUM=1 to make this fail");
    None
}

/// Makes `fd` the descriptor `target` of the child, without close-on-exec.
fn place(fd: i32, target: i32) -> nix::Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, FdFlag};
    if fd == target {
        fcntl(fd, FcntlArg::F_SETFD(FdFlag::empty()))?;
    } else {
        nix::unistd::dup2(fd, target)?;
    }
    Ok(())
}

impl Browser {
    fn launch(program: &Path, profile: &Path) -> Browser {
        let cloexec = nix::fcntl::OFlag::O_CLOEXEC;
        let (chrome_in, commands): (OwnedFd, OwnedFd) = nix::unistd::pipe2(cloexec).expect("pipe");
        let (answers, chrome_out): (OwnedFd, OwnedFd) = nix::unistd::pipe2(cloexec).expect("pipe");
        let (fd_in, fd_out) = (chrome_in.as_raw_fd(), chrome_out.as_raw_fd());
        let mut command = Command::new(program);
        command
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--hide-scrollbars",
                "--window-size=1440,900",
                "--remote-debugging-pipe",
            ])
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: dup2, fcntl and prctl only, between fork and exec.
        unsafe {
            command.pre_exec(move || {
                // fd_in may itself be 4: move it out of the way first.
                let fd_in = if fd_in == 4 {
                    nix::unistd::dup(fd_in)?
                } else {
                    fd_in
                };
                place(fd_in, 3)?;
                place(fd_out, 4)?;
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)?;
                Ok(())
            });
        }
        let child = command.spawn().expect("start chromium");
        drop((chrome_in, chrome_out));
        Browser {
            child,
            commands: File::from(commands),
            answers: BufReader::new(File::from(answers)),
            next_id: 0,
            session: None,
        }
    }

    /// Sends a command (to the attached page, if any) and returns its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut message = json!({"id": id, "method": method, "params": params});
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let mut bytes = serde_json::to_vec(&message).expect("json");
        bytes.push(0);
        self.commands.write_all(&bytes).expect("write to chromium");
        loop {
            let mut frame = Vec::new();
            let n = self
                .answers
                .read_until(0, &mut frame)
                .expect("read from chromium");
            assert!(n > 0, "chromium closed its pipe during {method}");
            frame.pop();
            let answer: Value = serde_json::from_slice(&frame).expect("a JSON message");
            if answer["id"] != json!(id) {
                continue; // an event
            }
            if let Some(error) = answer.get("error") {
                panic!("{method}: {error}");
            }
            return answer["result"].clone();
        }
    }

    /// Opens `url` in a new page and attaches to it.
    fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({"url": url}));
        let attached = self.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        self.session = Some(attached["sessionId"].as_str().expect("session").to_string());
    }

    /// The value of a JavaScript expression in the page.
    fn eval(&mut self, expression: &str) -> Value {
        let result = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = result.get("exceptionDetails") {
            panic!("{expression}: {e}");
        }
        result["result"]["value"].clone()
    }

    /// Waits until `expression` is true in the page.
    fn until(&mut self, within: Duration, what: &str, expression: &str) {
        let deadline = Instant::now() + within;
        while self.eval(expression) != json!(true) {
            if Instant::now() >= deadline {
                let body = self.eval("document.body.innerText");
                panic!(
                    "not within {within:?}: {what}\n--- page text\n{}",
                    body.as_str().unwrap_or("")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn screenshot(&mut self) -> Vec<u8> {
        let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
        base64(shot["data"].as_str().expect("png data"))
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.session = None;
        let _ = self
            .commands
            .write_all(b"{\"id\":0,\"method\":\"Browser.close\"}\0");
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    for quad in text.as_bytes().chunks(4) {
        let digits: Vec<u8> = quad
            .iter()
            .copied()
            .filter(|&c| c != b'=')
            .map(value)
            .collect();
        let n = digits
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &d)| n | (u32::from(d) << (18 - 6 * i)));
        out.extend_from_slice(&n.to_be_bytes()[1..digits.len()]);
    }
    out
}

// === the test ===

fn row(name: &str, selector: &str) -> String {
    format!("document.querySelector('tr[data-name=\"{name}\"] {selector}')")
}

#[test]
fn status_page_follows_a_leader_change_in_chromium() {
    let Some(program) = chromium() else {
        return;
    };
    let rt = runtime();
    let db = rt.block_on(Db::new(BackendKind::Sqlite)).expect("sqlite");
    rt.block_on(async {
        db.campaign("billing-cron", "node-a", 60_000).await;
        db.campaign("queue-consumer", "node-c", 60_000).await;
    });
    let server = db.serve(&[
        "--campaign",
        "nightly-report",
        "--candidate",
        "web-1",
        "--poll-interval",
        "200ms",
    ]);
    eventually(Duration::from_secs(5), "web-1 leads nightly-report", || {
        (server.get("/v1/leader-check/nightly-report").status == 200).then_some(())
    });

    // A lock taken through the Consul API: a session, then an acquire of its key.
    let consul_token = [("X-Consul-Token", TOKEN)];
    let created = http(
        server.addr,
        "PUT",
        "/v1/session/create",
        &consul_token,
        br#"{"Name": "web", "TTL": "60s"}"#,
    );
    let session = created.json()["ID"]
        .as_str()
        .expect("a session")
        .to_string();
    let acquired = http(
        server.addr,
        "PUT",
        &format!("/v1/kv/service/web/leader?acquire={session}"),
        &consul_token,
        b"web-2:8080",
    );
    assert_eq!(acquired.text(), "true");

    let mut browser = Browser::launch(&program, &db.dir().join("chromium-profile"));
    browser.open(&server.url(&format!("/#token={TOKEN}")));

    // Every name with holder and term, the token taken from the address and hidden again.
    browser.until(
        Duration::from_secs(15),
        "the page shows node-a leading billing-cron",
        &format!(
            "{}?.textContent === 'node-a'",
            row("billing-cron", ".holder")
        ),
    );
    assert_eq!(
        browser.eval(&format!("{}.textContent", row("billing-cron", ".term"))),
        "1"
    );
    assert_eq!(
        browser.eval(&format!("{}.textContent", row("nightly-report", ".holder"))),
        "web-1"
    );
    browser.until(
        Duration::from_secs(15),
        "the page lists web-1 as nightly-report's leading candidate",
        &format!(
            "{}?.textContent.startsWith('web-1 · 0')",
            row("nightly-report", ".candidates .leader")
        ),
    );
    assert_eq!(
        browser.eval(&format!(
            "{}.length",
            row("billing-cron", ".candidates li").replace("querySelector(", "querySelectorAll(")
        )),
        0,
        "a lease written without an elector has no candidates"
    );
    assert_eq!(
        browser.eval("location.hash"),
        "",
        "the token stays out of the address bar"
    );
    assert_eq!(
        browser.eval(&format!(
            "{}.textContent",
            row("service/web/leader", ".holder")
        )),
        session.as_str(),
        "the Consul-made lock, held by its session"
    );
    assert_eq!(
        browser.eval("document.querySelectorAll('button[data-action=\"demote\"]').length"),
        4,
        "admin buttons on every row once a token is given"
    );
    browser.until(
        Duration::from_secs(5),
        "recent history",
        &format!(
            "{}?.textContent.includes('acquired')",
            row("billing-cron", ".history li")
        ),
    );

    // The time left counts down between answers.
    let countdown = format!(
        "parseFloat({}.textContent)",
        row("billing-cron", ".countdown")
    );
    let first = browser.eval(&countdown).as_f64().expect("a countdown");
    std::thread::sleep(Duration::from_millis(600));
    let later = browser.eval(&countdown).as_f64().expect("a countdown");
    assert!(later < first && first <= 60.0, "{first} then {later}");

    // A leader change while the page waits in its blocking query.
    eventually(
        Duration::from_secs(5),
        "the page waits in a blocking query",
        || (server.get("/health").json()["waiting"].as_u64() >= Some(1)).then_some(()),
    );
    rt.block_on(async {
        db.store
            .demote("billing-cron", true, "test")
            .await
            .expect("demote");
        db.campaign("billing-cron", "node-b", 60_000).await;
    });
    let seen = Instant::now();
    browser.until(
        Duration::from_secs(5),
        "the page shows node-b leading billing-cron",
        &format!(
            "{}.textContent === 'node-b' && {}.textContent === '2'",
            row("billing-cron", ".holder"),
            row("billing-cron", ".term")
        ),
    );
    let took = seen.elapsed();
    let changes = browser.eval("document.getElementById('changes').innerText");
    let changes = changes.as_str().unwrap_or_default();
    assert!(
        changes.contains("billing-cron: node-a (term 1) → ")
            && changes.contains("→ node-b (term 2)"),
        "the change log shows the change: {changes:?}"
    );
    eprintln!("the page showed the new leader {took:?} after the change");

    // The admin button pauses a name, recorded with the browser's address.
    browser.eval(&format!(
        "{}.click()",
        row("queue-consumer", "button[data-action=\"pause\"]")
    ));
    browser.until(
        Duration::from_secs(5),
        "the page shows queue-consumer paused",
        &format!(
            "{}?.textContent === 'paused'",
            row("queue-consumer", ".pill.warn")
        ),
    );
    let history = rt
        .block_on(db.store.history("queue-consumer", 1))
        .expect("history");
    assert_eq!(history[0].event, "paused");
    assert!(
        history[0].actor.starts_with("http:127.0.0.1:"),
        "{}",
        history[0].actor
    );
    browser.until(
        Duration::from_secs(5),
        "the pause in the recent history",
        &format!(
            "{}?.textContent.includes('paused')",
            row("queue-consumer", ".history li")
        ),
    );

    // A picture, for people.
    let png = browser.screenshot();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let shot = db.dir().join("status-page.png");
    std::fs::write(&shot, &png).expect("screenshot");
    eprintln!("screenshot: {} ({} bytes)", shot.display(), png.len());
    if std::env::var("TENURE_UPDATE_SCREENSHOT").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/status-page.png");
        std::fs::copy(&shot, &docs).expect("copy the screenshot into docs/");
        eprintln!("copied to {}", docs.display());
    }
}

/// The renewal charts: a name the server renews (ttl 2 s, so every 500 ms) gets two
/// sparklines with a point per renewal; a name nobody renews gets none.
#[test]
fn status_page_charts_the_renewals_of_a_name() {
    let Some(program) = chromium() else {
        return;
    };
    let rt = runtime();
    let db = rt.block_on(Db::new(BackendKind::Sqlite)).expect("sqlite");
    rt.block_on(db.campaign("still", "node-a", 60_000));
    let server = db.serve(&[
        "--campaign",
        "charted",
        "--candidate",
        "web-1",
        "--ttl",
        "2s",
        "--poll-interval",
        "100ms",
    ]);
    let mut browser = Browser::launch(&program, &db.dir().join("chromium-profile"));
    browser.open(&server.url("/"));

    let charted = |selector: &str| {
        format!("document.querySelector('tr[data-renewals=\"charted\"] {selector}')")
    };
    browser.until(
        Duration::from_secs(30),
        "both charts of charted have at least three renewals",
        &format!(
            "Number({}?.dataset.points) >= 3 && Number({}?.dataset.points) >= 3",
            charted("svg.gap polyline"),
            charted("svg.margin polyline")
        ),
    );
    // One vertex per renewal, each inside the chart.
    let vertices = browser.eval(&format!(
        "{}.getAttribute('points').trim().split(' ').map((p) => p.split(',').map(Number))",
        charted("svg.margin polyline")
    ));
    let vertices = vertices.as_array().expect("vertices");
    assert!(vertices.len() >= 3, "{vertices:?}");
    for v in vertices {
        let (x, y) = (v[0].as_f64().unwrap(), v[1].as_f64().unwrap());
        assert!(
            (0.0..=180.0).contains(&x) && (0.0..=34.0).contains(&y),
            "{v}"
        );
    }
    // The figures: renewals about every 500 ms, with most of the 2 s lease left.
    let mut figure = |class: &str| {
        let text = browser.eval(&format!("{}.textContent", charted(class)));
        let text = text.as_str().expect("text").to_string();
        let last: f64 = text
            .strip_prefix("last ")
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{text:?}"));
        last
    };
    let gap = figure(".rn-gap");
    let left = figure(".rn-left");
    assert!(gap > 0.0 && gap < 2.0, "gap {gap}");
    assert!(left > 0.0 && left <= 2.0, "lease left {left}");
    assert!(
        (gap + left - 2.0).abs() <= 0.02,
        "with a constant ttl, gap + lease left = ttl: {gap} + {left}"
    );
    assert_eq!(
        browser.eval(
            "document.querySelector('tr[data-renewals=\"still\"] .rn-none')?.textContent ?? null"
        ),
        "no renewals seen yet"
    );
}

/// The spreading groups' section: hidden without groups, then each member's shards and the
/// unowned ones, as `GET /v1/groups` gives them; hidden again once the member left.
#[test]
fn status_page_shows_a_spreading_groups_assignment_in_chromium() {
    let Some(program) = chromium() else {
        return;
    };
    // The member's task runs on this runtime's worker while the test drives the browser.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let db = rt.block_on(Db::new(BackendKind::Sqlite)).expect("sqlite");
    rt.block_on(db.campaign("billing-cron", "node-a", 60_000));
    let server = db.serve(&["--poll-interval", "200ms"]);
    let mut browser = Browser::launch(&program, &db.dir().join("chromium-profile"));
    browser.open(&server.url("/"));
    browser.until(
        Duration::from_secs(15),
        "the page shows the leases",
        &format!(
            "{}?.textContent === 'node-a'",
            row("billing-cron", ".holder")
        ),
    );
    assert_eq!(
        browser.eval("document.getElementById('groups').hidden"),
        true,
        "no groups, no section"
    );

    // One member, at most 2 of 5 shards: 3 stay unowned.
    let member = rt
        .block_on(
            tenure::Spread::new(db.store.clone(), "jobs", 5)
                .unwrap()
                .member("m-1")
                .max_per_member(2)
                .ttl(Duration::from_secs(4))
                .join(),
        )
        .expect("join");
    let group_row = |who: &str, cell: &str| {
        format!("document.querySelector('tr[data-group=\"jobs\"][data-member=\"{who}\"] .{cell}')")
    };
    browser.until(
        Duration::from_secs(15),
        "the page shows m-1 owning 2 of jobs' 5 shards",
        &format!(
            "!document.getElementById('groups').hidden && {}?.textContent === '2' && {}?.textContent === '3'",
            group_row("m-1", "owns"),
            group_row("(unowned)", "owns")
        ),
    );
    let held: Vec<String> = member.owned().borrow().iter().map(u32::to_string).collect();
    assert_eq!(
        browser.eval(&format!("{}.textContent", group_row("m-1", "which"))),
        held.join(", ").as_str(),
        "the shards the member's work holds"
    );

    // The whole group paused: every shard listed as paused, none owned.
    let spread = tenure::Spread::new(db.store.clone(), "jobs", 5).unwrap();
    rt.block_on(spread.pause("test")).expect("pause");
    browser.until(
        Duration::from_secs(15),
        "the page shows the 5 shards paused and m-1 owning none",
        &format!(
            "{}?.textContent === '5' && {}?.textContent === '0'",
            group_row("(paused)", "owns"),
            group_row("m-1", "owns")
        ),
    );

    rt.block_on(member.leave());
    browser.until(
        Duration::from_secs(15),
        "the section hides once the group has no live member",
        "document.getElementById('groups').hidden",
    );
}
