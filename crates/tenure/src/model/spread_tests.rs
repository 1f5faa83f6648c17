//! The spreading rules: balanced shares, caps and weights, no stealing, convergence from any
//! state, and the fewest moves on a join or a leave.

use super::spread::{plan, shares, Member};
use proptest::prelude::*;
use std::collections::BTreeMap;

fn members(ids: &[&str]) -> Vec<Member> {
    ids.iter()
        .map(|id| Member {
            id: id.to_string(),
            weight: 1,
        })
        .collect()
}

fn counts(owners: &[Option<String>]) -> BTreeMap<String, u32> {
    let mut c = BTreeMap::new();
    for o in owners.iter().flatten() {
        *c.entry(o.clone()).or_default() += 1;
    }
    c
}

/// One round: every member plans from the same view; releases first, then takes in `order`
/// (a free shard goes to the first member that tries it). Returns how many shards changed
/// hands (a release or a take each count once per shard that ends with another owner).
fn round(owners: &mut [Option<String>], live: &[Member], cap: Option<u32>, order: &[usize]) {
    let view = owners.to_vec();
    let plans: Vec<_> = live.iter().map(|m| plan(&m.id, &view, live, cap)).collect();
    for (m, p) in live.iter().zip(&plans) {
        for &s in &p.release {
            assert_eq!(
                owners[s as usize].as_deref(),
                Some(m.id.as_str()),
                "released another's"
            );
            owners[s as usize] = None;
        }
    }
    for &i in order {
        for &s in &plans[i].take {
            if view[s as usize].is_none() && owners[s as usize].is_none() {
                owners[s as usize] = Some(live[i].id.clone());
            }
        }
    }
}

/// Rounds until nothing changes (at most `limit`); panics if it never settles.
fn settle(
    owners: &mut Vec<Option<String>>,
    live: &[Member],
    cap: Option<u32>,
    limit: usize,
) -> usize {
    let order: Vec<usize> = (0..live.len()).collect();
    for n in 0..limit {
        let before = owners.clone();
        round(owners, live, cap, &order);
        if *owners == before {
            return n;
        }
    }
    panic!("did not settle in {limit} rounds: {owners:?}");
}

#[test]
fn equal_members_get_the_floor_or_the_ceiling() {
    let m = members(&["a", "b", "c"]);
    let s = shares(12, &m, &BTreeMap::new(), None);
    assert_eq!(s.values().copied().collect::<Vec<_>>(), [4, 4, 4]);
    let s = shares(64, &m, &BTreeMap::new(), None);
    assert_eq!(s.values().copied().collect::<Vec<_>>(), [22, 21, 21]);
    // The remainder goes to a member already owning beyond its floor first.
    let owned = BTreeMap::from([("c".to_string(), 22)]);
    let s = shares(64, &m, &owned, None);
    assert_eq!((s["a"], s["b"], s["c"]), (21, 21, 22));
}

#[test]
fn caps_leave_shards_unowned_and_weights_scale_shares() {
    let m = members(&["a", "b"]);
    let s = shares(12, &m, &BTreeMap::new(), Some(4));
    assert_eq!((s["a"], s["b"]), (4, 4));
    let heavy = vec![
        Member {
            id: "a".into(),
            weight: 3,
        },
        Member {
            id: "b".into(),
            weight: 1,
        },
    ];
    let s = shares(12, &heavy, &BTreeMap::new(), None);
    assert_eq!((s["a"], s["b"]), (9, 3));
    // A capped heavy member's excess goes to the others.
    let s = shares(12, &heavy, &BTreeMap::new(), Some(5));
    assert_eq!((s["a"], s["b"]), (5, 5));
}

#[test]
fn a_member_over_its_share_releases_and_never_takes_from_others() {
    let owners: Vec<Option<String>> = (0..6).map(|_| Some("a".to_string())).collect();
    let live = members(&["a", "b"]);
    let a = plan("a", &owners, &live, None);
    assert_eq!((a.share, a.release.len(), a.take.len()), (3, 3, 0));
    // b is under its share but nothing is free: it waits, it does not steal.
    let b = plan("b", &owners, &live, None);
    assert_eq!((b.share, b.release.len(), b.take.len()), (3, 0, 0));
}

