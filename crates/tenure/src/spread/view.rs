//! The spreading layer's transactions: a member's tick (it registers, and reads the live
//! members and every shard's live owner, in one transaction under the database's clock), the
//! read of groups' assignments (each group's members and shards in one statement), and an
//! operator's pause or resume of every shard of a group.

use crate::backend::tx::{Arg, Body, Dialect, Outcome, Row, Schema, Tx};
use crate::candidates::{Candidate, Candidates, Registration};
use crate::error::Result;
use crate::model::DbTime;
use std::sync::OnceLock;

/// The layer's statements. The shard names `GROUP/i` all lie in the range [`GROUP/`,
/// `GROUP0`) (`0` follows `/` in every byte-wise collation, which the lease's names use), so
/// they read the primary key's range.
#[derive(Debug)]
pub(super) struct Statements {
    /// Every lease row of a group's shards, with holder, term, paused (as `flag`) and expiry.
    /// Parameters: the range's start (`GROUP/`) and end (`GROUP0`).
    shards: String,
    /// A group's assignment in one statement, so one snapshot on every engine (a transaction
    /// of several statements at READ COMMITTED could see a member and the shards at two
    /// moments): the registrations of the group's name (`term` -1, the id as `name`, the
    /// metadata as `holder`, `observer` as `flag`) and its shards' lease rows (`paused` as
    /// `flag`: both columns are of one type on each engine). Parameters: the group, the
    /// range's start and end.
    assignment: String,
}

impl Statements {
    fn new(prefix: &str, d: &Dialect) -> Statements {
        let p = d.param;
        let t = d.text;
        Statements {
            assignment: format!(
                "SELECT {} AS name, {} AS holder, -1 AS term, observer AS flag, \
                 {} AS expires_us FROM {prefix}candidate WHERE name = {} \
                 UNION ALL \
                 SELECT {} AS name, {} AS holder, term, paused AS flag, {} AS expires_us \
                 FROM {prefix}lease WHERE name >= {} AND name < {}",
                t("candidate"),
                t("metadata"),
                (d.to_us)("expires_at"),
                p(1),
                t("name"),
                t("holder"),
                (d.to_us)("expires_at"),
                p(2),
                p(3)
            ),
            shards: format!(
                "SELECT {} AS name, {} AS holder, term, paused AS flag, {} AS expires_us \
                 FROM {prefix}lease WHERE name >= {} AND name < {}",
                t("name"),
                t("holder"),
                (d.to_us)("expires_at"),
                p(1),
                p(2)
            ),
        }
    }
}

/// Each shard's live owner and term, as one transaction saw them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Shards {
    /// Per shard: its live holder (`None`: vacant or expired).
    pub(super) owners: Vec<Option<String>>,
    /// Per shard: its current term (0: never held).
    pub(super) terms: Vec<u64>,
    /// Per shard: paused (nobody takes it, its holder steps down).
    pub(super) paused: Vec<bool>,
}

fn statements<'s>(cell: &'s OnceLock<Statements>, tx: &dyn Tx) -> &'s Statements {
    cell.get_or_init(|| Statements::new(tx.prefix(), tx.dialect()))
}

impl Shards {
    fn new(count: u32) -> Shards {
        Shards {
            owners: vec![None; count as usize],
            terms: vec![0; count as usize],
            paused: vec![false; count as usize],
        }
    }

    /// Takes in a lease row of the group's range, if it is one of its shards.
    fn add(&mut self, group: &str, row: &dyn Row, now: DbTime) -> Result<()> {
        let name = row.text("name")?;
        let count = u32::try_from(self.owners.len()).unwrap_or(u32::MAX);
        let Some(i) = super::shard_of(group, &name).filter(|&i| i < count) else {
            return Ok(());
        };
        let live = DbTime(row.int("expires_us")?) > now;
        self.owners[i as usize] = row.opt_text("holder")?.filter(|_| live);
        self.terms[i as usize] = u64::try_from(row.int("term")?).unwrap_or(0);
        self.paused[i as usize] = row.boolean("flag")?;
        Ok(())
    }
}

/// Reads the group's shards at `now`.
async fn shards(
    cell: &OnceLock<Statements>,
    tx: &mut dyn Tx,
    group: &str,
    count: u32,
    now: DbTime,
) -> Result<Shards> {
    let s = statements(cell, tx);
    let (start, end) = (format!("{group}/"), format!("{group}0"));
    let rows = tx
        .fetch(&s.shards, &[Arg::Text(&start), Arg::Text(&end)])
        .await?;
    let mut out = Shards::new(count);
    for row in rows {
        out.add(group, row.as_ref(), now)?;
    }
    Ok(out)
}

