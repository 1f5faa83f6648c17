//! Debian's python3-etcd3 (0.12, under /usr/bin/python3 with Debian's grpcio) against both
//! sides: `tests/etcd/etcd3_check.py` prints what it sees. (Its lock is exercised without
//! contention: 0.12 breaks on a contended `acquire()` with tenacity 8, a client bug.)

use crate::side_by_side;
use crate::support::etcd::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

side_by_side!(etcd3_client);

/// Debian's Python, where python3-etcd3 is (not a pyenv python first on PATH).
const PYTHON: &str = "/usr/bin/python3";

fn etcd3_client(target: &Target) -> Transcript {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/etcd/etcd3_check.py");
    let mut command = Command::new(PYTHON);
    command
        .arg(script)
        .arg(target.addr.ip().to_string())
        .arg(target.addr.port().to_string());
    let (code, lines, stderr) = Running::spawn(&mut command).complete(Duration::from_secs(60));
    assert_eq!(
        code,
        Some(0),
        "etcd3_check.py failed against {}:\n{}\n{stderr}\n--- its log\n{}",
        target.label,
        lines.join("\n"),
        target.log()
    );
    let mut t = Transcript::new();
    for line in lines {
        t.record("etcd3", line);
    }
    t
}
