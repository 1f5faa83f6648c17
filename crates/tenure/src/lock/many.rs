//! Many locks in one go ([`Locks::try_lock_many`]): the names of a chunk campaigned for in one
//! transaction of the seam ([`Tx::leases`]: the rows locked in one statement, every decision
//! the model's, the acquisitions of vacant rows written in one more, new names inserted in one
//! more), then each granted term handed to a guard exactly as [`Locks::try_lock`] hands it.
//!
//! Per name the rules are `try_lock`'s: a name this process holds is not taken twice, a
//! stale term of ours is given back first, a kept term is succeeded (term + 1, nobody in
//! between), a spreading group's name or shard is refused, and each guard's belief ends
//! before the database's expiry, counted from the instant its chunk was sent.

use super::attempt::Answer;
use super::options::LockOptions;
use super::{LockGuard, Locks};
use crate::backend::tx::{Body, Outcome, Schema, Tx};
use crate::error::{Error, Result};
use crate::model::{duration_ms, DbTime, Effect, Op};
use crate::records::Applied;
use crate::spread::refusals_in;
use crate::validate;
use std::collections::HashSet;
use tokio::time::Instant;

/// Names per transaction: the seam locks and writes a thousand rows per statement, and the
/// spreading rule's check binds each name and its group.
pub(super) const CHUNK: usize = 1000;

impl Locks {
    /// Takes every name of `names` that is free, in one transaction per chunk of a thousand
    /// names (a fixed number of statements each, however many names), and returns a guard for
    /// each name it took, in the order of `names`: a batch that finds 2 of 5 names held
    /// returns 3 guards. A name given twice is taken once.
    ///
    /// Each name follows [`try_lock`](Locks::try_lock)'s rules: a name this process holds is
    /// not taken twice (and not returned), a term of ours released but not yet known to have
    /// landed is released first, a term kept with [`LockGuard::forget`] is succeeded, every
    /// acquisition raises the name's fencing term as a single one does, and each guard renews
    /// (in the same batched keep-alive), releases and reports its loss as a single one.
    ///
    /// # Errors
    /// Before anything is written: [`Error::Invalid`] for a bad name or options,
    /// [`Error::UnsafeTiming`]. [`Error::Invalid`] also for the name of a live spreading group
    /// or of one of its shards ([`GROUP_NAME`](crate::spread::GROUP_NAME),
    /// [`SHARD_NAME`](crate::spread::SHARD_NAME)), checked in each chunk's own transaction:
    /// nothing of that chunk is taken. Database errors and [`Error::Timeout`]: that chunk's
    /// effect is unknown (a lock it took is held by nobody locally and expires after `ttl`).
    /// On any error the guards of earlier chunks are dropped, which releases them.
    ///
    /// # Cancel safety
    /// As [`try_lock`](Locks::try_lock): locks granted to a cancelled call expire after `ttl`.
    pub async fn try_lock_many<I, S>(
        &self,
        names: I,
        options: LockOptions,
    ) -> Result<Vec<LockGuard>>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let (timing, give_back) = options.check()?;
        let mut seen = HashSet::new();
        let mut wanted = Vec::new();
        for name in names {
            let name = name.as_ref();
            validate::name(name)?;
            if seen.insert(name.to_string()) {
                wanted.push(name.to_string());
            }
        }
        let holder = &self.inner.holder;
        let ttl_ms = duration_ms(options.ttl);
        let purpose = options.purpose();
        let store = self.inner.store.with_timeout(timing.db_timeout());
        let mut guards = Vec::new();
        for chunk in wanted.chunks(CHUNK) {
            let mut ops = Vec::with_capacity(chunk.len());
            for name in chunk {
                let Some(ours) = self.ours(name) else {
                    continue;
                };
                if let Some((term, stale)) = ours.stale {
                    self.inner.release(name, term, stale, None).await?;
                }
                let op = match ours.kept {
                    Some(term) => Op::Succeed {
                        candidate: holder.clone(),
                        term,
                        ttl_ms,
                        purpose,
                    },
                    None => Op::Campaign {
                        candidate: holder.clone(),
                        term: None,
                        ttl_ms,
                        metadata: None,
                        purpose,
                    },
                };
                ops.push((name.as_str(), op));
            }
            if ops.is_empty() {
                continue;
            }
            let mut body = Batch {
                ops: &ops,
                actor: holder,
                refused: None,
                applied: Vec::new(),
                now: None,
            };
            let sent = Instant::now();
            let ran = store.transaction(&mut body).await;
            let received = Instant::now();
            if let Err(e) = ran {
                self.keep_unsure(&ops, received + timing.max_belief());
                return Err(e);
            }
            if let Some((value, rule)) = body.refused {
                self.keep_unsure(&ops, received + timing.max_belief());
                return Err(Error::Invalid {
                    what: "name",
                    value,
                    rule,
                });
            }
            for ((name, op), applied) in ops.iter().zip(body.applied) {
                let kept = match op {
                    Op::Succeed { term, .. } => Some(*term),
                    _ => None,
                };
                if matches!(applied.effect, Effect::Acquired { .. }) {
                    let answer = Answer {
                        applied,
                        sent,
                        received,
                    };
                    let (guard, _) = self
                        .grant(name, &answer, &options, timing, give_back)
                        .await?;
                    guards.extend(guard);
                } else {
                    self.not_granted(name, &applied, kept, give_back).await?;
                }
            }
        }
        Ok(guards)
    }

    /// A chunk whose outcome is unknown (or that was refused): its kept terms may still be
    /// ours, until `until`, as a failed single campaign leaves them.
    fn keep_unsure(&self, ops: &[(&str, Op)], until: Instant) {
        let mut table = self.inner.table();
        for (name, op) in ops {
            if let Op::Succeed { term, .. } = op {
                table.kept.insert((*name).to_string(), (*term, until));
            }
        }
    }
}

/// One chunk's transaction: the spreading rule for its names, then their campaigns.
struct Batch<'a> {
    ops: &'a [(&'a str, Op)],
    actor: &'a str,
    /// The first name the spreading rule refuses, and the rule (then nothing is written).
    refused: Option<(String, &'static str)>,
    applied: Vec<Applied>,
    now: Option<DbTime>,
}

#[async_trait::async_trait]
impl Body for Batch<'_> {
    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "try_lock_many"
    }

    fn db_now(&self) -> Option<DbTime> {
        self.now
    }

    fn schema(&self) -> Option<&'static Schema> {
        Some(&crate::spread::statements::SCHEMA)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let now = tx.now().await?;
        self.now = Some(now);
        let names: Vec<&str> = self.ops.iter().map(|(name, _)| *name).collect();
        self.refused = refusals_in(tx, &names, now).await?;
        if self.refused.is_some() {
            return Ok(Outcome::Rollback);
        }
        self.applied = tx.leases(self.ops, self.actor).await?;
        Ok(Outcome::Commit)
    }
}
