//! Go's clientv3 and its `concurrency` package (Mutex, Election, Session) against both sides:
//! `tests/etcd/go_check/main.go`, built once per test process from Debian's
//! golang-etcd-server-dev 3.4 with Debian's Go (`GO111MODULE=off`,
//! `GOPATH=/usr/share/gocode`, `GOPROXY=off`: nothing is fetched), prints what it sees.

use crate::side_by_side;
use crate::support::etcd::*;
use crate::support::{under_ci, Background};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

side_by_side!(go_concurrency);

/// Where Debian's golang-etcd-server-dev puts etcd's Go packages.
const GOPATH: &str = "/usr/share/gocode";

/// The built program (built by the first test that needs it).
fn program() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/etcd/go_check");
        let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("etcd-go-check");
        std::fs::create_dir_all(&out).expect("a directory for the Go program");
        // Built under this process's own name, then renamed over the shared one (atomic on
        // one file system): a test process running the old file keeps it, and builds of
        // earlier runs do not pile up.
        let built = out.join(format!("go_check.{}", std::process::id()));
        let binary = out.join("go_check");
        let mut build = Command::new("go");
        build
            .current_dir(&source)
            .env("GO111MODULE", "off")
            .env("GOPATH", GOPATH)
            .env("GOPROXY", "off")
            .env("GOFLAGS", "")
            .env("GOCACHE", out.join("cache"))
            .arg("build")
            .arg("-o")
            .arg(&built)
            .arg(".");
        let (code, lines, stderr) =
            Background::spawn(&mut build).complete(Duration::from_secs(600));
        assert_eq!(
            code,
            Some(0),
            "go build of {} failed (needs Debian's golang-go and golang-etcd-server-dev, which \
             .ci/run installs):\n{}\n{stderr}",
            source.display(),
            lines.join("\n")
        );
        std::fs::rename(&built, &binary).expect("the Go program in place");
        binary
    })
}

/// Whether Debian's Go and etcd's Go packages are installed; without them the scenario prints
/// `SKIPPED: …` and records only that on both sides (a failure under `CI=true`: `.ci/run`
/// installs them).
fn go_installed() -> bool {
    let go = Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    let packages = Path::new(GOPATH)
        .join("src/go.etcd.io/etcd/clientv3/concurrency")
        .is_dir();
    if go && packages {
        return true;
    }
    if under_ci() {
        panic!("Go and etcd's Go packages are needed under CI=true (apt-get install golang-go golang-etcd-server-dev)");
    }
    eprintln!("SKIPPED: Go or etcd's Go packages missing (apt-get install golang-go golang-etcd-server-dev)");
    false
}

fn go_concurrency(target: &Target) -> Transcript {
    if !go_installed() {
        let mut t = Transcript::new();
        t.record("go", "skipped: Go or golang-etcd-server-dev missing");
        return t;
    }
    let mut command = Command::new(program());
    command.arg(target.addr.to_string());
    let (code, lines, stderr) = Background::spawn(&mut command).complete(Duration::from_secs(300));
    assert_eq!(
        code,
        Some(0),
        "go_check failed against {}:\n{}\n{stderr}\n--- its log\n{}",
        target.label,
        lines.join("\n"),
        target.log()
    );
    let mut t = Transcript::new();
    for line in lines {
        t.record("go", line);
    }
    t
}
