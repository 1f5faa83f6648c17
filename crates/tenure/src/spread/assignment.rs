//! [`Assignment`]: a group's assignment as one read saw it, sized by the rows read — each
//! member's shards listed, the unowned and the paused ones as ranges — so that a group of a
//! million shards, mostly unowned, reads and prints as what is live in it.

use super::view::View;
use crate::model::DbTime;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;

/// A group's assignment, as one read saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The group.
    pub group: String,
    /// Its shard count: the largest its live members give (or as the read was asked).
    pub shards: u32,
    /// The database's instant of the read.
    pub now: DbTime,
    /// Whether the whole group is paused ([`Spread::pause`](super::Spread::pause)): no member
    /// takes any of its shards, whatever its N, until it is resumed.
    pub paused: bool,
    /// Each live member (and any other live holder of a shard below `shards`) → the shards it
    /// owns, ascending.
    pub members: BTreeMap<String, Vec<u32>>,
    /// Each live member's own shard count, where members differ during a rolling change of
    /// `--shards` (equal to `shards` otherwise).
    pub member_shards: BTreeMap<String, u32>,
    /// The shards below `shards` with no live holder, as ascending ranges.
    pub unowned: Vec<RangeInclusive<u32>>,
    /// The paused shards below `shards` whose lease rows exist (the whole group's pause
    /// pauses every existing row; `tenure pause GROUP/i` one), as ascending ranges.
    pub paused_shards: Vec<RangeInclusive<u32>>,
    /// The current term of each shard below `shards` that is live or paused.
    pub terms: BTreeMap<u32, u64>,
}

impl Assignment {
    pub(super) fn of(group: String, shards: u32, now: DbTime, view: &View) -> Assignment {
        let mut members: BTreeMap<String, Vec<u32>> = view
            .members
            .iter()
            .map(|m| (m.member.id.clone(), Vec::new()))
            .collect();
        let member_shards = view
            .members
            .iter()
            .map(|m| (m.member.id.clone(), m.member.shards))
            .collect();
        let rows = view.shards.range(..shards);
        let mut owned = Vec::new();
        let mut paused = Vec::new();
        let mut terms = BTreeMap::new();
        for (&i, row) in rows {
            terms.insert(i, row.term);
            if let Some(holder) = &row.holder {
                members.entry(holder.clone()).or_default().push(i);
                owned.push(i);
            }
            if row.paused {
                paused.push(i);
            }
        }
        Assignment {
            group,
            shards,
            now,
            paused: view.paused.unwrap_or(false),
            members,
            member_shards,
            unowned: gaps(shards, &owned),
            paused_shards: runs(&paused),
            terms,
        }
    }

    /// How many shards have no live holder.
    pub fn unowned_count(&self) -> u64 {
        count(&self.unowned)
    }

    /// How many shards are paused.
    pub fn paused_count(&self) -> u64 {
        count(&self.paused_shards)
    }
}

/// How many shards `ranges` hold.
fn count(ranges: &[RangeInclusive<u32>]) -> u64 {
    ranges
        .iter()
        .map(|r| u64::from(r.end() - r.start()) + 1)
        .sum()
}

/// The ascending shards `sorted` as ranges of consecutive shards.
fn runs(sorted: &[u32]) -> Vec<RangeInclusive<u32>> {
    let mut out: Vec<RangeInclusive<u32>> = Vec::new();
    for &s in sorted {
        match out.last_mut() {
            Some(r) if r.end().checked_add(1) == Some(s) => *r = *r.start()..=s,
            _ => out.push(s..=s),
        }
    }
    out
}

/// The shards below `n` missing from the ascending `sorted`, as ranges: as many as `sorted`
/// has entries, plus one.
fn gaps(n: u32, sorted: &[u32]) -> Vec<RangeInclusive<u32>> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for &s in sorted {
        if s > next {
            out.push(next..=s - 1);
        }
        next = s + 1;
    }
    if next < n {
        out.push(next..=n - 1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_summarise_runs_and_gaps() {
        assert_eq!(runs(&[]), Vec::<RangeInclusive<u32>>::new());
        assert_eq!(runs(&[0, 1, 2, 5, 7, 8]), vec![0..=2, 5..=5, 7..=8]);
        assert_eq!(gaps(5, &[]), vec![0..=4]);
        assert_eq!(gaps(10, &[0, 3, 4, 9]), vec![1..=2, 5..=8]);
        assert_eq!(gaps(3, &[0, 1, 2]), Vec::<RangeInclusive<u32>>::new());
        // A million shards, two of them owned: three ranges.
        let g = gaps(1_000_000, &[17, 500_000]);
        assert_eq!(g, vec![0..=16, 18..=499_999, 500_001..=999_999]);
        assert_eq!(count(&g), 999_998);
    }
}
