//! A member's tick: its one transaction per renew interval, whatever its number of shards.
//!
//! In order: the database's now; the group's row, share-locked (an operator's pause waits for
//! the ticks under way, and every tick after it sees it; created unpaused by the group's first
//! tick); the group's view in one statement (live members, live or paused shard rows); the
//! member's own row written; then the model's plan (`model::spread::plan`) and every lease
//! change it leads to, through the seam's `Tx::leases` — the renewal of each shard whose guard
//! still believes, the release of each term whose guard came back, the take of free shards —
//! each decided by the model under the lease row's lock, all rows locked in one statement and
//! the renewals written in one more. Eight round trips in all (with `BEGIN` and `COMMIT`) in a
//! steady state, at 1 shard or 1,000.
//!
//! The member hands out guards and extends beliefs only from a committed tick: a tick that
//! fails changes nothing it believes (its beliefs end at their deadlines unless a later tick
//! renews them), and a take whose commit is unknown is at most a lease held under its id
//! with no guard, which it counts as nobody's to take until it expires.

use super::view::Cell;
use super::view::{statements, view};
use crate::backend::tx::{Arg, Body, Outcome, Schema, Tx};
use crate::error::{Error, Result};
use crate::model::spread::{plan, Member, Taken};
use crate::model::{DbTime, Op, Purpose};
use crate::records::Applied;
use std::collections::{BTreeMap, BTreeSet};

/// How many free shards one tick takes at most: a member alone in a large group without a
/// cap takes its share over several ticks rather than in one transaction that its database
/// timeout could not carry.
pub(super) const MAX_TAKES: usize = 256;

/// A shard's lease held as a lock (its acquisitions and releases are not history).
const PURPOSE: Purpose = Purpose::Lock {
    record_every_cycle: false,
};

/// Who ticks: the member's row.
#[derive(Clone, Debug)]
pub(super) struct Me {
    pub(super) group: String,
    pub(super) member: Member,
    /// Its registration's ttl and each shard lease's.
    pub(super) ttl_ms: u64,
}

/// What the member has of its shards, as the tick needs it.
#[derive(Clone, Debug, Default)]
pub(super) struct Local {
    /// Each shard whose guard is out → its term, and whether to renew it (still believed,
    /// not asked back).
    pub(super) out: BTreeMap<u32, (u64, bool)>,
    /// Each shard whose guard came back with a term still to release.
    pub(super) stale: BTreeMap<u32, u64>,
}

/// What a committed tick did.
#[derive(Clone, Debug)]
pub(super) struct Ticked {
    pub(super) now: DbTime,
    /// The group is paused: every shard is to be given back.
    pub(super) paused: bool,
    /// This member's share.
    pub(super) share: u32,
    /// Shards to surrender (their guards' beliefs end; released when they come back).
    pub(super) surrender: Vec<u32>,
    /// Each renewal: the shard, the term, the answer.
    pub(super) renewed: Vec<(u32, u64, Applied)>,
    /// Each release of a stale term: the shard, the term.
    pub(super) released: Vec<(u32, u64)>,
    /// Each take: the shard and the answer.
    pub(super) taken: Vec<(u32, Applied)>,
}

impl Ticked {
    /// Nothing done yet, at `now`.
    fn at(now: DbTime) -> Ticked {
        Ticked {
            now,
            paused: false,
            share: 0,
            surrender: Vec::new(),
            renewed: Vec::new(),
            released: Vec::new(),
            taken: Vec::new(),
        }
    }
}

/// The tick's transaction.
pub(super) struct Tick<'a> {
    pub(super) statements: &'a Cell,
    pub(super) me: &'a Me,
    pub(super) local: &'a Local,
    /// Also drop the rows of members that expired (at the first tick and now and then).
    pub(super) purge: bool,
    pub(super) done: Option<Ticked>,
}

