//! The spreading rules: balanced shares, caps and weights, no stealing, convergence from any
//! state, the fewest moves on a join or a leave, members with different shard counts (a
//! rolling change of `--shards`), and work sized by the shards taken, not by N.

use super::spread::{plan, quotas, shares, Member, Taken};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn member(id: &str, shards: u32) -> Member {
    Member {
        id: id.to_string(),
        weight: 1,
        shards,
        cap: None,
    }
}

fn members(ids: &[&str], shards: u32) -> Vec<Member> {
    ids.iter().map(|id| member(id, shards)).collect()
}

/// Who owns which shard (a missing shard is free).
type Owners = BTreeMap<u32, String>;

fn taken(owners: &Owners) -> BTreeMap<u32, Taken> {
    owners
        .iter()
        .map(|(&s, id)| (s, Taken::By(id.clone())))
        .collect()
}

fn counts(owners: &Owners) -> BTreeMap<String, u32> {
    let mut c = BTreeMap::new();
    for id in owners.values() {
        *c.entry(id.clone()).or_default() += 1;
    }
    c
}

/// One round: every member plans from the same view; releases first, then takes in `order`
/// (a free shard goes to the first member that tries it).
fn round(owners: &mut Owners, live: &[Member], order: &[usize]) {
    let view = taken(owners);
    let plans: Vec<_> = live.iter().map(|m| plan(m, &view, live)).collect();
    for (m, p) in live.iter().zip(&plans) {
        for &s in &p.release {
            assert_eq!(owners.get(&s), Some(&m.id), "released another's");
            owners.remove(&s);
        }
    }
    for &i in order {
        for &s in &plans[i].take {
            assert!(s < live[i].shards, "{} took {s}, beyond its N", live[i].id);
            if !view.contains_key(&s) && !owners.contains_key(&s) {
                owners.insert(s, live[i].id.clone());
            }
        }
    }
}

/// Rounds until nothing changes (at most `limit`); panics if it never settles.
fn settle(owners: &mut Owners, live: &[Member], limit: usize) -> usize {
    let order: Vec<usize> = (0..live.len()).collect();
    for n in 0..limit {
        let before = owners.clone();
        round(owners, live, &order);
        if *owners == before {
            return n;
        }
    }
    panic!("did not settle in {limit} rounds: {owners:?}");
}

fn unowned(owners: &Owners, shards: u32) -> Vec<u32> {
    (0..shards).filter(|s| !owners.contains_key(s)).collect()
}

