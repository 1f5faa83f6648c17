//! The descendants of a process, read from `/proc` (for the subreaper keeper, which has no
//! namespace to kill at once).

use nix::unistd::Pid;
use std::collections::BTreeMap;

/// Every live descendant of `root` (children first), as `/proc` shows them now. A process
/// that forks meanwhile is found by the next call: callers repeat until none is left.
pub(super) fn descendants(root: Pid) -> Vec<Pid> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = parent(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut next = vec![root.as_raw()];
    while let Some(pid) = next.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            found.push(Pid::from_raw(child));
            next.push(child);
        }
    }
    found
}

/// The parent of `pid` (the field after the state in `/proc/PID/stat`; the command name
/// before it may hold spaces and parentheses, so read from the last `)`).
fn parent(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_grandchild() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .spawn()
            .unwrap();
        let me = Pid::this();
        let until = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let found = loop {
            let found = descendants(me);
            if found.len() >= 2 || std::time::Instant::now() > until {
                break found;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        };
        let _ = nix::sys::signal::kill(
            Pid::from_raw(i32::try_from(child.id()).expect("a pid fits in i32")),
            nix::sys::signal::Signal::SIGKILL,
        );
        for pid in &found {
            let _ = nix::sys::signal::kill(*pid, nix::sys::signal::Signal::SIGKILL);
        }
        let _ = child.wait();
        assert!(
            found.contains(&Pid::from_raw(
                i32::try_from(child.id()).expect("a pid fits in i32")
            )),
            "{found:?}"
        );
        assert!(found.len() >= 2, "the sleep is found too: {found:?}");
    }
}
