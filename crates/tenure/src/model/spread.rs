//! Spreading a group's shards over its live members (issue 29's rules, IO-free): each member's
//! share, and which shards a member lets go of or tries to take.
//!
//! Every member runs the same rules on a view of the group — the live members (their rows:
//! weight, shard count, cap) and the shards that are not free (their leases) — read in one
//! transaction. Views taken at different instants may disagree for a moment; that costs a
//! move, never safety, since each shard is an ordinary lease with one believer at a time. The
//! rules:
//!
//! - **Only a member whose N covers a shard counts for it** ([`quotas`]). Members may give
//!   different shard counts while they restart with a new `--shards`; a member takes and gives
//!   back only shards below its own N. The shards are cut into *bands* at the members' distinct
//!   Ns (`[0, N₁)`, `[N₁, N₂)`, …): each band is shared among the members that cover it, the
//!   band covered by the fewest members first, each member's cap shrinking by what it got in
//!   the bands before. With one N for all there is one band: the classic ⌊N/M⌋ or ⌈N/M⌉.
//! - **Shares** ([`shares`]): a band's shards over its members by weight, each at most its
//!   (remaining) cap; with equal weights and no cap every member gets ⌊n/M⌋ or ⌈n/M⌉. The
//!   remainder goes first to members that already own more than their floor in the band
//!   (sticky), then to heavier members, then by id — a total order, so every member computes
//!   the same shares from the same view. Shards beyond the members' capacity stay unowned.
//! - **No stealing** ([`plan`]): a member over its quota in a band releases its surplus there
//!   (after stopping that shard's work: the layer's business); a member under it takes free
//!   shards only. A join therefore moves exactly the shards the members over their new share
//!   let go of, and a leave (or crash) moves only the leaver's shards once their leases are
//!   free.
//! - **Which shards**: each member walks each band in an order of its own (a permutation
//!   seeded by its id: start and stride), keeping the shards earliest in its order and taking
//!   the free ones it meets first — so members under their share reach for different shards,
//!   a member's set is stable, and finding `k` free shards costs `k` plus the shards already
//!   taken, never the band's size: a group of a million shards costs what its live rows cost.

use std::collections::BTreeMap;

/// A live member of a group, as its row shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its member id (the holder id of its shards).
    pub id: String,
    /// Its weight (at least 1): shares are proportional to it.
    pub weight: u32,
    /// Its shard count N: it takes and gives back only shards below it.
    pub shards: u32,
    /// At most this many shards on it (`None`: no cap).
    pub cap: Option<u32>,
}

/// A shard that is not free, as one view saw it (every other shard below the members' Ns is).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Taken {
    /// Held live by this id (a member, or any other holder).
    By(String),
    /// Nobody may take it now: paused, or held under the planning member's own id by another
    /// process (or a release of its own still landing).
    Blocked,
}

/// What one member should do now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Its share of the group: its quotas summed over the bands it covers.
    pub share: u32,
    /// Shards it owns beyond its quota: stop their work, then release them (least preferred
    /// first).
    pub release: Vec<u32>,
    /// Free shards to try to take, most preferred first (at most its deficit).
    pub take: Vec<u32>,
}

/// One band `[lo, hi)` of the shards and each covering member's quota in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Band {
    /// Its first shard.
    pub lo: u32,
    /// One past its last shard.
    pub hi: u32,
    /// Each member whose N covers it → how many of its shards that member should own.
    pub quota: BTreeMap<String, u32>,
}

