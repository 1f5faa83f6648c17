//! Spreading groups as `tenure status --json` and `GET /v1/groups` show them: each group's
//! assignment (member → shards, the unowned and the paused ones as counts and ranges), all
//! read in one transaction. Sized by what is live: a group of a million shards, mostly
//! unowned, prints a few ranges, not a million numbers.

use serde::Serialize;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;

/// A spreading group's assignment: each live member's shards, and the shards nobody owns.
#[derive(Serialize)]
pub(crate) struct GroupJson {
    pub(crate) group: String,
    pub(crate) shards: u32,
    /// Whether the whole group is paused (`tenure pause GROUP`).
    pub(crate) paused: bool,
    pub(crate) members: BTreeMap<String, Vec<u32>>,
    /// Each member's own shard count, only while members differ (a rolling change of
    /// `--shards`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) member_shards: Option<BTreeMap<String, u32>>,
    pub(crate) unowned: ShardsJson,
    /// The paused shards, only when there are any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) paused_shards: Option<ShardsJson>,
}

/// A set of shards: how many, and as ascending ranges `[first, last]`.
#[derive(Serialize)]
pub(crate) struct ShardsJson {
    pub(crate) count: u64,
    pub(crate) ranges: Vec<[u32; 2]>,
}

impl ShardsJson {
    fn of(ranges: &[RangeInclusive<u32>], count: u64) -> ShardsJson {
        ShardsJson {
            count,
            ranges: ranges.iter().map(|r| [*r.start(), *r.end()]).collect(),
        }
    }

    /// The ranges as `0-3,7`, for a person.
    pub(crate) fn text(&self) -> String {
        if self.ranges.is_empty() {
            return "-".into();
        }
        let shown: Vec<String> = self
            .ranges
            .iter()
            .map(|[a, b]| match a == b {
                true => a.to_string(),
                false => format!("{a}-{b}"),
            })
            .collect();
        shown.join(",")
    }
}

/// Every group with live members, by name (`tenure::spread::assignments`: one transaction).
pub(crate) async fn read(store: &tenure::Store) -> Result<Vec<GroupJson>, tenure::Error> {
    let all = tenure::spread::assignments(store).await?;
    Ok(all
        .into_iter()
        .map(|a| {
            let mixed = a.member_shards.values().any(|&n| n != a.shards);
            let unowned = ShardsJson::of(&a.unowned, a.unowned_count());
            let paused = ShardsJson::of(&a.paused_shards, a.paused_count());
            GroupJson {
                group: a.group,
                shards: a.shards,
                paused: a.paused,
                members: a.members,
                member_shards: mixed.then_some(a.member_shards),
                unowned,
                paused_shards: (paused.count > 0).then_some(paused),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_read_as_counts_and_ranges() {
        let s = ShardsJson::of(&[0..=3, 7..=7, 9..=999_999], 999_996);
        assert_eq!(s.ranges, [[0, 3], [7, 7], [9, 999_999]]);
        assert_eq!(s.text(), "0-3,7,9-999999");
        assert_eq!(ShardsJson::of(&[], 0).text(), "-");
    }
}