#[test]
fn three_members_settle_at_4_4_4_a_crash_gives_6_6_and_a_join_brings_back_4_4_4() {
    let mut owners: Vec<Option<String>> = vec![None; 12];
    let live = members(&["a", "b", "c"]);
    settle(&mut owners, &live, None, 10);
    assert_eq!(
        counts(&owners).values().copied().collect::<Vec<_>>(),
        [4, 4, 4]
    );

    // c crashes: its leases expire, its shards are free; only those move.
    let before = owners.clone();
    for o in owners.iter_mut() {
        if o.as_deref() == Some("c") {
            *o = None;
        }
    }
    let live = members(&["a", "b"]);
    settle(&mut owners, &live, None, 10);
    assert_eq!(
        counts(&owners).values().copied().collect::<Vec<_>>(),
        [6, 6]
    );
    let moved = before.iter().zip(&owners).filter(|(x, y)| x != y).count();
    assert_eq!(moved, 4, "only c's shards moved");

    // d joins: exactly its share moves to it.
    let before = owners.clone();
    let live = members(&["a", "b", "d"]);
    settle(&mut owners, &live, None, 10);
    assert_eq!(
        counts(&owners).values().copied().collect::<Vec<_>>(),
        [4, 4, 4]
    );
    let moved = before.iter().zip(&owners).filter(|(x, y)| x != y).count();
    assert_eq!(moved, 4, "a join moves the newcomer's share and no more");
}

proptest! {
    /// From any ownership (dead owners included), any live members, weights and cap, the
    /// rounds settle with every live member owning exactly its share, no shard owned by a
    /// member that is gone, and as many shards owned as the members can hold.
    #[test]
    fn any_state_settles_balanced(
        shards in 1u32..40,
        live in 1usize..6,
        weights in prop::collection::vec(1u32..4, 6),
        cap in prop::option::of(1u32..12),
        start in prop::collection::vec(prop::option::of(0usize..8), 40),
        order_seed in any::<u64>(),
    ) {
        let ids = ["m0", "m1", "m2", "m3", "m4", "m5", "gone-0", "gone-1"];
        let members: Vec<Member> = (0..live)
            .map(|i| Member { id: ids[i].to_string(), weight: weights[i] })
            .collect();
        let mut owners: Vec<Option<String>> = start[..shards as usize]
            .iter()
            .map(|o| o.map(|i| ids[i].to_string()))
            .collect();
        // A dead owner's lease expires: its shards are free.
        for o in owners.iter_mut() {
            if o.as_ref().is_some_and(|id| !members.iter().any(|m| &m.id == id)) {
                *o = None;
            }
        }
        let mut order: Vec<usize> = (0..live).collect();
        order.rotate_left(usize::try_from(order_seed % live as u64).unwrap());
        for _ in 0..(shards as usize + 4) {
            let before = owners.clone();
            round(&mut owners, &members, cap, &order);
            if owners == before { break; }
        }
        let got = counts(&owners);
        let want = shares(shards, &members, &got, cap);
        for m in &members {
            prop_assert_eq!(got.get(&m.id).copied().unwrap_or(0), want[&m.id], "{:?}", owners);
        }
        let capacity: u64 = members.iter().map(|_| u64::from(cap.unwrap_or(u32::MAX))).sum();
        let owned: u32 = got.values().sum();
        prop_assert_eq!(u64::from(owned), u64::from(shards).min(capacity));
        if cap.is_none() {
            let lo = want.values().min().copied().unwrap_or(0);
            let hi = want.values().max().copied().unwrap_or(0);
            let equal = members.iter().all(|m| m.weight == members[0].weight);
            prop_assert!(!equal || hi - lo <= 1, "{:?}", want);
        }
    }
}
