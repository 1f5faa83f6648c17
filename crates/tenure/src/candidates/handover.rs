//! An operator's handover, checked against the registry and remembered there, in one
//! transaction with the lease's decision.
//!
//! - **Only to a live candidate.** A handover to a name the registry does not know as a live,
//!   campaigning candidate (a typo, a stopped process, an observer) would leave the name
//!   without a leader for a ttl: it is refused, and nothing changes — unless the operator says
//!   the target is a process not yet started ([`Handover::unregistered`]).
//! - **It stands for its tenure.** The target's row records the lease's term at the handover
//!   (`chosen_after`): the first tenure after it, if the target's, is not handed over for
//!   priority (the model's `Standing::chosen_after`). The next tenure follows priorities again.
//! - A target not yet started gets a row that is not live, with a sign of life now (a ttl of
//!   0) and expected to campaign within one ttl of the lease: the reservation lasts that long,
//!   as for any target the registry does not know, and the row carries the mark for its
//!   tenure.

use super::bodies::{candidates, statements};
use super::statements::Statements;
use crate::backend::tx::int::bigint as int;
use crate::backend::tx::{Arg, Body, Outcome, Tx};
use crate::error::{Error, Result};
use crate::model::{DbTime, Effect, Op};
use crate::records::Applied;

/// How an operator hands a name over ([`Candidates::handover`](super::Candidates::handover)).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Handover {
    /// Install the target with a new term now, instead of reserving the lease for it (unsafe
    /// unless writes are fenced: the old leader may overlap for up to one renew interval).
    pub immediate: bool,
    /// The target is a process not yet started: hand over although the registry does not
    /// show it as a live candidate (the lease stays reserved for it for one ttl).
    pub unregistered: bool,
}

/// The rule a refused target broke.
const RULE: &str = "a live candidate of the name, not an observer (see `tenure candidates \
                    NAME`); for a process not yet started, hand over with --unregistered";

pub(super) struct HandingOver<'a> {
    pub(super) statements: &'a super::bodies::Cell,
    pub(super) name: &'a str,
    pub(super) to: &'a str,
    pub(super) how: Handover,
    pub(super) actor: &'a str,
    /// The answer, once it ran: the lease's, or why it was refused.
    pub(super) answer: Option<Result<Applied>>,
}

#[async_trait::async_trait]
impl Body for HandingOver<'_> {
    fn writes(&self) -> bool {
        true
    }

    fn op(&self) -> &'static str {
        "handover"
    }

    fn name(&self) -> Option<&str> {
        Some(self.name)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.answer = None;
        let s = statements(self.statements, tx);
        let now = tx.now().await?;
        let key = [Arg::Text(self.name), Arg::Text(self.to)];
        let target = candidates(&tx.fetch(&s.one, &key).await?)?.pop();
        let live = target
            .as_ref()
            .is_some_and(|c| c.is_live(now) && !c.observer);
        let op = Op::Handover {
            to: self.to.to_string(),
            immediate: self.how.immediate,
        };
        let applied = tx.lease(self.name, &op, self.actor, None).await?;
        if applied.effect == Effect::UnknownName {
            self.answer = Some(Err(Error::UnknownName(self.name.to_string())));
            return Ok(Outcome::Rollback);
        }
        if !live && !self.how.unregistered {
            self.answer = Some(Err(Error::Invalid {
                what: "handover target",
                value: self.to.to_string(),
                rule: RULE,
            }));
            return Ok(Outcome::Rollback);
        }
        if let Some(after) = chosen_after(&applied, self.to) {
            let ttl_ms = applied.lease.as_ref().map_or(0, |l| l.ttl_ms);
            let row = match (&target, live) {
                (_, true) => Row::Live,
                (Some(_), false) => Row::Dead,
                (None, false) => Row::Missing,
            };
            mark(s, tx, &key, row, after, now, ttl_ms).await?;
        }
        self.answer = Some(Ok(applied));
        Ok(Outcome::Commit)
    }
}

/// The term after which the target's tenure stands, where the handover reserved the lease for
/// it (its tenure will follow the current term) or installed it at once (its tenure is the
/// new term: it follows the one before).
fn chosen_after(applied: &Applied, to: &str) -> Option<u64> {
    let lease = applied.lease.as_ref()?;
    match applied.effect {
        Effect::HandoverRequested => Some(lease.term),
        Effect::NoChange if lease.handover_target() == Some(to) => Some(lease.term),
        Effect::Forced => lease.term.checked_sub(1),
        _ => None,
    }
}

/// The target's registration at the handover.
enum Row {
    Live,
    /// Registered, not live (stopped, crashed): expected again, as a process not yet started.
    Dead,
    Missing,
}

/// Marks the target's row as chosen after the term `after`; a target that is not live is
/// expected to campaign within `ttl_ms` (the lease's ttl) from `now`: a row that is not live
/// says so, written where there is none.
async fn mark(
    s: &Statements,
    tx: &mut dyn Tx,
    key: &[Arg<'_>; 2],
    row: Row,
    after: u64,
    now: DbTime,
    ttl_ms: u64,
) -> Result<()> {
    let (after, ttl) = (int("term", after)?, int("ttl", ttl_ms)?);
    match row {
        Row::Live => {
            tx.execute(&s.choose, &[Arg::Int(after), key[0], key[1]])
                .await
        }
        Row::Dead => {
            let at = Arg::Int(now.0);
            let args = [at, at, Arg::Int(ttl), Arg::Int(after), key[0], key[1]];
            tx.execute(&s.expect, &args).await
        }
        Row::Missing => {
            let at = Arg::Int(now.0);
            let args = [key[0], key[1], at, at, at, Arg::Int(ttl), Arg::Int(after)];
            tx.execute(&s.expect_new, &args).await
        }
    }
}
