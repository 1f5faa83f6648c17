//! Spreading a group's shards over its live members (issue 29's rules, IO-free): each member's
//! share, and which shards a member lets go of or tries to take.
//!
//! Every member runs the same rules on a view of the group — the live members (the candidate
//! registry) and each shard's live owner (its lease) — read in one transaction. Views taken at
//! different instants may disagree for a moment; that costs a move, never safety, since each
//! shard is an ordinary lease with one believer at a time. The rules:
//!
//! - **Shares** ([`shares`]): `N` shards over the members by weight, each at most the cap;
//!   with equal weights and no cap every member gets ⌊N/M⌋ or ⌈N/M⌉. The remainder goes first
//!   to members that already own more than their floor (sticky), then to heavier members, then
//!   by id — a total order, so every member computes the same shares from the same view. Shards
//!   beyond the members' total capacity stay unowned.
//! - **No stealing** ([`plan`]): a member over its share releases its surplus (after stopping
//!   that shard's work: the layer's business); a member under it takes free shards only. A join
//!   therefore moves exactly the shards the members over their new share let go of, and a leave
//!   (or crash) moves only the leaver's shards once their leases are free.
//! - **Which shards**: a member keeps the shards it prefers most and takes the free ones it
//!   prefers most, by rendezvous (highest-random-weight) hashing of (member, shard), so that
//!   members under their share reach for different shards and a member's set is stable.

use std::collections::BTreeMap;

/// A live member of a group, as the registry shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its candidate id.
    pub id: String,
    /// Its weight (at least 1): shares are proportional to it.
    pub weight: u32,
}

/// What one member should do now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Its share of the group.
    pub share: u32,
    /// Shards it owns beyond its share: stop their work, then release them (least preferred
    /// first).
    pub release: Vec<u32>,
    /// Free shards to try to take, most preferred first (at most its deficit).
    pub take: Vec<u32>,
}

/// Each member's share of `shards` shards: proportional to its weight, at most `cap` each,
/// the remainder to members that own more than their floor (`owned`), then to heavier ones,
/// then by id. Members with weight 0 count as weight 1.
pub fn shares(
    shards: u32,
    members: &[Member],
    owned: &BTreeMap<String, u32>,
    cap: Option<u32>,
) -> BTreeMap<String, u32> {
    let cap = cap.unwrap_or(u32::MAX);
    let weight = |m: &Member| u64::from(m.weight.max(1));
    let mut share: BTreeMap<String, u32> = members.iter().map(|m| (m.id.clone(), 0)).collect();
    let mut left = u64::from(shards);
    // Proportional rounds: each gives every member below its cap the floor of its part of
    // what is left; a capped member's excess goes to the others in the next round.
    loop {
        let open: Vec<&Member> = members.iter().filter(|m| share[&m.id] < cap).collect();
        let total: u64 = open.iter().map(|m| weight(m)).sum();
        if left == 0 || total == 0 {
            break;
        }
        let mut given = 0;
        for m in &open {
            let part = left * weight(m) / total;
            let room = u64::from(cap - share[&m.id]);
            let give = part.min(room);
            *share.get_mut(&m.id).expect("a member") += u32::try_from(give).unwrap_or(u32::MAX);
            given += give;
        }
        if given == 0 {
            break;
        }
        left -= given;
    }
    // The remainder, one each, in the total order.
    let mut order: Vec<&Member> = members.iter().collect();
    order.sort_by(|a, b| {
        let beyond = |m: &Member| owned.get(&m.id).copied().unwrap_or(0) > share[&m.id];
        beyond(b)
            .cmp(&beyond(a))
            .then(weight(b).cmp(&weight(a)))
            .then(a.id.cmp(&b.id))
    });
    while left > 0 {
        let mut gave = false;
        for m in &order {
            if left == 0 {
                break;
            }
            if share[&m.id] < cap {
                *share.get_mut(&m.id).expect("a member") += 1;
                left -= 1;
                gave = true;
            }
        }
        if !gave {
            break;
        }
    }
    share
}

/// What `me` should do, given every shard's live owner (`owners[i]`, `None`: free) and the
/// live members (`me` among them; if it is not, it is counted with weight 1).
pub fn plan(me: &str, owners: &[Option<String>], members: &[Member], cap: Option<u32>) -> Plan {
    let mut members = members.to_vec();
    if !members.iter().any(|m| m.id == me) {
        members.push(Member {
            id: me.to_string(),
            weight: 1,
        });
    }
    let mut owned: BTreeMap<String, u32> = BTreeMap::new();
    for owner in owners.iter().flatten() {
        *owned.entry(owner.clone()).or_default() += 1;
    }
    let count = u32::try_from(owners.len()).unwrap_or(u32::MAX);
    let share = shares(count, &members, &owned, cap)[me];
    let by_preference = |mut shards: Vec<u32>| {
        shards.sort_by_key(|&s| std::cmp::Reverse((score(me, s), s)));
        shards
    };
    let indices = (0..count).zip(owners);
    let mine = by_preference(
        indices
            .clone()
            .filter(|(_, o)| o.as_deref() == Some(me))
            .map(|(i, _)| i)
            .collect(),
    );
    let held = u32::try_from(mine.len()).unwrap_or(u32::MAX);
    if held > share {
        let mut release: Vec<u32> = mine[share as usize..].to_vec();
        release.reverse();
        return Plan {
            share,
            release,
            take: Vec::new(),
        };
    }
    let free = by_preference(
        indices
            .filter(|(_, o)| o.is_none())
            .map(|(i, _)| i)
            .collect(),
    );
    Plan {
        share,
        release: Vec::new(),
        take: free.into_iter().take((share - held) as usize).collect(),
    }
}

/// The rendezvous weight of (`member`, `shard`): 64-bit FNV-1a over both. Only a preference —
/// members that disagree on it (another build) move more, never two owners at once.
fn score(member: &str, shard: u32) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    member
        .bytes()
        .chain([0xff])
        .chain(shard.to_le_bytes())
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}