#[async_trait::async_trait]
impl Body for Tick<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&super::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "spread"
    }

    fn db_now(&self) -> Option<DbTime> {
        self.done.as_ref().map(|t| t.now)
    }

    fn name(&self) -> Option<&str> {
        Some(&self.me.group)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.done = None;
        let (me, local) = (self.me, self.local);
        let group = me.group.as_str();
        let now = tx.now().await?;
        let s = statements(self.statements, tx);
        let mut rows = tx.fetch(&s.lock_group, &[Arg::Text(group)]).await?;
        if rows.is_empty() {
            let args = [Arg::Text(group), Arg::Bool(false), Arg::Int(now.0)];
            tx.execute(&s.create_group, &args).await?;
            rows = tx.fetch(&s.lock_group, &[Arg::Text(group)]).await?;
        }
        let paused = match rows.first() {
            Some(row) => row.boolean("paused")?,
            None => false,
        };
        let seen = view(self.statements, tx, group, now).await?;
        let since = seen
            .members
            .iter()
            .find(|m| m.member.id == me.member.id)
            .map_or(now, |m| m.since);
        write_member(s, tx, me, since, now).await?;
        if self.purge {
            let args = [Arg::Text(group), Arg::Int(now.0)];
            tx.execute(&s.purge_members, &args).await?;
        }
        let members: Vec<Member> = seen
            .members
            .into_iter()
            .map(|m| m.member)
            .filter(|m| m.id != me.member.id)
            .chain([me.member.clone()])
            .collect();
        let mut ticked = Ticked::at(now);
        ticked.paused = paused;
        let mut take = Vec::new();
        if paused {
            ticked.surrender = local.out.keys().copied().collect();
        } else {
            let taken = taken(&seen.shards, local, &me.member.id);
            let p = plan(&me.member, &taken, &members);
            ticked.share = p.share;
            ticked.surrender = p.release;
            take = p.take;
            take.retain(|i| !local.out.contains_key(i) && !local.stale.contains_key(i));
            take.truncate(MAX_TAKES);
        }
        let ops = self.ops(&ticked.surrender, &take);
        let names: Vec<String> = ops
            .iter()
            .map(|(i, _)| super::shard_name(group, *i))
            .collect();
        let batch: Vec<(&str, Op)> = names
            .iter()
            .zip(&ops)
            .map(|(name, (_, op))| (name.as_str(), op.clone()))
            .collect();
        let applied = match batch.is_empty() {
            true => Vec::new(),
            false => tx.leases(&batch, &me.member.id).await?,
        };
        if applied.len() != ops.len() {
            return Err(Error::Unsupported(
                "a batch of lease operations answered short",
            ));
        }
        for ((i, op), applied) in ops.into_iter().zip(applied) {
            match op {
                Op::Renew { term, .. } => ticked.renewed.push((i, term, applied)),
                Op::Release { term, .. } => ticked.released.push((i, term)),
                _ => ticked.taken.push((i, applied)),
            }
        }
        self.done = Some(ticked);
        Ok(Outcome::Commit)
    }
}

/// A leaving member's transaction: the release of every term whose guard came back, and at
/// the `last` one its row dropped (the others see it gone at their next tick).
pub(super) struct Farewell<'a> {
    pub(super) statements: &'a Cell,
    pub(super) me: &'a Me,
    pub(super) local: &'a Local,
    pub(super) last: bool,
    pub(super) done: Option<Ticked>,
}

#[async_trait::async_trait]
impl Body for Farewell<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&super::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "spread_leave"
    }

    fn name(&self) -> Option<&str> {
        Some(&self.me.group)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.done = None;
        let now = tx.now().await?;
        let s = statements(self.statements, tx);
        if self.last {
            let args = [Arg::Text(&self.me.group), Arg::Text(&self.me.member.id)];
            tx.execute(&s.delete_member, &args).await?;
        }
        let names: Vec<(u32, u64, String)> = self
            .local
            .stale
            .iter()
            .map(|(&i, &term)| (i, term, super::shard_name(&self.me.group, i)))
            .collect();
        let ops: Vec<(&str, Op)> = names
            .iter()
            .map(|(_, term, name)| (name.as_str(), release(&self.me.member.id, *term)))
            .collect();
        if !ops.is_empty() {
            tx.leases(&ops, &self.me.member.id).await?;
        }
        let mut ticked = Ticked::at(now);
        ticked.released = names.into_iter().map(|(i, term, _)| (i, term)).collect();
        self.done = Some(ticked);
        Ok(Outcome::Commit)
    }
}

