//! Spreading a group's shards over live members (issue 29) on one backend: three members
//! settle at 4/4/4, a leaver's shards go to the others (6/6), a joiner takes exactly its
//! share from the members over it (4/4/4 again, 4 shards moved), no shard ever has two
//! believers, each shard's terms strictly rise; two members given one id never share a shard.

use crate::common::unique;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tenure::backend::CountingBackend;
use tenure::{Member, Spread, Store};
use tokio::time::{sleep, Instant};

/// 2 s: renew every 500 ms, database timeout 400 ms (a loaded machine's round trips fit).
pub(crate) const TTL: Duration = Duration::from_millis(2_000);
/// Generous: settling takes a few renew intervals.
pub(crate) const WITHIN: Duration = Duration::from_secs(40);

/// What the members' work saw: per shard who works on it now and the last term it started,
/// and every start in order.
#[derive(Default)]
pub(crate) struct Record {
    pub(crate) working: BTreeMap<u32, (String, u64)>,
    pub(crate) last_term: BTreeMap<u32, u64>,
    pub(crate) starts: Vec<(String, u32, u64)>,
    pub(crate) violations: Vec<String>,
}

pub(crate) type Shared = Arc<Mutex<Record>>;

/// Records the start of `guard`'s work (checking that nobody else works on the shard and that
/// its term is above the last one), then waits in the background for `lost()`, records the
/// stop and drops the guard (which releases the shard).
fn work(id: &str, guard: tenure::ShardGuard, record: &Shared) {
    let (shard, term) = (guard.shard(), guard.term());
    {
        let mut r = record.lock().unwrap();
        if let Some(other) = r.working.get(&shard) {
            let v = format!("shard {shard}: {id} (term {term}) started while {other:?} worked");
            r.violations.push(v);
        }
        if let Some(&last) = r.last_term.get(&shard).filter(|&&t| t >= term) {
            r.violations
                .push(format!("shard {shard}: term {term} after {last}"));
        }
        r.working.insert(shard, (id.to_string(), term));
        r.last_term.insert(shard, term);
        r.starts.push((id.to_string(), shard, term));
    }
    let record = record.clone();
    tokio::spawn(async move {
        guard.lost().await;
        let mut r = record.lock().unwrap();
        if r.working.get(&shard).is_some_and(|(_, t)| *t == term) {
            r.working.remove(&shard);
        }
        drop(r);
        drop(guard);
    });
}

/// A member and the loop that works on every shard it gets, until told to stop.
pub(crate) struct Worker {
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Member>,
    pub(crate) owned: tokio::sync::watch::Receiver<std::collections::BTreeSet<u32>>,
}

pub(crate) fn start(mut member: Member, record: &Shared) -> Worker {
    let owned = member.owned();
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let record = record.clone();
    let task = tokio::spawn(async move {
        let id = member.id().to_string();
        loop {
            tokio::select! {
                guard = member.next() => match guard {
                    Some(guard) => work(&id, guard, &record),
                    None => return member,
                },
                _ = &mut stopped => return member,
            }
        }
    });
    Worker { stop, task, owned }
}

impl Worker {
    pub(crate) async fn leave(self) {
        self.stop.send(()).unwrap();
        self.task.await.unwrap().leave().await;
    }

    pub(crate) fn count(&self) -> usize {
        self.owned.borrow().len()
    }
}

pub(crate) async fn join(store: &Store, group: &str, id: &str) -> Member {
    join_with(store, group, id, 12, None).await
}

/// A member of `group` counting `shards` shards, at most `cap` of them.
pub(crate) async fn join_with(
    store: &Store,
    group: &str,
    id: &str,
    shards: u32,
    cap: Option<u32>,
) -> Member {
    let mut spread = Spread::new(store.clone(), group, shards)
        .unwrap()
        .member(id)
        .ttl(TTL);
    if let Some(k) = cap {
        spread = spread.max_per_member(k);
    }
    spread.join().await.unwrap()
}

/// Waits (bounded) until the workers own `want` shards each, all different, and the
/// database's assignment says the same.
pub(crate) async fn settle(
    store: &Store,
    group: &str,
    workers: &[&Worker],
    want: usize,
    record: &Shared,
) {
    let spread = Spread::new(store.clone(), group, 12).unwrap();
    let start = Instant::now();
    loop {
        let counts: Vec<usize> = workers.iter().map(|w| w.count()).collect();
        if counts.iter().all(|&c| c == want) {
            let assignment = spread.assignment().await.unwrap();
            let sizes: Vec<usize> = assignment.members.values().map(Vec::len).collect();
            if assignment.unowned.is_empty() && sizes.iter().all(|&s| s == want) {
                break;
            }
        }
        let violations = record.lock().unwrap().violations.clone();
        assert!(violations.is_empty(), "{violations:?}");
        assert!(
            start.elapsed() < WITHIN,
            "not {want} each within {WITHIN:?}: {counts:?}"
        );
        sleep(Duration::from_millis(20)).await;
    }
}

