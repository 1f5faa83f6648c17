//! A small DevTools client: headless Chromium driven over `--remote-debugging-pipe`, and the
//! page's picture for the docs.

use serde_json::{json, Value};
use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
/// Chromium with its DevTools protocol on fds 3 (commands in) and 4 (answers out).
pub(crate) struct Browser {
    child: Child,
    commands: File,
    answers: BufReader<File>,
    next_id: u64,
    session: Option<String>,
}

pub(crate) fn chromium() -> Option<PathBuf> {
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
    pub(crate) fn launch(program: &Path, profile: &Path) -> Browser {
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
                "--window-size=1440,1300",
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
    pub(crate) fn open(&mut self, url: &str) {
        let target = self.call("Target.createTarget", json!({"url": url}));
        let attached = self.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        self.session = Some(attached["sessionId"].as_str().expect("session").to_string());
    }

    /// The value of a JavaScript expression in the page.
    pub(crate) fn eval(&mut self, expression: &str) -> Value {
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
    pub(crate) fn until(&mut self, within: Duration, what: &str, expression: &str) {
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

    pub(crate) fn screenshot(&mut self) -> Vec<u8> {
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

/// The element `selector` in the lease table's row of `name`, as JavaScript.
pub(crate) fn row(name: &str, selector: &str) -> String {
    format!("document.querySelector('tr[data-name=\"{name}\"] {selector}')")
}

/// A picture of the page, for people: written beside the test's database, and with
/// `TENURE_UPDATE_SCREENSHOT=1` into `docs/status-page.png`.
pub(crate) fn picture(browser: &mut Browser, dir: &Path) {
    let png = browser.screenshot();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "a PNG");
    let shot = dir.join("status-page.png");
    std::fs::write(&shot, &png).expect("screenshot");
    eprintln!("screenshot: {} ({} bytes)", shot.display(), png.len());
    if std::env::var("TENURE_UPDATE_SCREENSHOT").as_deref() == Ok("1") {
        let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/status-page.png");
        std::fs::copy(&shot, &docs).expect("copy the screenshot into docs/");
        eprintln!("copied to {}", docs.display());
    }
}
