//! The registry's transactions: a campaign that registers (and decides the lease among its
//! rivals), a clean stop, and the reads. (An operator's handover: `handover.rs`.)

use super::statements::Statements;
use super::{Candidate, Registration, Roster};
use crate::backend::tx::int::{self, bigint as int};
use crate::backend::tx::{cell, Arg, BackendKind, Body, Outcome, Row, Schema, Tx};
use crate::error::{Error, Result};
use crate::model::{duration_ms, registration_since, DbTime, Effect, Epoch, Op, Standing};
use crate::records::Applied;
use std::time::Duration;

/// How long after its expiry a registration is purged (when its name is next campaigned for).
const PURGE_AFTER_MS: u64 = 24 * 3600 * 1000;

/// The registry's statements on `tx`'s store, built the first time.
pub(super) fn statements<'s>(cell: &'s Cell, tx: &dyn Tx) -> &'s Statements {
    cell.get(tx, |tx| {
        Statements::new(tx.prefix(), tx.dialect(), tx.kind())
    })
}

/// The registry's statement cell.
pub(super) type Cell = cell::Statements<Statements>;

/// A stored duration or term of the registry, read back unsigned.
fn unsigned(v: i64) -> Result<u64> {
    int::unsigned("candidate", "value", v)
}

fn candidate(row: &dyn Row) -> Result<Candidate> {
    let priority = row.int("priority")?;
    Ok(Candidate {
        name: row.text("name")?,
        candidate: row.text("candidate")?,
        priority: int::int32("candidate", "priority", priority)?,
        observer: row.boolean("observer")?,
        metadata: row.opt_text("metadata")?,
        since: DbTime(row.int("since_us")?),
        seen_at: DbTime(row.int("seen_us")?),
        expires_at: DbTime(row.int("expires_us")?),
        ttl: Duration::from_millis(unsigned(row.int("ttl_ms")?)?),
        campaigns_within: Duration::from_millis(unsigned(row.int("renew_ms")?)?),
        settle: Duration::from_millis(unsigned(row.int("settle_ms")?)?),
        incarnation: row.opt_text("incarnation")?,
        expiries: u32::try_from(row.int("expiries")?).unwrap_or(u32::MAX),
        backoff_until: row.opt_int("backoff_us")?.map(DbTime),
        chosen_after: row.opt_int("chosen_after")?.map(unsigned).transpose()?,
    })
}

pub(super) fn candidates(rows: &[Box<dyn Row>]) -> Result<Vec<Candidate>> {
    rows.iter().map(|row| candidate(row.as_ref())).collect()
}

// === a campaign that registers ===

/// One campaign: the candidate registered (its run of registrations continued, or begun anew
/// if it had expired), its rivals read, and the lease decided among them by the model — or,
/// for an observer, the lease read.
pub(super) struct Campaign<'a> {
    statements: &'a Cell,
    registration: &'a Registration,
    incarnation: &'a str,
    op: Option<&'a Op>,
    applied: Option<Applied>,
}

impl<'a> Campaign<'a> {
    pub(super) fn new(
        statements: &'a Cell,
        registration: &'a Registration,
        incarnation: &'a str,
        op: Option<&'a Op>,
    ) -> Campaign<'a> {
        Campaign {
            statements,
            registration,
            incarnation,
            op,
            applied: None,
        }
    }

    pub(super) fn applied(self) -> Result<Applied> {
        self.applied
            .ok_or(Error::Unsupported("a campaign that ran no transaction"))
    }
}