pub(crate) async fn spread_settles_rebalances_and_never_doubles(store: Store) {
    let group = unique("spread");
    let record = Shared::default();
    let a = start(join(&store, &group, "a").await, &record);
    let b = start(join(&store, &group, "b").await, &record);
    let c = start(join(&store, &group, "c").await, &record);
    settle(&store, &group, &[&a, &b, &c], 4, &record).await;

    c.leave().await;
    settle(&store, &group, &[&a, &b], 6, &record).await;

    let before = record.lock().unwrap().starts.len();
    let d = start(join(&store, &group, "d").await, &record);
    settle(&store, &group, &[&a, &b, &d], 4, &record).await;
    {
        let r = record.lock().unwrap();
        let moved: Vec<_> = r.starts[before..].to_vec();
        // Sticky, no stealing: only the 4 shards the joiner needs move, all to it.
        assert_eq!(moved.len(), 4, "{moved:?}");
        assert!(moved.iter().all(|(id, _, _)| id == "d"), "{moved:?}");
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        // Every shard has been started at least once, each time with a higher term.
        assert_eq!(r.last_term.len(), 12);
    }
    for w in [a, b, d] {
        w.leave().await;
    }
    let assignment = Spread::new(store.clone(), &group, 12)
        .unwrap()
        .assignment()
        .await
        .unwrap();
    assert!(assignment.members.is_empty(), "{assignment:?}");
    assert_eq!(assignment.unowned_count(), 12);
    assert_eq!(assignment.unowned, vec![0..=11]);
}

pub(crate) async fn spread_members_sharing_an_id_never_share_a_shard(store: Store) {
    let group = unique("twins");
    let record = Shared::default();
    let one = start(join(&store, &group, "twin").await, &record);
    let two = start(join(&store, &group, "twin").await, &record);
    let start_at = Instant::now();
    // Each counts the other's shards as taken: together they own the 12, none twice.
    loop {
        let (x, y) = (one.owned.borrow().clone(), two.owned.borrow().clone());
        assert!(x.is_disjoint(&y), "{x:?} {y:?}");
        if x.len() + y.len() == 12 && start_at.elapsed() > TTL * 2 {
            break;
        }
        assert!(start_at.elapsed() < WITHIN, "{x:?} {y:?}");
        sleep(Duration::from_millis(20)).await;
    }
    let violations = record.lock().unwrap().violations.clone();
    assert!(violations.is_empty(), "{violations:?}");
    one.leave().await;
    two.leave().await;
}

/// A group's assignment is one read: `Spread::assignment` and `spread::assignments` each run
/// one transaction (members and shards in one statement), with no other call, and agree with
/// what the members' work holds.
pub(crate) async fn spread_assignment_is_one_read(store: Store) {
    let group = unique("oneread");
    let record = Shared::default();
    let a = start(join(&store, &group, "a").await, &record);
    let b = start(join(&store, &group, "b").await, &record);
    settle(&store, &group, &[&a, &b], 6, &record).await;

    let counting = Arc::new(CountingBackend::new(store.backend().clone()));
    let counted = Store::from_backend(counting.clone(), Duration::from_secs(10));
    let spread = Spread::new(counted.clone(), &group, 12).unwrap();
    let before = counting.counts();
    let one = spread.assignment().await.unwrap();
    let spent = counting.counts().since(before);
    assert_eq!((spent.transactions, spent.applies, spent.reads), (1, 0, 0));

    let before = counting.counts();
    let all = tenure::spread::assignments(&counted).await.unwrap();
    let spent = counting.counts().since(before);
    assert_eq!((spent.transactions, spent.applies, spent.reads), (1, 0, 0));

    let held = |w: &Worker| w.owned.borrow().iter().copied().collect::<Vec<u32>>();
    let mine = all.iter().find(|g| g.group == group).expect("the group");
    for seen in [&one, mine] {
        assert_eq!(seen.shards, 12);
        assert!(seen.unowned.is_empty(), "{seen:?}");
        assert_eq!(seen.members.get("a"), Some(&held(&a)), "{seen:?}");
        assert_eq!(seen.members.get("b"), Some(&held(&b)), "{seen:?}");
        assert_eq!(seen.terms.len(), 12, "{seen:?}");
        assert!(seen.terms.values().all(|&t| t >= 1), "{seen:?}");
    }
    a.leave().await;
    b.leave().await;
}