/// One group as one statement saw it: its live members' ids (sorted) and its shards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Seen {
    pub(super) group: String,
    pub(super) count: u32,
    pub(super) members: Vec<String>,
    pub(super) shards: Shards,
}

/// Reads a group's live members and its shards at `now`, in one statement.
async fn assignment(
    cell: &OnceLock<Statements>,
    tx: &mut dyn Tx,
    group: &str,
    count: u32,
    now: DbTime,
) -> Result<Seen> {
    let s = statements(cell, tx);
    let (start, end) = (format!("{group}/"), format!("{group}0"));
    let args = [Arg::Text(group), Arg::Text(&start), Arg::Text(&end)];
    let rows = tx.fetch(&s.assignment, &args).await?;
    let mut seen = Seen {
        group: group.to_string(),
        count,
        members: Vec::new(),
        shards: Shards::new(count),
    };
    for row in rows {
        if row.int("term")? < 0 {
            let observer = row.boolean("flag")?;
            let member = observer && super::names::is_member_metadata(row.opt_text("holder")?);
            if member && DbTime(row.int("expires_us")?) > now {
                seen.members.push(row.text("name")?);
            }
        } else {
            seen.shards.add(group, row.as_ref(), now)?;
        }
    }
    seen.members.sort();
    Ok(seen)
}

/// A member's tick: it registers in the candidate registry (as an observer of the group's
/// name, its weight as its priority), and reads the live members and the shards.
pub(super) struct Tick<'a> {
    pub(super) statements: &'a OnceLock<Statements>,
    pub(super) registry: &'a Candidates,
    pub(super) registration: &'a Registration,
    pub(super) count: u32,
    /// The answer: the database's now, the live members (this one among them), the shards.
    pub(super) seen: Option<(DbTime, Vec<Candidate>, Shards)>,
}

#[async_trait::async_trait]
impl Body for Tick<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&crate::candidates::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "spread"
    }

    fn db_now(&self) -> Option<DbTime> {
        self.seen.as_ref().map(|(now, _, _)| *now)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let r = self.registration;
        let (now, rows) = self.registry.register_in(tx, r).await?;
        // Members only: an elector campaigning for the group's name is no member.
        let members: Vec<Candidate> = rows
            .into_iter()
            .filter(|c| c.is_live(now) && c.candidate != r.candidate && super::names::is_member(c))
            .collect();
        let shards = shards(self.statements, tx, &r.name, self.count, now).await?;
        self.seen = Some((now, members, shards));
        Ok(Outcome::Commit)
    }
}

/// Which groups a [`Read`] reads.
pub(super) enum Which<'a> {
    /// One group of `count` shards.
    One { group: &'a str, count: u32 },
    /// Every group with live members (the registry's live observers with the layer's
    /// metadata), each with the largest shard count its members give.
    All,
}

/// Groups' assignments, read in one transaction: each group's members and shards in one
/// statement at the transaction's one instant.
pub(super) struct Read<'a> {
    pub(super) statements: &'a OnceLock<Statements>,
    pub(super) registry: &'a Candidates,
    pub(super) which: Which<'a>,
    pub(super) seen: Option<(DbTime, Vec<Seen>)>,
}

#[async_trait::async_trait]
impl Body for Read<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&crate::candidates::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        false
    }

    fn op(&self) -> &'static str {
        "spread_read"
    }

    fn db_now(&self) -> Option<DbTime> {
        self.seen.as_ref().map(|(now, _)| *now)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let now = tx.now().await?;
        let groups = match self.which {
            Which::One { group, count } => vec![(group.to_string(), count)],
            Which::All => {
                let live = self.registry.live_in(tx, now).await?;
                super::groups_of(&live).into_iter().collect()
            }
        };
        let mut seen = Vec::with_capacity(groups.len());
        for (group, count) in groups {
            seen.push(assignment(self.statements, tx, &group, count, now).await?);
        }
        self.seen = Some((now, seen));
        Ok(Outcome::Commit)
    }
}

/// An operator's action on every shard of a group (pause, resume), in one transaction: each
/// shard's lease decided by the model under its row's lock, with its history event.
pub(super) struct Admin<'a> {
    pub(super) group: &'a str,
    pub(super) count: u32,
    pub(super) op: crate::model::Op,
    pub(super) actor: &'a str,
    pub(super) applied: Vec<crate::records::Applied>,
}

#[async_trait::async_trait]
impl Body for Admin<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&crate::candidates::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "spread_admin"
    }

    fn name(&self) -> Option<&str> {
        Some(self.group)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.applied.clear();
        for i in 0..self.count {
            let name = super::shard_name(self.group, i);
            let applied = tx.lease(&name, &self.op, self.actor, None).await?;
            self.applied.push(applied);
        }
        Ok(Outcome::Commit)
    }
}
