//! The spreading layer's transactions: a member's tick (it registers, and reads the live
//! members and every shard's live owner, in one transaction under the database's clock) and
//! the read of a group's shards.

use crate::backend::tx::{Arg, Body, Dialect, Outcome, Tx};
use crate::candidates::{Candidate, Candidates, Registration};
use crate::error::Result;
use crate::model::DbTime;
use std::sync::OnceLock;

/// The layer's one statement: every lease row of a group's shards, with holder, term and
/// expiry. The shard names `GROUP/i` all lie in the range [`GROUP/`, `GROUP0`) (`0` follows
/// `/` in every byte-wise collation, which the lease's names use), so it reads the primary
/// key's range.
#[derive(Debug)]
pub(super) struct Statements {
    /// Parameters: the range's start (`GROUP/`) and end (`GROUP0`).
    shards: String,
}

impl Statements {
    fn new(prefix: &str, d: &Dialect) -> Statements {
        let p = d.param;
        let t = d.text;
        Statements {
            shards: format!(
                "SELECT {} AS name, {} AS holder, term, {} AS expires_us FROM {prefix}lease \
                 WHERE name >= {} AND name < {}",
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
}

/// Reads the group's shards at `now`.
async fn shards(
    cell: &OnceLock<Statements>,
    tx: &mut dyn Tx,
    group: &str,
    count: u32,
    now: DbTime,
) -> Result<Shards> {
    let s = cell.get_or_init(|| Statements::new(tx.prefix(), tx.dialect()));
    let (start, end) = (format!("{group}/"), format!("{group}0"));
    let rows = tx
        .fetch(&s.shards, &[Arg::Text(&start), Arg::Text(&end)])
        .await?;
    let mut out = Shards {
        owners: vec![None; count as usize],
        terms: vec![0; count as usize],
    };
    for row in rows {
        let name = row.text("name")?;
        let Some(i) = super::shard_of(group, &name).filter(|&i| i < count) else {
            continue;
        };
        let live = DbTime(row.int("expires_us")?) > now;
        out.owners[i as usize] = row.opt_text("holder")?.filter(|_| live);
        out.terms[i as usize] = u64::try_from(row.int("term")?).unwrap_or(0);
    }
    Ok(out)
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
        let members: Vec<Candidate> = rows
            .into_iter()
            .filter(|c| c.is_live(now) && c.candidate != r.candidate)
            .collect();
        let shards = shards(self.statements, tx, &r.name, self.count, now).await?;
        self.seen = Some((now, members, shards));
        Ok(Outcome::Commit)
    }
}

/// The shards of a group, read.
pub(super) struct Read<'a> {
    pub(super) statements: &'a OnceLock<Statements>,
    pub(super) group: &'a str,
    pub(super) count: u32,
    pub(super) seen: Option<(DbTime, Shards)>,
}

#[async_trait::async_trait]
impl Body for Read<'_> {
    fn writes(&self) -> bool {
        false
    }

    fn op(&self) -> &'static str {
        "spread_read"
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let now = tx.now().await?;
        let shards = shards(self.statements, tx, self.group, self.count, now).await?;
        self.seen = Some((now, shards));
        Ok(Outcome::Commit)
    }
}
