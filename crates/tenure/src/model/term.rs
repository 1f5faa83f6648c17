//! Terms and the epochs they are minted in: the one place a fencing token is made.
//!
//! A term is a 64-bit integer (stored in a signed `BIGINT`, so below 2⁶³) that strictly
//! increases per name and is never reused. Within one *epoch* of the database — one primary's
//! history — it rises by one per tenure. When a replica is promoted, the database enters a new
//! epoch whose terms all lie above every term the old primary could have issued, lost commits
//! included: each epoch has a *floor*, and the next term of a name is the larger of its last
//! term + 1 and the floor (ZooKeeper's zxid does the same with an epoch in its high bits).
//!
//! - **PostgreSQL**: the epoch is the timeline of the WAL insert position, which rises by one at
//!   every promotion. Timeline `tli` owns the terms `(tli − 1)·2⁴⁰ ..< tli·2⁴⁰`: its floor is
//!   above every term of every earlier timeline, with no timing assumption. A database never
//!   promoted (timeline 1) has floor 0: terms 1, 2, 3, …
//! - **MySQL/MariaDB** (no timeline): the epoch changes when the server that writes is not the
//!   one that began the current epoch (`@@server_id`, recorded in `<prefix>epoch`); the new
//!   epoch's floor is the larger of the old floor + 1 and the database clock in microseconds
//!   since 1970. Above every lost term as long as the old primary issued fewer terms per name
//!   than microseconds passed since its own epoch began, and the new primary's clock is not
//!   behind the old one's by more than that time.
//! - **SQLite** (no replication): epoch zero.
//!
//! A term that would leave its epoch (2⁴⁰ tenures of one name on one timeline, or 2⁶³ in
//! all) is never minted: the operation is refused ([`Effect::TermsExhausted`](super::Effect)).

use super::DbTime;

/// The first term above every term of a timeline: each PostgreSQL timeline owns 2⁴⁰ terms.
pub const TIMELINE_BITS: u32 = 40;

/// One past the largest term a signed 64-bit column holds.
const TERM_END: u64 = 1 << 63;

/// An epoch of the database, as terms are minted in it: every term it issues lies in
/// `floor..end`, so a later epoch (a higher floor) never issues a term an earlier one did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Epoch {
    floor: u64,
    end: u64,
}

impl Epoch {
    /// The epoch of a database with one history: SQLite, a MySQL/MariaDB server before any
    /// other server wrote terms, a store with epochs switched off. Terms count from 1.
    pub const ZERO: Epoch = Epoch {
        floor: 0,
        end: TERM_END,
    };

    /// PostgreSQL's timeline `tli` (1 after `initdb`; one more at every promotion), which owns
    /// the terms `(tli − 1)·2⁴⁰ ..< tli·2⁴⁰`. Timeline 0 (never reported) counts as 1; a
    /// timeline beyond 2²³ (8 million promotions) owns no terms: every acquisition is refused.
    pub fn timeline(tli: u32) -> Epoch {
        let tli = u64::from(tli.max(1));
        if tli > TERM_END >> TIMELINE_BITS {
            return Epoch {
                floor: TERM_END,
                end: TERM_END,
            };
        }
        Epoch {
            floor: (tli - 1) << TIMELINE_BITS,
            end: tli << TIMELINE_BITS,
        }
    }

    /// An epoch whose terms begin at `floor` and run to the end of the term space (the
    /// MySQL/MariaDB epochs: the floor is a database instant in microseconds, or 0).
    pub fn from_floor(floor: u64) -> Epoch {
        Epoch {
            floor: floor.min(TERM_END - 1),
            end: TERM_END,
        }
    }

    /// The lowest term this epoch issues (0: the first term is 1).
    pub fn floor(self) -> u64 {
        self.floor
    }

    /// One past the highest term this epoch issues.
    pub fn end(self) -> u64 {
        self.end
    }

    /// The term of a new tenure after `prev` (0 before the first): `max(prev + 1, floor)`
    /// (at least 1), or `None` when that would leave this epoch — never a wrapped or reused
    /// value.
    pub fn next_term(self, prev: u64) -> Option<u64> {
        let next = prev.checked_add(1)?.max(self.floor).max(1);
        (next < self.end).then_some(next)
    }
}

impl Default for Epoch {
    fn default() -> Self {
        Epoch::ZERO
    }
}

/// The database's now and its epoch, read together in one transaction: when, and in which
/// history, an operation is decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// The database's clock.
    pub now: DbTime,
    /// The epoch terms are minted in.
    pub epoch: Epoch,
}

impl From<DbTime> for Clock {
    /// An instant of a database with one history ([`Epoch::ZERO`]).
    fn from(now: DbTime) -> Clock {
        Clock {
            now,
            epoch: Epoch::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_rise_by_one_within_an_epoch() {
        assert_eq!(Epoch::ZERO.next_term(0), Some(1));
        assert_eq!(Epoch::ZERO.next_term(41), Some(42));
        assert_eq!(Epoch::timeline(1).floor(), 0);
        assert_eq!(Epoch::timeline(1).end(), 1 << 40);
        assert_eq!(Epoch::timeline(1).next_term(7), Some(8));
    }

    #[test]
    fn a_new_epoch_starts_above_every_term_of_the_old_one() {
        let two = Epoch::timeline(2);
        assert_eq!(two.floor(), 1 << 40);
        // Every term timeline 1 could issue, the last included, lies below timeline 2's first.
        for old in [0, 1, 5, (1 << 40) - 1] {
            assert_eq!(two.next_term(old), Some(1 << 40));
        }
        assert_eq!(two.next_term(1 << 40), Some((1 << 40) + 1));
        let mysql = Epoch::from_floor(1_764_000_000_000_000);
        assert_eq!(mysql.next_term(12), Some(1_764_000_000_000_000));
        assert_eq!(
            mysql.next_term(1_764_000_000_000_000),
            Some(1_764_000_000_000_001)
        );
    }

    #[test]
    fn a_term_never_leaves_its_epoch_or_wraps() {
        let one = Epoch::timeline(1);
        assert_eq!(one.next_term((1 << 40) - 2), Some((1 << 40) - 1));
        assert_eq!(
            one.next_term((1 << 40) - 1),
            None,
            "timeline 2's first term"
        );
        // A row from a later timeline than the server's (a restored old primary): refused.
        assert_eq!(one.next_term(1 << 40), None);
        assert_eq!(Epoch::ZERO.next_term(TERM_END - 2), Some(TERM_END - 1));
        assert_eq!(
            Epoch::ZERO.next_term(TERM_END - 1),
            None,
            "i64::MAX is the last"
        );
        assert_eq!(Epoch::ZERO.next_term(u64::MAX), None);
        assert_eq!(Epoch::from_floor(u64::MAX).floor(), TERM_END - 1);
        assert_eq!(Epoch::timeline(1 << 23).end(), TERM_END);
        assert_eq!(Epoch::timeline((1 << 23) + 1).next_term(5), None);
        assert_eq!(Epoch::timeline(u32::MAX).next_term(5), None);
    }
}