/// Each member's share of `shards` shards: proportional to its weight, at most its cap, the
/// remainder to members that own more than their floor (`owned`), then to heavier ones, then
/// by id. Members with weight 0 count as weight 1. (Every member counts as covering all
/// `shards`: [`quotas`] calls it once per band.)
pub fn shares(
    shards: u32,
    members: &[Member],
    owned: &BTreeMap<String, u32>,
) -> BTreeMap<String, u32> {
    let cap = |m: &Member| m.cap.unwrap_or(u32::MAX);
    let weight = |m: &Member| u64::from(m.weight.max(1));
    let mut share: BTreeMap<String, u32> = members.iter().map(|m| (m.id.clone(), 0)).collect();
    let mut left = u64::from(shards);
    // Proportional rounds: each gives every member below its cap the floor of its part of
    // what is left; a capped member's excess goes to the others in the next round.
    loop {
        let open: Vec<&Member> = members.iter().filter(|m| share[&m.id] < cap(m)).collect();
        let total: u64 = open.iter().map(|m| weight(m)).sum();
        if left == 0 || total == 0 {
            break;
        }
        let mut given = 0;
        for m in &open {
            let part = left * weight(m) / total;
            let room = u64::from(cap(m) - share[&m.id]);
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
            if share[&m.id] < cap(m) {
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

/// The bands of `members`' shard counts and each covering member's quota in each, the band
/// covered by the fewest members first (its shards have the fewest takers; every member
/// covering it also covers the bands below): each member's cap shrinks by what it got before.
/// `taken` gives each member's owned shards per band (the sticky remainder).
pub fn quotas(members: &[Member], taken: &BTreeMap<u32, Taken>) -> Vec<Band> {
    let mut bounds: Vec<u32> = members
        .iter()
        .map(|m| m.shards)
        .filter(|&n| n > 0)
        .collect();
    bounds.sort_unstable();
    bounds.dedup();
    let mut room: BTreeMap<&str, u32> = members
        .iter()
        .map(|m| (m.id.as_str(), m.cap.unwrap_or(u32::MAX)))
        .collect();
    let mut bands = Vec::with_capacity(bounds.len());
    for (j, &hi) in bounds.iter().enumerate().rev() {
        let lo = if j == 0 { 0 } else { bounds[j - 1] };
        let covering: Vec<Member> = members
            .iter()
            .filter(|m| m.shards >= hi)
            .map(|m| Member {
                cap: Some(room[m.id.as_str()]),
                ..m.clone()
            })
            .collect();
        let mut owned: BTreeMap<String, u32> = BTreeMap::new();
        for taken in taken.range(lo..hi).map(|(_, t)| t) {
            if let Taken::By(id) = taken {
                *owned.entry(id.clone()).or_default() += 1;
            }
        }
        let quota = shares(hi - lo, &covering, &owned);
        for (id, n) in &quota {
            if let Some(r) = room.get_mut(id.as_str()) {
                *r -= n;
            }
        }
        bands.push(Band { lo, hi, quota });
    }
    bands.reverse();
    bands
}

/// What `me` should do, given the shards that are not free (`taken`: every shard below the
/// members' Ns that is missing is free) and the live members (`me` among them, or added).
pub fn plan(me: &Member, taken: &BTreeMap<u32, Taken>, members: &[Member]) -> Plan {
    let mut members = members.to_vec();
    if !members.iter().any(|m| m.id == me.id) {
        members.push(me.clone());
    }
    let mut plan = Plan::default();
    for band in quotas(&members, taken) {
        let Some(&quota) = band.quota.get(&me.id) else {
            continue;
        };
        plan.share += quota;
        let order = Order::new(&me.id, band.lo, band.hi);
        let mut mine: Vec<u32> = taken
            .range(band.lo..band.hi)
            .filter(|(_, t)| matches!(t, Taken::By(id) if *id == me.id))
            .map(|(&s, _)| s)
            .collect();
        let held = u32::try_from(mine.len()).unwrap_or(u32::MAX);
        if held > quota {
            // Least preferred first: latest in this member's order.
            mine.sort_by_key(|&s| std::cmp::Reverse(order.rank(s)));
            plan.release.extend(&mine[..(held - quota) as usize]);
        } else {
            let want = (quota - held) as usize;
            plan.take.extend(order.free(taken, want));
        }
    }
    plan
}

/// A member's order of one band `[lo, lo + len)`: `lo + (start + k·step) mod len` for
/// `k = 0, 1, …`, with `step` coprime to `len` (so every shard comes once), both drawn from the
/// member's id and the band.
struct Order {
    lo: u32,
    len: u64,
    start: u64,
    step: u64,
    /// `step`'s inverse modulo `len`: a shard's rank without walking to it.
    inverse: u64,
}

impl Order {
    fn new(member: &str, lo: u32, hi: u32) -> Order {
        let len = u64::from(hi - lo).max(1);
        let start = hash(member, lo, hi, 0) % len;
        let mut step = if len == 1 {
            1
        } else {
            1 + hash(member, lo, hi, 1) % (len - 1)
        };
        while gcd(step, len) != 1 {
            step = step % (len - 1) + 1;
        }
        Order {
            lo,
            len,
            start,
            step,
            inverse: inverse(step, len),
        }
    }

    /// The `k`-th shard of the order.
    fn nth(&self, k: u64) -> u32 {
        let at =
            (u128::from(self.start) + u128::from(k) * u128::from(self.step)) % u128::from(self.len);
        self.lo + u32::try_from(at).expect("below the band's length")
    }

    /// Where shard `s` (in the band) comes in the order.
    fn rank(&self, s: u32) -> u64 {
        let offset = (u64::from(s - self.lo) + self.len - self.start) % self.len;
        let rank = u128::from(offset) * u128::from(self.inverse) % u128::from(self.len);
        u64::try_from(rank).expect("below the band's length")
    }

    /// The first `want` free shards of the order (fewer if fewer are free): each step meets a
    /// taken shard (at most as many as `taken` holds in the band) or a free one, so the walk is
    /// bounded by `want` plus the band's taken shards, never by its length.
    fn free(&self, taken: &BTreeMap<u32, Taken>, want: usize) -> Vec<u32> {
        let hi = u64::from(self.lo) + self.len;
        let taken_here = taken
            .range(self.lo..)
            .take_while(|(&s, _)| u64::from(s) < hi)
            .count();
        let free = usize::try_from(self.len).unwrap_or(usize::MAX) - taken_here;
        let want = want.min(free);
        let mut out = Vec::with_capacity(want);
        let mut k = 0;
        while out.len() < want && k < self.len {
            let s = self.nth(k);
            if !taken.contains_key(&s) {
                out.push(s);
            }
            k += 1;
        }
        out
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `a`'s inverse modulo `m` (`a` coprime to `m`; 0 for `m` = 1).
fn inverse(a: u64, m: u64) -> u64 {
    let (mut r0, mut r1) = (i128::from(m), i128::from(a));
    let (mut t0, mut t1) = (0i128, 1i128);
    while r1 != 0 {
        let q = r0 / r1;
        (r0, r1) = (r1, r0 - q * r1);
        (t0, t1) = (t1, t0 - q * t1);
    }
    u64::try_from(t0.rem_euclid(i128::from(m))).expect("below m")
}

/// 64-bit FNV-1a over (`member`, band, `salt`). Only a preference — members that disagree on
/// it (another build) move more, never two owners at once.
fn hash(member: &str, lo: u32, hi: u32, salt: u8) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    member
        .bytes()
        .chain([0xff, salt])
        .chain(lo.to_le_bytes())
        .chain(hi.to_le_bytes())
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME))
}
