//! The spreading layer's reads and an operator's actions: a group's view in one statement (its
//! live members, its shards' live or paused lease rows, its own row), every group's assignment
//! in one transaction, the live groups, and a pause or resume of a whole group.

use super::statements::Statements;
use crate::backend::tx::{cell, Arg, Body, Outcome, Row, Schema, Tx};
use crate::error::{Error, Result};
use crate::model::spread::Member;
use crate::model::{DbTime, Op};
use crate::records::Applied;
use std::collections::BTreeMap;

/// The layer's statement cell.
pub(super) type Cell = cell::Statements<Statements>;

/// The layer's statements on `tx`'s store, built the first time.
pub(super) fn statements<'s>(cell: &'s Cell, tx: &dyn Tx) -> &'s Statements {
    cell.get(tx, |tx| Statements::new(tx.prefix(), tx.dialect()))
}

/// A number of a row that must fit a `u32` (a shard count, a cap, a weight).
fn count(row: &dyn Row, column: &str, v: i64) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::Corrupt {
        table: "spread_member".to_string(),
        reason: format!("{column} {v} of {:?} is not a u32", row.text("name").ok()),
    })
}

/// A live member, as its row shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct MemberRow {
    pub(super) member: Member,
    /// When its current run of ticks began.
    pub(super) since: DbTime,
}

/// A shard's lease row as a view shows it: only rows that are live or paused are read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct ShardRow {
    /// Its live holder (`None`: vacant or expired, and paused).
    pub(super) holder: Option<String>,
    pub(super) term: u64,
    pub(super) paused: bool,
}

/// A group as one statement saw it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct View {
    /// Its live members, by id.
    pub(super) members: Vec<MemberRow>,
    /// Its shards' lease rows that are live or paused, by shard (any shard index: a holder of
    /// `GROUP/i` beyond every member's N included).
    pub(super) shards: BTreeMap<u32, ShardRow>,
    /// Whether the group is paused (`None`: it has no row yet).
    pub(super) paused: Option<bool>,
}

/// Reads `group`'s view at `now` in one statement: the rows it reads are the live members,
/// the group's row and the live or paused shards — never every shard of a group of N.
pub(super) async fn view(cell: &Cell, tx: &mut dyn Tx, group: &str, now: DbTime) -> Result<View> {
    let s = statements(cell, tx);
    let (start, end) = (format!("{group}/"), format!("{group}0"));
    let args = [
        Arg::Text(group),
        Arg::Int(now.0),
        Arg::Text(&start),
        Arg::Text(&end),
        Arg::Int(now.0),
        Arg::Text(group),
    ];
    let mut view = View::default();
    for row in tx.fetch(&s.view, &args).await? {
        let row = row.as_ref();
        match row.text("kind")?.as_str() {
            "member" => {
                let cap = row
                    .opt_int("cap")?
                    .map(|c| count(row, "cap", c))
                    .transpose()?;
                view.members.push(MemberRow {
                    member: Member {
                        id: row.text("name")?,
                        weight: count(row, "weight", row.int("b")?)?,
                        shards: count(row, "shards", row.int("n")?)?,
                        cap,
                    },
                    since: DbTime(row.int("at_us")?),
                });
            }
            "shard" => {
                let Some(i) = super::shard_of(group, &row.text("name")?) else {
                    continue;
                };
                let live = DbTime(row.int("at_us")?) > now;
                view.shards.insert(
                    i,
                    ShardRow {
                        holder: row.opt_text("holder")?.filter(|_| live),
                        term: u64::try_from(row.int("n")?).unwrap_or(0),
                        paused: row.int("b")? != 0,
                    },
                );
            }
            _ => view.paused = Some(row.int("b")? != 0),
        }
    }
    view.members.sort_by(|a, b| a.member.id.cmp(&b.member.id));
    Ok(view)
}

