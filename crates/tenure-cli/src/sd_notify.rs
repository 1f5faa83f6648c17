//! systemd's readiness protocol: one datagram per state change to `$NOTIFY_SOCKET` (a path,
//! or an abstract socket written `@name`). Without the variable every call does nothing.
//!
//! tenure says `READY=1` once the command runs (not when campaigning starts: a unit that waits
//! for a follower would otherwise look ready while nothing runs), and `STATUS=` lines
//! (`leading NAME term N`, `waiting for NAME`) that `systemctl status` shows.

use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::OnceLock;

/// The socket named by `NOTIFY_SOCKET`, read once.
fn target() -> Option<&'static (UnixDatagram, SocketAddr)> {
    static TARGET: OnceLock<Option<(UnixDatagram, SocketAddr)>> = OnceLock::new();
    TARGET
        .get_or_init(|| {
            let path = std::env::var_os("NOTIFY_SOCKET")?;
            let addr = address(path.to_str()?)?;
            Some((UnixDatagram::unbound().ok()?, addr))
        })
        .as_ref()
}

fn address(path: &str) -> Option<SocketAddr> {
    match path.strip_prefix('@') {
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            SocketAddr::from_abstract_name(name.as_bytes()).ok()
        }
        None if path.starts_with('/') => SocketAddr::from_pathname(path).ok(),
        None => None,
    }
}

/// Sends `state` (e.g. `READY=1\nSTATUS=leading`); a failure is only logged: supervision
/// must not depend on systemd listening.
pub(crate) fn notify(state: &str) {
    if let Some((socket, addr)) = target() {
        if let Err(e) = socket.send_to_addr(state.as_bytes(), addr) {
            tracing::debug!(error = %e, "cannot notify systemd");
        }
    }
}

/// `READY=1` and the leading status.
pub(crate) fn leading(name: &str, term: u64) {
    notify(&format!("READY=1\nSTATUS=leading {name} term {term}"));
}

/// The waiting status.
pub(crate) fn waiting(name: &str) {
    notify(&format!("STATUS=waiting for {name}"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_paths_and_abstract_names() {
        assert!(address("/run/systemd/notify").is_some_and(|a| a.as_pathname().is_some()));
        let abstract_name = address("@tenure-test").unwrap();
        use std::os::linux::net::SocketAddrExt;
        assert_eq!(abstract_name.as_abstract_name(), Some(&b"tenure-test"[..]));
        assert!(address("relative").is_none());
    }

    #[test]
    fn a_datagram_reaches_an_abstract_socket() {
        let name = format!("tenure-notify-test-{}", std::process::id());
        let addr = address(&format!("@{name}")).unwrap();
        let server = UnixDatagram::bind_addr(&addr).unwrap();
        let client = UnixDatagram::unbound().unwrap();
        client.send_to_addr(b"READY=1", &addr).unwrap();
        let mut buf = [0u8; 64];
        let n = server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