#[async_trait::async_trait]
impl Body for Campaign<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&super::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "campaign"
    }

    fn db_now(&self) -> Option<DbTime> {
        self.applied.as_ref().map(|applied| applied.now)
    }

    fn name(&self) -> Option<&str> {
        Some(&self.registration.name)
    }

    fn term(&self) -> Option<u64> {
        self.applied.as_ref()?.lease.as_ref().map(|l| l.term)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let r = self.registration;
        let (now, since, rows) = register(self.statements, tx, r, self.incarnation).await?;
        let mine = rows.iter().find(|c| c.candidate == r.candidate);
        let rivals: Vec<_> = rows
            .iter()
            .filter(|c| c.candidate != r.candidate)
            .map(Candidate::rival)
            .collect();
        self.applied = Some(match self.op {
            Some(op) => {
                let standing = Standing {
                    priority: r.priority,
                    settle_ms: r.settle_ms,
                    since,
                    backoff_until: mine.and_then(|c| c.backoff_until),
                    chosen_after: mine.and_then(|c| c.chosen_after),
                    rivals: &rivals,
                };
                let applied = tx.lease(&r.name, op, &r.candidate, Some(&standing)).await?;
                if let Effect::Acquired {
                    took_over_from: Some(previous),
                } = &applied.effect
                {
                    back_off(self.statements, tx, &r.name, previous, now).await?;
                }
                applied
            }
            None => Applied {
                now,
                epoch: Epoch::ZERO,
                lease: tx.read_lease(&r.name).await?,
                effect: Effect::Unavailable,
            },
        });
        Ok(Outcome::Commit)
    }
}

/// Registers `r` of `incarnation` in the transaction (its run of registrations continued, or
/// begun anew if it had expired or another incarnation registered last; a bounded batch of
/// rows expired a day ago purged): the database's now, the run's `since`, and what the rules
/// need of the name's rows as they were before — the live ones, `r`'s own and the lease's
/// reservation target's, whatever their state — read through the index on live rows, never
/// every dead one.
pub(crate) async fn register(
    cell: &Cell,
    tx: &mut dyn Tx,
    r: &Registration,
    incarnation: &str,
) -> Result<(DbTime, DbTime, Vec<Candidate>)> {
    let s = statements(cell, tx);
    let now = tx.now().await?;
    let stale = DbTime(now.0.saturating_sub(int("purge", PURGE_AFTER_MS)? * 1000));
    let name = Arg::Text(&r.name);
    let args = [
        name,
        Arg::Int(now.0),
        name,
        Arg::Int(now.0),
        Arg::Text(&r.candidate),
        name,
        name,
        Arg::Int(stale.0),
        Arg::Int(stale.0),
    ];
    let mut rows = candidates(&tx.fetch(&s.for_rules, &args).await?)?;
    rows.sort_by(|a, b| a.candidate.cmp(&b.candidate));
    rows.dedup_by(|a, b| a.candidate == b.candidate);
    let due = rows
        .iter()
        .any(|c| c.expires_at < stale && c.backoff_until.is_none_or(|until| until < stale));
    let mine = rows.iter().find(|c| c.candidate == r.candidate);
    let previous = mine.map(|c| (c.since, c.expires_at, c.incarnation.as_deref()));
    let since = registration_since(now, incarnation, previous);
    let expires = now.plus_ms(r.ttl_ms);
    let (ttl, renew) = (int("ttl", r.ttl_ms)?, int("renew interval", r.renew_ms)?);
    let settle = int("settle", r.settle_ms)?;
    let values = [
        Arg::Int(i64::from(r.priority)),
        Arg::Bool(r.observer),
        Arg::OptText(r.metadata.as_deref()),
        Arg::Int(since.0),
        Arg::Int(now.0),
        Arg::Int(expires.0),
        Arg::Int(ttl),
        Arg::Int(renew),
        Arg::Int(settle),
        Arg::Text(incarnation),
    ];
    let key = [Arg::Text(&r.name), Arg::Text(&r.candidate)];
    if mine.is_some() {
        let args: Vec<Arg<'_>> = values.iter().chain(&key).copied().collect();
        tx.execute(&s.update, &args).await?;
    } else {
        let args: Vec<Arg<'_>> = key.iter().chain(&values).copied().collect();
        tx.execute(&s.insert, &args).await?;
    }
    if due {
        tx.execute(&s.purge, &purge_args(tx.kind(), &r.name, stale))
            .await?;
    }
    Ok((now, since, rows))
}

