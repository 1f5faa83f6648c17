//! Python clients against both sides, under /usr/bin/python3 with Debian's packages:
//! - python3-etcd3 (0.12, gRPC): `tests/etcd/etcd3_check.py` prints what it sees. (Its lock is
//!   exercised without contention: 0.12 breaks on a contended `acquire()` with tenacity 8, a
//!   client bug.)
//! - Patroni's `etcd3` DCS (patroni 3.0.2, the JSON gateway): `tests/etcd/patroni_check.py`
//!   runs a member's calls (initialize, member key, leader key with its lease, update, delete)
//!   and reads the cluster through Patroni's watch-fed cache.

use crate::side_by_side;
use crate::support::etcd::*;
use crate::support::Background;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

side_by_side!(etcd3_client, patroni_dcs);

/// Debian's Python, where python3-etcd3 is (not a pyenv python first on PATH).
const PYTHON: &str = "/usr/bin/python3";

fn etcd3_client(target: &Target) -> Transcript {
    let ip = target.addr.ip().to_string();
    let port = target.addr.port().to_string();
    python(target, "etcd3_check.py", &[&ip, &port], "etcd3")
}

fn patroni_dcs(target: &Target) -> Transcript {
    python(
        target,
        "patroni_check.py",
        &[&target.addr.to_string()],
        "patroni",
    )
}

/// Runs `tests/etcd/SCRIPT ARGS…` under Debian's Python; its lines of output, recorded.
fn python(target: &Target, script: &str, args: &[&str], what: &str) -> Transcript {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/etcd")
        .join(script);
    let mut command = Command::new(PYTHON);
    command.arg(&script).args(args);
    let (code, lines, stderr) = Background::spawn(&mut command).complete(Duration::from_secs(60));
    assert_eq!(
        code,
        Some(0),
        "{} failed against {}:\n{}\n{stderr}\n--- its log\n{}",
        script.display(),
        target.label,
        lines.join("\n"),
        target.log()
    );
    let mut t = Transcript::new();
    for line in lines {
        t.record(what, line);
    }
    t
}
