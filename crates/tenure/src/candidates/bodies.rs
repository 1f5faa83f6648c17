//! The registry's transactions: a campaign that registers (and decides the lease among its
//! rivals), a clean stop, and the reads.

use super::statements::Statements;
use super::{Candidate, Registration, Roster};
use crate::backend::tx::{Arg, Body, Outcome, Row, Tx};
use crate::error::{Error, Result};
use crate::model::{DbTime, Effect, Epoch, Op, Standing};
use crate::records::Applied;
use std::sync::OnceLock;
use std::time::Duration;

/// How long after its expiry a registration is purged (when its name is next campaigned for).
const PURGE_AFTER_MS: u64 = 24 * 3600 * 1000;

fn statements<'s>(cell: &'s OnceLock<Statements>, tx: &dyn Tx) -> &'s Statements {
    cell.get_or_init(|| Statements::new(tx.prefix(), tx.dialect()))
}

fn unsigned(v: i64) -> u64 {
    u64::try_from(v).unwrap_or(0)
}

fn int(what: &'static str, v: u64) -> Result<i64> {
    i64::try_from(v).map_err(|_| Error::Invalid {
        what,
        value: v.to_string(),
        rule: "at most 9223372036854775807 (a BIGINT)",
    })
}

fn candidate(row: &dyn Row) -> Result<Candidate> {
    let priority = row.int("priority")?;
    Ok(Candidate {
        name: row.text("name")?,
        candidate: row.text("candidate")?,
        priority: i32::try_from(priority).map_err(|_| Error::Corrupt {
            table: "candidate".to_string(),
            reason: format!("priority {priority} is not an i32"),
        })?,
        observer: row.boolean("observer")?,
        metadata: row.opt_text("metadata")?,
        since: DbTime(row.int("since_us")?),
        seen_at: DbTime(row.int("seen_us")?),
        expires_at: DbTime(row.int("expires_us")?),
        ttl: Duration::from_millis(unsigned(row.int("ttl_ms")?)),
        campaigns_within: Duration::from_millis(unsigned(row.int("renew_ms")?)),
    })
}

fn candidates(rows: &[Box<dyn Row>]) -> Result<Vec<Candidate>> {
    rows.iter().map(|row| candidate(row.as_ref())).collect()
}

// === a campaign that registers ===

/// One campaign: the candidate registered (its run of registrations continued, or begun anew
/// if it had expired), its rivals read, and the lease decided among them by the model — or,
/// for an observer, the lease read.
pub(super) struct Campaign<'a> {
    statements: &'a OnceLock<Statements>,
    registration: &'a Registration,
    op: Option<&'a Op>,
    applied: Option<Applied>,
}

impl<'a> Campaign<'a> {
    pub(super) fn new(
        statements: &'a OnceLock<Statements>,
        registration: &'a Registration,
        op: Option<&'a Op>,
    ) -> Campaign<'a> {
        Campaign {
            statements,
            registration,
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
        let (now, rows) = register(self.statements, tx, r).await?;
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
                    rivals: &rivals,
                };
                tx.lease(&r.name, op, &r.candidate, Some(&standing)).await?
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

/// Registers `r` in the transaction (its run of registrations continued, or begun anew if it
/// had expired; rows expired a day ago purged): the database's now and the name's rows as they
/// were before (`r`'s own among them if it was registered).
pub(crate) async fn register(
    cell: &OnceLock<Statements>,
    tx: &mut dyn Tx,
    r: &Registration,
) -> Result<(DbTime, Vec<Candidate>)> {
    let s = statements(cell, tx);
    let now = tx.now().await?;
    let rows = candidates(&tx.fetch(&s.of_name, &[Arg::Text(&r.name)]).await?)?;
    let mine = rows.iter().find(|c| c.candidate == r.candidate);
    let since = mine.filter(|c| c.is_live(now)).map_or(now, |c| c.since);
    let expires = now.plus_ms(r.ttl_ms);
    let (ttl, renew) = (int("ttl", r.ttl_ms)?, int("renew interval", r.renew_ms)?);
    let values = [
        Arg::Int(i64::from(r.priority)),
        Arg::Bool(r.observer),
        Arg::OptText(r.metadata.as_deref()),
        Arg::Int(since.0),
        Arg::Int(now.0),
        Arg::Int(expires.0),
        Arg::Int(ttl),
        Arg::Int(renew),
    ];
    let key = [Arg::Text(&r.name), Arg::Text(&r.candidate)];
    if mine.is_some() {
        let args: Vec<Arg<'_>> = values.iter().chain(&key).copied().collect();
        tx.execute(&s.update, &args).await?;
    } else {
        let args: Vec<Arg<'_>> = key.iter().chain(&values).copied().collect();
        tx.execute(&s.insert, &args).await?;
    }
    let stale = DbTime(now.0.saturating_sub(int("purge", PURGE_AFTER_MS)? * 1000));
    if rows.iter().any(|c| c.expires_at < stale) {
        let args = [Arg::Text(&r.name), Arg::Int(stale.0)];
        tx.execute(&s.purge, &args).await?;
    }
    Ok((now, rows))
}

// === a clean stop ===

/// Drops a registration at once.
pub(super) struct Leave<'a> {
    statements: &'a OnceLock<Statements>,
    name: &'a str,
    candidate: &'a str,
}

impl<'a> Leave<'a> {
    pub(super) fn new(
        statements: &'a OnceLock<Statements>,
        name: &'a str,
        candidate: &'a str,
    ) -> Leave<'a> {
        Leave {
            statements,
            name,
            candidate,
        }
    }
}

#[async_trait::async_trait]
impl Body for Leave<'_> {
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
    statements: &'a OnceLock<Statements>,
    name: Option<&'a str>,
    roster: Roster,
}

impl<'a> List<'a> {
    pub(super) fn of(statements: &'a OnceLock<Statements>, name: Option<&'a str>) -> List<'a> {
        List {
            statements,
            name,
            roster: Roster {
                now: DbTime(0),
                candidates: Vec::new(),
            },
        }
    }

    pub(super) fn roster(self) -> Roster {
        self.roster
    }
}

#[async_trait::async_trait]
impl Body for List<'_> {
    fn writes(&self) -> bool {
        false
    }

    fn op(&self) -> &'static str {
        "candidates"
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let s = statements(self.statements, tx);
        let now = tx.now().await?;
        let rows = match self.name {
            Some(name) => tx.fetch(&s.of_name, &[Arg::Text(name)]).await?,
            None => tx.fetch(&s.live, &[Arg::Int(now.0)]).await?,
        };
        self.roster = Roster {
            now,
            candidates: candidates(&rows)?,
        };
        Ok(Outcome::Commit)
    }
}
