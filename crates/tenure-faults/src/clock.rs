//! The one clock of the history: `CLOCK_MONOTONIC`, shared by every process on this host, in
//! nanoseconds. `std::time::Instant` reads the same clock but hides its value; the node needs
//! the value so that the events of different processes can be merged.

use nix::time::{clock_gettime, ClockId};
use std::time::Duration;

/// Nanoseconds on `CLOCK_MONOTONIC` now.
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always readable");
    t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64
}

/// The `CLOCK_MONOTONIC` value of a tokio/std instant (same clock on Linux).
pub fn instant_ns(at: tokio::time::Instant) -> u64 {
    let now = tokio::time::Instant::now();
    let base = now_ns();
    if at >= now {
        base + (at - now).as_nanos() as u64
    } else {
        base.saturating_sub((now - at).as_nanos() as u64)
    }
}

/// The wall clock in milliseconds since the epoch, as this process sees it (faked under
/// `faketime`). Recorded so that a clock fault can be shown to have happened.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A duration between two `now_ns` readings.
pub fn between(from_ns: u64, to_ns: u64) -> Duration {
    Duration::from_nanos(to_ns.saturating_sub(from_ns))
}