/// The purge's parameters on `kind` (see `Statements::purge`).
fn purge_args(kind: BackendKind, name: &str, before: DbTime) -> Vec<Arg<'_>> {
    match kind {
        BackendKind::MySql => vec![Arg::Text(name), Arg::Int(before.0), Arg::Int(before.0)],
        _ => vec![
            Arg::Text(name),
            Arg::Text(name),
            Arg::Int(before.0),
            Arg::Int(before.0),
        ],
    }
}

/// The tenure of `previous` ended by expiry (found at `now` by the campaign that took the
/// lease over): its registration, if it has one, backs off as the model says.
async fn back_off(
    cell: &Cell,
    tx: &mut dyn Tx,
    name: &str,
    previous: &str,
    now: DbTime,
) -> Result<()> {
    let s = statements(cell, tx);
    let rows = candidates(
        &tx.fetch(&s.one, &[Arg::Text(name), Arg::Text(previous)])
            .await?,
    )?;
    let Some(row) = rows.first() else {
        return Ok(());
    };
    let next = row.backoff().after_expiry(duration_ms(row.ttl), now);
    let args = [
        Arg::Int(i64::from(next.expiries)),
        Arg::OptInt(next.until.map(|until| until.0)),
        Arg::Text(name),
        Arg::Text(previous),
    ];
    tx.execute(&s.back_off, &args).await
}

// === staying registered while holding off ===

/// Extends a registration's life by its ttl without a campaign: `seen_at` stays, so that the
/// candidate counts as live (`tenure candidates`, a handover to it) but not as campaigning
/// (nobody waits for it).
pub(super) struct KeepAlive<'a> {
    pub(super) statements: &'a Cell,
    pub(super) registration: &'a Registration,
    pub(super) incarnation: &'a str,
}

#[async_trait::async_trait]
impl Body for KeepAlive<'_> {
    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "keep_registered"
    }

    fn name(&self) -> Option<&str> {
        Some(&self.registration.name)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let s = statements(self.statements, tx);
        let r = self.registration;
        let expires = tx.now().await?.plus_ms(r.ttl_ms);
        let args = [
            Arg::Int(expires.0),
            Arg::Text(&r.name),
            Arg::Text(&r.candidate),
            Arg::Text(self.incarnation),
        ];
        tx.execute(&s.keep, &args).await?;
        Ok(Outcome::Commit)
    }
}

// === a clean stop ===

/// Drops a registration at once.
pub(super) struct Leave<'a> {
    statements: &'a Cell,
    name: &'a str,
    candidate: &'a str,
}

impl<'a> Leave<'a> {
    pub(super) fn new(statements: &'a Cell, name: &'a str, candidate: &'a str) -> Leave<'a> {
        Leave {
            statements,
            name,
            candidate,
        }
    }
}

#[async_trait::async_trait]
impl Body for Leave<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&super::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "leave"
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let s = statements(self.statements, tx);
        let args = [Arg::Text(self.name), Arg::Text(self.candidate)];
        tx.execute(&s.delete, &args).await?;
        Ok(Outcome::Commit)
    }
}

// === the reads ===

/// The candidates of one name, or the live ones of all.
pub(super) struct List<'a> {
    statements: &'a Cell,
    name: Option<&'a str>,
    roster: Roster,
}

impl<'a> List<'a> {
    pub(super) fn of(statements: &'a Cell, name: Option<&'a str>) -> List<'a> {
        List {
            statements,
            name,
            roster: Roster {
                now: DbTime(0),
                candidates: Vec::new(),
                lease: None,
            },
        }
    }

    pub(super) fn roster(self) -> Roster {
        self.roster
    }
}

#[async_trait::async_trait]
impl Body for List<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&super::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        false
    }

    fn op(&self) -> &'static str {
        "candidates"
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let s = statements(self.statements, tx);
        let now = tx.now().await?;
        let (rows, lease) = match self.name {
            Some(name) => (
                tx.fetch(&s.of_name, &[Arg::Text(name)]).await?,
                tx.read_lease(name).await?,
            ),
            None => (tx.fetch(&s.live, &[Arg::Int(now.0)]).await?, None),
        };
        self.roster = Roster {
            now,
            candidates: candidates(&rows)?,
            lease,
        };
        Ok(Outcome::Commit)
    }
}