/// The release of `term` by `member`, recorded as a lock's plain release is (not at all).
fn release(member: &str, term: u64) -> Op {
    Op::Release {
        candidate: member.to_string(),
        term,
        at_least_ms: 0,
        reason: None,
        purpose: PURPOSE,
    }
}

impl Tick<'_> {
    /// The tick's lease operations, by shard: the renewal of every believed guard's term that
    /// is not surrendered now, the release of every stale term, the take of `take`.
    fn ops(&self, surrender: &[u32], take: &[u32]) -> Vec<(u32, Op)> {
        let id = &self.me.member.id;
        let surrender: BTreeSet<u32> = surrender.iter().copied().collect();
        let renew = self
            .local
            .out
            .iter()
            .filter(|(i, (_, renew))| *renew && !surrender.contains(i))
            .map(|(&i, &(term, _))| {
                let op = Op::Renew {
                    candidate: id.clone(),
                    term,
                };
                (i, op)
            });
        let release = self
            .local
            .stale
            .iter()
            .map(|(&i, &term)| (i, release(id, term)));
        let take = take.iter().map(|&i| {
            let op = Op::Campaign {
                candidate: id.clone(),
                term: None,
                ttl_ms: self.me.ttl_ms,
                metadata: None,
                purpose: PURPOSE,
            };
            (i, op)
        });
        renew.chain(release).chain(take).collect()
    }
}

/// The member's row, written at `now`.
async fn write_member(
    s: &super::statements::Statements,
    tx: &mut dyn Tx,
    me: &Me,
    since: DbTime,
    now: DbTime,
) -> Result<()> {
    let m = &me.member;
    let ttl = i64::try_from(me.ttl_ms).map_err(|_| Error::Invalid {
        what: "ttl",
        value: me.ttl_ms.to_string(),
        rule: "at most 9223372036854775807 ms",
    })?;
    let args = [
        Arg::Text(&me.group),
        Arg::Text(&m.id),
        Arg::Int(i64::from(m.shards)),
        Arg::OptInt(m.cap.map(i64::from)),
        Arg::Int(i64::from(m.weight)),
        Arg::Int(since.0),
        Arg::Int(now.0),
        Arg::Int(now.plus_ms(me.ttl_ms).0),
        Arg::Int(ttl),
    ];
    tx.execute(&s.upsert_member, &args).await
}

/// The shards that are not free for `me`, from the live or paused rows read and what it has:
/// a shard whose guard is out is its own unless the database shows another live holder; one
/// the database shows under its id without a guard here is not (another process with the
/// same id, or a release still landing), nor is one with a term of its own still to release,
/// nor a paused one.
fn taken(
    rows: &BTreeMap<u32, super::view::ShardRow>,
    local: &Local,
    me: &str,
) -> BTreeMap<u32, Taken> {
    let mut taken: BTreeMap<u32, Taken> = rows
        .iter()
        .map(|(&i, row)| {
            let here = local.out.contains_key(&i);
            let t = match (&row.holder, here) {
                _ if local.stale.contains_key(&i) => Taken::Blocked,
                (Some(h), _) if h != me => Taken::By(h.clone()),
                (_, true) => Taken::By(me.to_string()),
                (Some(_), false) | (None, false) => Taken::Blocked,
            };
            (i, t)
        })
        .collect();
    for &i in local.out.keys() {
        taken.entry(i).or_insert_with(|| Taken::By(me.to_string()));
    }
    for &i in local.stale.keys() {
        taken.insert(i, Taken::Blocked);
    }
    taken
}