/// The live groups at `now`: each name and the largest shard count its live members give.
pub(super) async fn live_groups(
    cell: &Cell,
    tx: &mut dyn Tx,
    now: DbTime,
) -> Result<BTreeMap<String, u32>> {
    let s = statements(cell, tx);
    let mut groups = BTreeMap::new();
    for row in tx.fetch(&s.live_groups, &[Arg::Int(now.0)]).await? {
        let shards = count(row.as_ref(), "shards", row.int("shards")?)?;
        groups.insert(row.text("name")?, shards);
    }
    Ok(groups)
}

/// Which groups a [`Read`] reads.
pub(super) enum Which<'a> {
    /// One group, counted as `count` shards.
    One { group: &'a str, count: u32 },
    /// Every group with live members, each with the largest shard count they give.
    All,
}

/// One group as a [`Read`] saw it: its name, the shard count it is read as, the instant.
pub(super) type Seen = (String, u32, DbTime, View);

/// Groups' views, read in one transaction: each group in one statement at the transaction's
/// one instant.
pub(super) struct Read<'a> {
    pub(super) statements: &'a Cell,
    pub(super) which: Which<'a>,
    pub(super) seen: Vec<Seen>,
}

#[async_trait::async_trait]
impl Body for Read<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&super::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        false
    }

    fn op(&self) -> &'static str {
        "spread_read"
    }

    fn db_now(&self) -> Option<DbTime> {
        self.seen.first().map(|(_, _, now, _)| *now)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.seen.clear();
        let now = tx.now().await?;
        let groups = match self.which {
            Which::One { group, count } => BTreeMap::from([(group.to_string(), count)]),
            Which::All => live_groups(self.statements, tx, now).await?,
        };
        for (group, count) in groups {
            let view = view(self.statements, tx, &group, now).await?;
            self.seen.push((group, count, now, view));
        }
        Ok(Outcome::Commit)
    }
}

/// The live groups, or whether one group has a row (a member ticked in it once, or an
/// operator paused it), in one read.
pub(super) struct Groups<'a> {
    pub(super) statements: &'a Cell,
    pub(super) live: BTreeMap<String, u32>,
    /// The group whose row to look for, and whether it has one.
    pub(super) known: Option<(&'a str, bool)>,
}

#[async_trait::async_trait]
impl Body for Groups<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&super::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        false
    }

    fn op(&self) -> &'static str {
        "spread_groups"
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let now = tx.now().await?;
        self.live = live_groups(self.statements, tx, now).await?;
        if let Some((group, known)) = &mut self.known {
            let s = statements(self.statements, tx);
            *known = !tx
                .fetch(&s.group_row, &[Arg::Text(group)])
                .await?
                .is_empty();
        }
        Ok(Outcome::Commit)
    }
}

/// An operator's pause or resume of a whole group, in one transaction: the group's row
/// records it (so that a member that joins later, whatever its N, sees it), and every lease
/// row of its shards that exists is paused or resumed, each decided by the model under its
/// row's lock with its history event.
pub(super) struct Admin<'a> {
    pub(super) statements: &'a Cell,
    pub(super) group: &'a str,
    pub(super) pause: bool,
    pub(super) actor: &'a str,
    pub(super) applied: Vec<Applied>,
}

#[async_trait::async_trait]
impl Body for Admin<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&super::statements::SCHEMA)
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
        let now = tx.now().await?;
        let s = statements(self.statements, tx);
        let args = [
            Arg::Text(self.group),
            Arg::Bool(self.pause),
            Arg::Int(now.0),
            Arg::Text(self.actor),
        ];
        tx.execute(&s.set_group, &args).await?;
        let (start, end) = (format!("{}/", self.group), format!("{}0", self.group));
        let rows = tx
            .fetch(&s.shard_names, &[Arg::Text(&start), Arg::Text(&end)])
            .await?;
        let mut names = Vec::with_capacity(rows.len());
        for row in rows {
            let name = row.text("name")?;
            if super::shard_of(self.group, &name).is_some() {
                names.push(name);
            }
        }
        let op = if self.pause { Op::Pause } else { Op::Resume };
        let ops: Vec<(&str, Op)> = names.iter().map(|n| (n.as_str(), op.clone())).collect();
        if !ops.is_empty() {
            self.applied = tx.leases(&ops, self.actor).await?;
        }
        Ok(Outcome::Commit)
    }
}
