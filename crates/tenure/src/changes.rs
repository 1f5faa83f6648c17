//! Change subscriptions: which leases (and which layers' rows) changed, as the database pushes
//! it (PostgreSQL's LISTEN/NOTIFY) or a doorbell rings it (SQLite's file, MySQL's named locks),
//! and what of a lease a watcher compares to see a change that matters.

pub use crate::backend::tx::Topic;
use crate::model::{DbTime, Lease};
use tokio::sync::broadcast;

/// What a watcher of a lease reports as a change: who leads (by the database's clock) or that
/// nobody does, the term, pause and handover, the leader's metadata (e.g. a new address), and
/// while nobody leads, until when nobody may start (`demote --now` cuts that short). Not the
/// countdown of the time left, nor the expiry a renewal pushes on.
///
/// Two reads of a lease changed in a way that matters when their keys differ; see
/// [`Lease::change_key`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChangeKey {
    holder: Option<String>,
    term: u64,
    paused: bool,
    handover_to: Option<String>,
    metadata: Option<String>,
    vacant_until: Option<DbTime>,
}

impl Lease {
    /// What of this lease, read at `now`, a watcher compares to see a change that matters.
    pub fn change_key(&self, now: DbTime) -> ChangeKey {
        let holder = self.live_holder(now).map(str::to_string);
        ChangeKey {
            vacant_until: holder.is_none().then_some(self.expires_at),
            holder,
            term: self.term,
            paused: self.paused,
            handover_to: self.handover_target().map(str::to_string),
            metadata: self.metadata.clone(),
        }
    }
}

/// What a wake-up carries when it cannot say what changed (SQLite's doorbell, after it may
/// have missed a ring): every listener looks again ([`Topic::Any`]'s wire form).
#[cfg_attr(
    not(any(feature = "postgres", feature = "sqlite")),
    allow(unused_imports)
)]
pub(crate) use crate::backend::tx::ANY;

/// Changed leases as the database pushes them; see `Store::changes`.
#[derive(Debug)]
pub struct Changes {
    rx: Option<broadcast::Receiver<String>>,
}

impl Changes {
    /// The names `rx` receives (`None`: the backend cannot push; nothing ever changes).
    pub(crate) fn new(rx: Option<broadcast::Receiver<String>>) -> Changes {
        Changes { rx }
    }

    /// Forgets the notifications that arrived so far (a read that follows sees their changes).
    pub fn skip_pending(&mut self) {
        use broadcast::error::TryRecvError;
        while let Some(rx) = &mut self.rx {
            match rx.try_recv() {
                Ok(_) | Err(TryRecvError::Lagged(_)) => {}
                Err(TryRecvError::Empty) => return,
                Err(TryRecvError::Closed) => self.rx = None,
            }
        }
    }

    /// Completes when a change of a [`Topic`] that `matches` was signalled, or when some
    /// signals may have been lost (so that the caller looks again); never, where the database
    /// cannot push. (`|t| t == Topic::Lease(name)` for one lease; `|_| true` for anything.)
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub async fn changed(&mut self, matches: impl Fn(Topic<'_>) -> bool) {
        let Some(rx) = &mut self.rx else {
            return std::future::pending().await;
        };
        loop {
            match rx.recv().await {
                Ok(payload) if matches!(Topic::decode(&payload), Topic::Any) => return,
                Ok(payload) if matches(Topic::decode(&payload)) => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => {
                    self.rx = None;
                    return std::future::pending().await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, term: u64, expires: i64) -> Lease {
        Lease {
            name: "a".into(),
            holder: holder.map(str::to_string),
            term,
            acquired_at: DbTime(0),
            renewed_at: DbTime(0),
            expires_at: DbTime(expires),
            ttl_ms: 10_000,
            metadata: None,
            handover_to: None,
            paused: false,
        }
    }

    #[test]
    fn change_key_ignores_renewals_and_sees_what_matters() {
        let now = DbTime(50);
        let held = lease(Some("x"), 1, 100);
        // A renewal (a later expiry) and the countdown are not changes.
        assert_eq!(
            held.change_key(now),
            lease(Some("x"), 1, 150).change_key(now)
        );
        assert_eq!(held.change_key(now), held.change_key(DbTime(60)));
        // The holder's lease runs out by the database's clock: nobody leads any more.
        assert_ne!(held.change_key(now), held.change_key(DbTime(100)));
        assert_ne!(
            held.change_key(now),
            lease(Some("y"), 1, 100).change_key(now)
        );
        assert_ne!(
            held.change_key(now),
            lease(Some("x"), 2, 100).change_key(now)
        );
        let mut other = held.clone();
        other.paused = true;
        assert_ne!(held.change_key(now), other.change_key(now));
        let mut other = held.clone();
        other.metadata = Some("10.0.0.1:80".into());
        assert_ne!(held.change_key(now), other.change_key(now));
        let mut other = held.clone();
        other.handover_to = Some("y".into());
        assert_ne!(held.change_key(now), other.change_key(now));
        // While nobody leads, until when nobody may start matters (`demote --now` cuts it).
        let vacant = lease(None, 1, 100);
        assert_ne!(vacant.change_key(now), lease(None, 1, 60).change_key(now));
    }
}
