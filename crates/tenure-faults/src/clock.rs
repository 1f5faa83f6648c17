//! The one clock of the history: `CLOCK_MONOTONIC`, shared by every process on this host, in
//! nanoseconds. `std::time::Instant` reads the same clock but hides its value; the node needs
//! the value so that the events of different processes can be merged.

use nix::time::{clock_gettime, ClockId};
use std::time::Duration;

/// Nanoseconds on `CLOCK_MONOTONIC` now.
pub fn now_ns() -> u64 {
    let t = clock_gettime(ClockId::CLOCK_MONOTONIC).expect("CLOCK_MONOTONIC is always readable");
    let (secs, nanos) = (u64::try_from(t.tv_sec()), u64::try_from(t.tv_nsec()));
    secs.expect("CLOCK_MONOTONIC is not negative") * 1_000_000_000
        + nanos.expect("tv_nsec is below 10^9")
}

/// The `CLOCK_MONOTONIC` value of a tokio/std instant (same clock on Linux).
pub fn instant_ns(at: tokio::time::Instant) -> u64 {
    let now = tokio::time::Instant::now();
    let base = now_ns();
    if at >= now {
        base + u64::try_from((at - now).as_nanos()).unwrap_or(u64::MAX)
    } else {
        base.saturating_sub(u64::try_from((now - at).as_nanos()).unwrap_or(u64::MAX))
    }
}

/// The wall clock in milliseconds since the epoch, as this process sees it (faked under
/// `faketime`). Recorded so that a clock fault can be shown to have happened.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A duration between two `now_ns` readings.
pub fn between(from_ns: u64, to_ns: u64) -> Duration {
    Duration::from_nanos(to_ns.saturating_sub(from_ns))
}