#[test]
fn equal_members_get_the_floor_or_the_ceiling() {
    let m = members(&["a", "b", "c"], 12);
    let s = shares(12, &m, &BTreeMap::new());
    assert_eq!(s.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
    let s = shares(64, &m, &BTreeMap::new());
    assert_eq!(s.values().copied().collect::<Vec<_>>(), [22, 21, 21]);
    // The remainder goes to a member already owning beyond its floor first.
    let owned = BTreeMap::from([("c".to_string(), 22)]);
    let s = shares(64, &m, &owned);
    assert_eq!((s["a"], s["b"], s["c"]), (21, 21, 22));
}

#[test]
fn caps_leave_shards_unowned_and_weights_scale_shares() {
    let capped = |id: &str, weight, cap| Member {
        id: id.to_string(),
        weight,
        shards: 12,
        cap,
    };
    let s = shares(
        12,
        &[capped("a", 1, Some(4)), capped("b", 1, Some(4))],
        &BTreeMap::new(),
    );
    assert_eq!((s["a"], s["b"]), (4, 4));
    let heavy = [capped("a", 3, None), capped("b", 1, None)];
    let s = shares(12, &heavy, &BTreeMap::new());
    assert_eq!((s["a"], s["b"]), (9, 3));
    // A capped heavy member's excess goes to the others; each member has a cap of its own.
    let s = shares(
        12,
        &[capped("a", 3, Some(5)), capped("b", 1, Some(5))],
        &BTreeMap::new(),
    );
    assert_eq!((s["a"], s["b"]), (5, 5));
    let s = shares(
        12,
        &[capped("a", 1, Some(2)), capped("b", 1, None)],
        &BTreeMap::new(),
    );
    assert_eq!((s["a"], s["b"]), (2, 10));
}

#[test]
fn a_member_over_its_share_releases_and_never_takes_from_others() {
    let owners: Owners = (0..6).map(|s| (s, "a".to_string())).collect();
    let live = members(&["a", "b"], 6);
    let a = plan(&live[0], &taken(&owners), &live);
    assert_eq!((a.share, a.release.len(), a.take.len()), (3, 3, 0));
    // b is under its share but nothing is free: it waits, it does not steal.
    let b = plan(&live[1], &taken(&owners), &live);
    assert_eq!((b.share, b.release.len(), b.take.len()), (3, 0, 0));
    // A blocked shard (paused) is neither taken nor counted as anyone's.
    let mut view = taken(&owners);
    view.insert(6, Taken::Blocked);
    let live = members(&["a", "b"], 8);
    let b = plan(&live[1], &view, &live);
    assert_eq!((b.share, b.take), (4, vec![7]));
}

#[test]
fn three_members_settle_at_4_4_4_a_crash_gives_6_6_and_a_join_brings_back_4_4_4() {
    let mut owners = Owners::new();
    let live = members(&["a", "b", "c"], 12);
    settle(&mut owners, &live, 10);
    assert_eq!(counts(&owners).into_values().collect::<Vec<_>>(), [4, 4, 4]);

    // c crashes: its leases expire, its shards are free; only those move.
    let before = owners.clone();
    owners.retain(|_, id| id != "c");
    let live = members(&["a", "b"], 12);
    settle(&mut owners, &live, 10);
    assert_eq!(counts(&owners).into_values().collect::<Vec<_>>(), [6, 6]);
    let moved = (0..12).filter(|s| before.get(s) != owners.get(s)).count();
    assert_eq!(moved, 4, "only c's shards moved");

    // d joins: exactly its share moves to it.
    let before = owners.clone();
    let live = members(&["a", "b", "d"], 12);
    settle(&mut owners, &live, 10);
    assert_eq!(counts(&owners).into_values().collect::<Vec<_>>(), [4, 4, 4]);
    let moved = (0..12).filter(|s| before.get(s) != owners.get(s)).count();
    assert_eq!(moved, 4, "a join moves the newcomer's share and no more");
}

/// The audit's first case (issue 35.6): while a rolling restart changes `--shards` from 4 to
/// 8, a member of N = 4 owns its share of 4 shards counted over both members (2) and the
/// member of N = 8 its share of 8 (4, all above 4): shards 0 and 3, below every member's N,
/// stayed unowned. Counted per band, the member of N = 8 also shares `[0, 4)`.
#[test]
fn a_shard_below_every_members_n_is_owned_while_their_ns_differ() {
    let live = [member("old", 4), member("new", 8)];
    let mut owners: Owners = [(1, "old"), (2, "old"), (4, "new"), (5, "new"), (6, "new")]
        .into_iter()
        .chain([(7, "new")])
        .map(|(s, id)| (s, id.to_string()))
        .collect();
    let new = plan(&live[1], &taken(&owners), &live);
    assert_eq!(new.share, 6, "4 of [4, 8) and 2 of [0, 4)");
    let mut wanted = new.take.clone();
    wanted.sort_unstable();
    assert_eq!(wanted, [0, 3]);
    settle(&mut owners, &live, 10);
    assert_eq!(unowned(&owners, 8), Vec::<u32>::new());
    assert_eq!(counts(&owners)["old"], 2);
}

/// The audit's second case: two members of N = 7 live beside two of N = 5 (a rolling change
/// from 5 to 7 half done), no cap. Shares counted over all four members as if each could take
/// any shard left 2 of the 7 unowned; per band, `[5, 7)` goes to the two members of N = 7 and
/// `[0, 5)` to all four, so every shard is owned, from any start.
#[test]
fn two_members_of_n_7_own_every_shard_beside_members_of_n_5() {
    let live = [
        member("a7", 7),
        member("b7", 7),
        member("c5", 5),
        member("d5", 5),
    ];
    let bands = quotas(&live, &BTreeMap::new());
    let bounds: Vec<(u32, u32)> = bands.iter().map(|b| (b.lo, b.hi)).collect();
    assert_eq!(bounds, [(0, 5), (5, 7)]);
    assert_eq!(bands[1].quota.values().sum::<u32>(), 2);
    assert!(!bands[1].quota.contains_key("c5"));
    assert_eq!(bands[0].quota.values().sum::<u32>(), 5);
    for start in [
        Owners::new(),
        // The state the audit saw: each N = 7 member content with 2 of [0, 5).
        [(0, "a7"), (1, "a7"), (2, "b7"), (3, "b7")]
            .into_iter()
            .map(|(s, id)| (s, id.to_string()))
            .collect(),
    ] {
        let mut owners = start;
        settle(&mut owners, &live, 10);
        assert_eq!(unowned(&owners, 7), Vec::<u32>::new(), "{owners:?}");
        // [5, 7): one each; [0, 5): 2, 1, 1, 1, the remainder by id.
        let c: Vec<(String, u32)> = counts(&owners).into_iter().collect();
        let want = [("a7", 3), ("b7", 2), ("c5", 1), ("d5", 1)].map(|(id, n)| (id.to_string(), n));
        assert_eq!(c, want);
    }
}

/// A member's order walks every shard of a band once, its rank is its place in the walk, and
/// taking `k` free shards of a group of a million costs about `k` steps, not a million.
#[test]
fn a_huge_group_with_a_cap_costs_what_its_taken_shards_cost() {
    let live = [
        Member {
            cap: Some(2),
            ..member("a", 1_000_000)
        },
        Member {
            cap: Some(2),
            ..member("b", 1_000_000)
        },
    ];
    let mut owners = Owners::new();
    let started = std::time::Instant::now();
    settle(&mut owners, &live, 10);
    assert_eq!(counts(&owners).into_values().collect::<Vec<_>>(), [2, 2]);
    let a = plan(&live[0], &taken(&owners), &live);
    assert_eq!((a.share, a.release.len(), a.take.len()), (2, 0, 0));
    // Generous: a walk of the million shards per plan would take seconds in a debug build.
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    // Small bands: the order is a permutation whatever the id.
    for len in [1u32, 2, 3, 7, 12, 64, 97] {
        for id in ["a", "member-7", "x"] {
            let view = BTreeMap::new();
            let m = Member {
                cap: None,
                ..member(id, len)
            };
            let mut all = plan(&m, &view, std::slice::from_ref(&m)).take;
            all.sort_unstable();
            assert_eq!(all, (0..len).collect::<Vec<_>>(), "{id} over {len}");
        }
    }
}

proptest! {
    /// From any ownership (dead owners included), any live members, weights, caps and shard
    /// counts, the rounds settle with every live member owning exactly its quotas, only below
    /// its own N and at most its cap, no shard owned by a member that is gone, and — without
    /// caps — every shard below the largest N owned.
    #[test]
    fn any_state_settles_to_the_quotas(
        live in 1usize..6,
        weights in prop::collection::vec(1u32..4, 6),
        ns in prop::collection::vec(1u32..30, 6),
        mixed in any::<bool>(),
        caps in prop::collection::vec(prop::option::of(1u32..12), 6),
        capped in any::<bool>(),
        start in prop::collection::vec(prop::option::of(0usize..8), 30),
        order_seed in any::<u64>(),
    ) {
        let ids = ["m0", "m1", "m2", "m3", "m4", "m5", "gone-0", "gone-1"];
        let members: Vec<Member> = (0..live)
            .map(|i| Member {
                id: ids[i].to_string(),
                weight: weights[i],
                shards: if mixed { ns[i] } else { ns[0] },
                cap: if capped { caps[i] } else { None },
            })
            .collect();
        let most = members.iter().map(|m| m.shards).max().unwrap_or(0);
        // A live member held only shards below its N; a dead owner's lease expires: free.
        let mut owners: Owners = start
            .iter()
            .enumerate()
            .filter_map(|(s, o)| Some((u32::try_from(s).unwrap(), ids[(*o)?].to_string())))
            .filter(|(s, id)| members.iter().any(|m| &m.id == id && *s < m.shards))
            .collect();
        let mut order: Vec<usize> = (0..live).collect();
        order.rotate_left(usize::try_from(order_seed % live as u64).unwrap());
        for _ in 0..(most as usize + 6) {
            let before = owners.clone();
            round(&mut owners, &members, &order);
            if owners == before { break; }
        }
        let view = taken(&owners);
        for m in &members {
            let p = plan(m, &view, &members);
            prop_assert!(p.release.is_empty() && p.take.is_empty(), "{} unsettled: {:?} {:?}", m.id, p, owners);
            let mine: Vec<u32> = owners.iter().filter(|(_, id)| **id == m.id).map(|(&s, _)| s).collect();
            prop_assert_eq!(u32::try_from(mine.len()).unwrap(), p.share);
            prop_assert!(mine.iter().all(|&s| s < m.shards));
            prop_assert!(m.cap.is_none_or(|cap| p.share <= cap));
        }
        if !capped {
            prop_assert_eq!(unowned(&owners, most), Vec::<u32>::new());
            if !mixed && members.iter().all(|m| m.weight == members[0].weight) {
                let c = counts(&owners);
                let lo = members.iter().map(|m| c.get(&m.id).copied().unwrap_or(0)).min().unwrap_or(0);
                let hi = c.values().max().copied().unwrap_or(0);
                prop_assert!(hi - lo <= 1, "{:?}", c);
            }
        }
    }
}
