//! Connections made before a sign that they may lead to the wrong server are not used again.
//!
//! After a failover the pool's open connections still lead where they led: to the old primary,
//! now a replica that answers "read-only", or into a TCP connection that hangs because the
//! server (or a virtual IP) went away without a reset. A DNS name, a virtual IP or a proxy
//! that now points at the new primary is only reached by a *new* connection. So when a call
//! answers [`Error::ReadOnly`](crate::Error::ReadOnly), times out or loses its connection, the
//! store marks the instant, and the pool closes every connection opened before it instead of
//! handing it out or taking it back; the next call opens a fresh one. The mark costs one
//! atomic read per acquire and release, no round trip. A connection held outside the pool's
//! hands (PostgreSQL's LISTEN) watches [`Freshness::discards`] and reconnects at each mark.
//!
//! The same hook decides which connections to ping before handing them out. sqlx pings every
//! connection it takes back into the pool, and by default again every time it hands one out:
//! a round trip before each call, a third of a lock cycle's. Here only a connection idle for
//! [`PING_AFTER_IDLE`] or longer is pinged when handed out; one given back more recently
//! answered sqlx's ping then. A connection that broke since fails its call as any call may
//! (the caller's retry, the next renewal); that lost connection marks every open one stale as
//! above, so that one incident fails the calls in flight, not one call per pooled connection.

use sqlx::pool::{PoolConnectionMetadata, PoolOptions};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// How long a connection may have been idle and still be handed out without a ping first.
pub(crate) const PING_AFTER_IDLE: Duration = Duration::from_secs(1);

/// The instant before which a connection is stale, shared by a backend and its pool's hooks.
#[derive(Debug)]
pub struct Freshness {
    /// Where the nanosecond counts start.
    base: Instant,
    /// Connections opened before this many nanoseconds after `base` are stale; 0: none are.
    stale_before_ns: AtomicU64,
    /// How many marks so far, for what holds a connection of its own.
    discards: watch::Sender<u64>,
}

// The servers' backends use it (`discards`: PostgreSQL's LISTEN); SQLite has no failover.
#[cfg_attr(not(any(feature = "postgres", feature = "mysql")), allow(dead_code))]
impl Freshness {
    pub(crate) fn new() -> Arc<Freshness> {
        Arc::new(Freshness {
            base: Instant::now(),
            stale_before_ns: AtomicU64::new(0),
            discards: watch::channel(0).0,
        })
    }

    /// Changes at every mark: a connection held outside the pool (PostgreSQL's LISTEN) then
    /// gives its connection back (closed, as stale) and takes a fresh one.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))]
    pub(crate) fn discards(&self) -> watch::Receiver<u64> {
        self.discards.subscribe()
    }

    /// Every connection open now is stale.
    pub(crate) fn discard_open_connections(&self) {
        self.discard_opened_before(Instant::now());
    }

    fn discard_opened_before(&self, at: Instant) {
        let ns = self.ns(at).max(1);
        self.stale_before_ns.fetch_max(ns, Ordering::AcqRel);
        self.discards.send_modify(|count| *count += 1);
    }

    /// Whether a connection that has been open for `age` (as of `now`) may be used.
    fn usable(&self, age: Duration, now: Instant) -> bool {
        let stale_before = self.stale_before_ns.load(Ordering::Acquire);
        if stale_before == 0 {
            return true;
        }
        let opened = now.checked_sub(age).unwrap_or(self.base);
        self.ns(opened) >= stale_before
    }

    fn ns(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// `options` with hooks that close stale connections when they are acquired or released,
    /// and ping before handing out only one idle for [`PING_AFTER_IDLE`] or longer.
    pub(crate) fn guard<DB: sqlx::Database>(
        self: &Arc<Self>,
        options: PoolOptions<DB>,
    ) -> PoolOptions<DB> {
        let on_acquire = Arc::clone(self);
        let on_release = Arc::clone(self);
        options
            .test_before_acquire(false)
            .before_acquire(move |conn, meta: PoolConnectionMetadata| {
                let usable = on_acquire.usable(meta.age, Instant::now());
                Box::pin(async move {
                    if usable && meta.idle_for >= PING_AFTER_IDLE {
                        // A broken one is closed, and the pool tries the next or opens one.
                        return Ok(sqlx::Connection::ping(conn).await.is_ok());
                    }
                    Ok(usable)
                })
            })
            .after_release(move |_, meta: PoolConnectionMetadata| {
                let usable = on_release.usable(meta.age, Instant::now());
                Box::pin(async move { Ok(usable) })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::Freshness;
    use std::time::Duration;

    #[test]
    fn every_connection_is_usable_until_a_discard() {
        let f = Freshness::new();
        let now = f.base + Duration::from_secs(100);
        assert!(f.usable(Duration::from_secs(99), now));
        assert!(f.usable(Duration::ZERO, now));
    }

    #[test]
    fn a_discard_retires_the_connections_opened_before_it_only() {
        let f = Freshness::new();
        let mark = f.base + Duration::from_secs(10);
        f.discard_opened_before(mark);
        let now = f.base + Duration::from_secs(20);
        // Opened at 5 s and at 9.999 s: before the mark.
        assert!(!f.usable(Duration::from_secs(15), now));
        assert!(!f.usable(Duration::from_millis(10_001), now));
        // Opened at the mark and after it.
        assert!(f.usable(Duration::from_secs(10), now));
        assert!(f.usable(Duration::from_secs(1), now));
    }

    #[test]
    fn a_later_discard_wins_and_an_earlier_one_does_not_undo_it() {
        let f = Freshness::new();
        f.discard_opened_before(f.base + Duration::from_secs(10));
        f.discard_opened_before(f.base + Duration::from_secs(5));
        let now = f.base + Duration::from_secs(20);
        assert!(!f.usable(Duration::from_secs(12), now), "opened at 8 s");
        f.discard_opened_before(f.base + Duration::from_secs(15));
        assert!(!f.usable(Duration::from_secs(6), now), "opened at 14 s");
    }
}
