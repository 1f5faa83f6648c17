//! Writing what the model decided: one lease's row, its history event and its announcement
//! ([`SqlBackend::write_decision`], after `apply_in` decided under the row's lock), and a batch
//! of lease operations in one transaction ([`SqlBackend::apply_many_in`], the seam's
//! `Tx::leases`): every row locked in one statement per chunk, each decided by the model, and
//! the rows whose decision is the row alone (a renewal, a lock's quiet acquisition) written in
//! one statement per chunk — a fixed number of statements however many leases, where one
//! `apply_in` per lease costs two or more each.

use super::backend::{Engine, SqlBackend};
use super::retention::prunes_history;
use super::statements::BATCH_CHUNK;
use crate::backend::tx::int::bigint;
use crate::error::{Error, Result};
use crate::model::{decide_among, Clock, DbTime, Decision, Effect, Epoch, Lease, Op};
use crate::records::Applied;
use sqlx::database::HasStatementCache;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Type};
use std::collections::HashMap;

/// The error of a decision that ran out of terms in the epoch.
pub(super) fn exhausted(name: &str, current: Option<&Lease>, epoch: Epoch) -> Error {
    Error::TermsExhausted {
        name: name.to_string(),
        term: current.map_or(0, |lease| lease.term),
        epoch_floor: epoch.floor(),
    }
}

/// `query` with the values of `lease`'s row after its name, in the order of the lease's
/// columns: holder, term, acquired, renewed, expires (microseconds), ttl_ms, metadata,
/// handover_to, paused.
fn bind_row<'q, DB>(
    query: sqlx::query::Query<'q, DB, <DB as Database>::Arguments<'q>>,
    lease: &'q Lease,
) -> Result<sqlx::query::Query<'q, DB, <DB as Database>::Arguments<'q>>>
where
    DB: Database,
    for<'a> String: Encode<'a, DB> + Type<DB>,
    for<'a> Option<String>: Encode<'a, DB>,
    for<'a> i64: Encode<'a, DB> + Type<DB>,
    for<'a> bool: Encode<'a, DB> + Type<DB>,
{
    Ok(query
        .bind(&lease.holder)
        .bind(bigint("term", lease.term)?)
        .bind(lease.acquired_at.0)
        .bind(lease.renewed_at.0)
        .bind(lease.expires_at.0)
        .bind(bigint("ttl", lease.ttl_ms)?)
        .bind(&lease.metadata)
        .bind(&lease.handover_to)
        .bind(lease.paused))
}

