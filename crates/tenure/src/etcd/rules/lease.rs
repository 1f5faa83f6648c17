//! etcd's lease rules on the database's clock: the TTL a grant gets, when a lease ends, and
//! what TimeToLive says is left.

use crate::model::DbTime;

/// The shortest TTL a lease gets, in seconds: a grant asking less (or 0, or a negative TTL)
/// gets this, as etcd with its default timing (1.5 × its election timeout, rounded up).
pub const MIN_LEASE_TTL: i64 = 2;
/// The longest TTL a lease may ask for, in seconds (etcd's `MaxLeaseTTL`): more is refused
/// with "etcdserver: too large lease TTL".
pub const MAX_LEASE_TTL: i64 = 9_000_000_000;

/// The TTL a grant asking for `requested` seconds gets, or `None` above [`MAX_LEASE_TTL`].
pub(crate) fn granted_ttl(requested: i64) -> Option<i64> {
    (requested <= MAX_LEASE_TTL).then_some(requested.max(MIN_LEASE_TTL))
}

/// When a lease granted or kept alive at `now` with `ttl` seconds ends.
pub(crate) fn expiry(now: DbTime, ttl: i64) -> DbTime {
    DbTime(now.0.saturating_add(ttl.saturating_mul(1_000_000)))
}

/// Whether a lease that ends at `expires_at` still lives at `now` (the model's rule of expiry:
/// over from its end on). A lease that has ended is gone for every call, whether or not its
/// keys were reaped yet.
pub(crate) fn live(expires_at: DbTime, now: DbTime) -> bool {
    !expires_at.ended_by(now)
}

/// The whole seconds a lease that ends at `expires_at` has left at `now` (TimeToLive's `TTL`,
/// rounded down as etcd's).
pub(crate) fn remaining(expires_at: DbTime, now: DbTime) -> i64 {
    expires_at.0.saturating_sub(now.0).max(0) / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_bounded() {
        assert_eq!(granted_ttl(10), Some(10));
        assert_eq!(granted_ttl(1), Some(MIN_LEASE_TTL));
        assert_eq!(granted_ttl(0), Some(MIN_LEASE_TTL));
        assert_eq!(granted_ttl(-5), Some(MIN_LEASE_TTL));
        assert_eq!(granted_ttl(MAX_LEASE_TTL), Some(MAX_LEASE_TTL));
        assert_eq!(granted_ttl(MAX_LEASE_TTL + 1), None);
    }

    #[test]
    fn expiry_and_what_is_left() {
        let now = DbTime(1_000_000_000);
        let end = expiry(now, 10);
        assert_eq!(end, DbTime(1_010_000_000));
        assert!(live(end, DbTime(end.0 - 1)));
        assert!(!live(end, end), "over at its end");
        assert_eq!(remaining(end, now), 10);
        assert_eq!(remaining(end, DbTime(now.0 + 1)), 9, "rounded down");
        assert_eq!(remaining(end, DbTime(end.0 + 5)), 0);
        assert_eq!(
            expiry(now, MAX_LEASE_TTL).0,
            now.0 + MAX_LEASE_TTL * 1_000_000
        );
    }
}
