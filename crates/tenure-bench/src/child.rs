//! `tenure-bench child --stamps FILE`: the supervised command of the failover and handover
//! benchmarks. It stamps its start with CLOCK_MONOTONIC, waits for SIGTERM or SIGINT, stamps
//! its stop and exits 0.
//!
//! It asks for SIGKILL when its parent dies: `tenure run` already arranges that, `etcdctl lock`
//! and kazoo's candidate do not (their command outlives them when SIGKILLed), and the benchmark
//! must not leave children behind.

use crate::procs::{append_stamp, mono_ns, own_pids, Stamp};
use nix::sys::signal::{SigSet, SigmaskHow, Signal};
use std::path::Path;

pub(crate) fn run(stamps: &Path) -> std::io::Result<()> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTERM);
    set.add(Signal::SIGINT);
    nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&set), None)?;
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL)?;
    let token = ["TENURE_TERM", "ETCD_LOCK_REV", "ZK_LOCK_SEQ"]
        .iter()
        .find_map(|k| std::env::var(k).ok())
        .unwrap_or_else(|| "-".into());
    // Host pids: the benchmark signals them (`tenure run` may put us in a PID namespace).
    let (pid, parent) = own_pids();
    let stamp = |event: &str| Stamp {
        event: event.into(),
        mono_ns: mono_ns(),
        pid,
        supervisor: parent,
        token: token.clone(),
    };
    append_stamp(stamps, &stamp("start"))?;
    set.wait()?;
    append_stamp(stamps, &stamp("stop"))?;
    Ok(())
}
