//! A new PID namespace for the keeper's next child (the init), in a user namespace when the
//! keeper may not create one directly (not root, or no CAP_SYS_ADMIN).

use nix::sched::{unshare, CloneFlags};
use nix::unistd::{getgid, getuid};

/// Which namespaces were created.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Entered {
    Pid,
    /// A user namespace that maps only our own uid and gid (so the command keeps them), with a
    /// PID namespace inside it.
    UserAndPid,
}

impl Entered {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Entered::Pid => "pid-namespace",
            Entered::UserAndPid => "pid-namespace+user",
        }
    }
}

/// Makes the next child of this process PID 1 of a new PID namespace.
///
/// # Errors
/// The error of the last `unshare` tried (EPERM or EINVAL where namespaces are not allowed).
pub(super) fn enter() -> Result<Entered, String> {
    let direct = match unshare(CloneFlags::CLONE_NEWPID) {
        Ok(()) => return Ok(Entered::Pid),
        Err(e) => e,
    };
    let (uid, gid) = (getuid(), getgid());
    unshare(CloneFlags::CLONE_NEWUSER | CloneFlags::CLONE_NEWPID)
        .map_err(|user| format!("unshare(CLONE_NEWPID): {direct}; in a user namespace: {user}"))?;
    // Without these maps the command would run as the overflow uid inside.
    let maps = [
        ("/proc/self/setgroups", "deny".to_string()),
        ("/proc/self/uid_map", format!("{uid} {uid} 1")),
        ("/proc/self/gid_map", format!("{gid} {gid} 1")),
    ];
    for (path, map) in maps {
        std::fs::write(path, map).map_err(|e| format!("writing {path}: {e}"))?;
    }
    Ok(Entered::UserAndPid)
}