impl<E: Engine> SqlBackend<E>
where
    E::Database: HasStatementCache,
    for<'c> &'c mut <E::Database as Database>::Connection: Executor<'c, Database = E::Database>,
    for<'q> <E::Database as Database>::Arguments<'q>: IntoArguments<'q, E::Database>,
    for<'a> &'a str:
        ColumnIndex<<E::Database as Database>::Row> + Encode<'a, E::Database> + Type<E::Database>,
    for<'a> String: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> Option<String>: Encode<'a, E::Database>,
    for<'a> i64: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
    for<'a> bool: Encode<'a, E::Database> + Decode<'a, E::Database> + Type<E::Database>,
{
    /// Writes `decision` about `name` (whose row existed before, or not) in `tx`: the row if it
    /// changed, the history event (pruning old ones where retention asks), and the
    /// announcement where the engine pushes and someone may wait.
    pub(in crate::backend) async fn write_decision(
        &self,
        tx: &mut <E::Database as Database>::Connection,
        name: &str,
        existed: bool,
        decision: &Decision,
        now: DbTime,
        actor: &str,
    ) -> Result<()> {
        let s = &self.stmts;
        if let (true, Some(lease)) = (decision.write, &decision.lease) {
            let query = if existed {
                bind_row(self.query(&s.update_row), lease)?.bind(&lease.name)
            } else {
                bind_row(self.query(&s.insert_row).bind(&lease.name), lease)?
            };
            query.execute(&mut *tx).await?;
        }
        if let (None, true, Some(notify)) = (&decision.event, decision.wake, &s.notify) {
            self.query(notify).bind(name).execute(&mut *tx).await?;
        }
        if let Some(event) = &decision.event {
            let prune = prunes_history(event);
            if let Some(keep) = self.retention_us.filter(|_| prune) {
                self.query(&s.prune_history)
                    .bind(name)
                    .bind(now.0.saturating_sub(keep))
                    .execute(&mut *tx)
                    .await?;
            }
            let insert = match (&s.insert_history_and_notify, decision.wake) {
                (Some(announced), true) => announced,
                _ => &s.insert_history,
            };
            self.query(insert)
                .bind(name)
                .bind(bigint("term", event.term)?)
                .bind(&event.holder)
                .bind(event.kind.as_str())
                .bind(now.0)
                .bind(actor)
                .bind(&event.detail)
                .execute(&mut *tx)
                .await?;
        }
        Ok(())
    }

    /// `ops` inside the caller's transaction `tx`, decided at its instant `clock` as
    /// `apply_in` would decide each (no standing): the rows locked in name order, one
    /// statement per [`BATCH_CHUNK`] names; each decided by the model; the decisions that
    /// write the row alone written in one statement per chunk (one for the locked rows, one
    /// for new rows), the others (an event, an announcement) as `apply_in` writes them. The answers in the order of `ops`; each name
    /// at most once.
    pub(in crate::backend) async fn apply_many_in(
        &self,
        tx: &mut <E::Database as Database>::Connection,
        ops: &[(&str, Op)],
        actor: &str,
        clock: Clock,
    ) -> Result<Vec<Applied>> {
        let s = &self.stmts;
        let mut names: Vec<&str> = ops.iter().map(|(name, _)| *name).collect();
        names.sort_unstable();
        names.dedup();
        let mut current: HashMap<String, Lease> = HashMap::with_capacity(names.len());
        for chunk in names.chunks(BATCH_CHUNK) {
            let sql = s.lock_rows(chunk.len());
            let mut query = self.query(&sql);
            for name in chunk {
                query = query.bind(*name);
            }
            for row in query.fetch_all(&mut *tx).await? {
                let lease = self.lease_from(&row)?;
                current.insert(lease.name.clone(), lease);
            }
        }
        let mut applied = Vec::with_capacity(ops.len());
        // The row-only decisions: on rows locked above, and on rows that did not exist.
        let (mut updated, mut created): (Vec<Lease>, Vec<Lease>) = (Vec::new(), Vec::new());
        for (name, op) in ops {
            let row = current.get(*name);
            let decision = decide_among(clock, name, row, op, None);
            if decision.effect == Effect::TermsExhausted {
                return Err(exhausted(name, row, clock.epoch));
            }
            match (&decision.lease, decision.write) {
                (Some(lease), true) if decision.event.is_none() && !decision.wake => match row {
                    Some(_) => updated.push(lease.clone()),
                    None => created.push(lease.clone()),
                },
                _ => {
                    self.write_decision(tx, name, row.is_some(), &decision, clock.now, actor)
                        .await?;
                }
            }
            applied.push(Applied {
                now: clock.now,
                epoch: clock.epoch,
                lease: decision.lease,
                effect: decision.effect,
            });
        }
        for (mut rows, existing) in [(updated, true), (created, false)] {
            rows.sort_by(|a, b| a.name.cmp(&b.name));
            for chunk in rows.chunks(BATCH_CHUNK) {
                let sql = s.write_rows(chunk.len(), existing);
                let mut query = self.query(&sql);
                for lease in chunk {
                    query = bind_row(query.bind(&lease.name), lease)?;
                }
                query.execute(&mut *tx).await?;
            }
        }
        Ok(applied)
    }
}
