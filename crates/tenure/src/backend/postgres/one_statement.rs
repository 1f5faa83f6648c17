//! The two operations a lock cycle is made of, each in one autocommitted statement: a campaign
//! for a vacant lease and a release. A lock taken and released in a loop pays two round trips
//! and two commits, not ten statements in two transactions.
//!
//! Each statement locks the row (`FOR UPDATE`), reads `clock_timestamp()` after the lock was
//! granted, and writes only in the one case it covers — exactly where the model
//! ([`decide`]) writes the same row and event:
//! - **acquire**: the lease is vacant (`holder IS NULL`), expired, not paused, and no handover
//!   is pending: term = max(term + 1, the timeline's floor) — as the model mints it, with the
//!   timeline of the WAL insert position read in the same statement — a new tenure, an
//!   `acquired` event (the last term of a timeline is left to the model, which refuses);
//! - **release**: `holder` and `term` match: `holder = NULL`, `expires_at = max(now,
//!   acquired_at + at_least)`, the mark of an unadopted forced grant (`handover_to = holder`)
//!   dropped, a `released` event with the release's reason as its detail.
//!
//! Each comes in variants that record the event or not and announce it (`pg_notify`) or not,
//! chosen by the operation's [`Purpose`] as the model decides: a lock's cycle records nothing
//! by default and announces only its release — and that only where a process listens for it
//! (a waiting mark is held, `marks.rs`): PostgreSQL serializes the commits that notify.
//!
//! A release commits asynchronously (`synchronous_commit` off for its own transaction: it
//! does not wait for its WAL to reach the disk) unless its `at_least` keeps the name
//! unavailable beyond the expiry it found. That is safe because such a release gives nothing
//! to anyone and mints no term: if a crash of the server loses it, the row is as it was before
//! — held by the releaser, with the same term and expiry, a state the database had already
//! made durable, and free no sooner than the release would have left it — and its event, in
//! the same transaction, is lost with it. The releaser, whose belief ended before it sent the
//! release, never believes again in that term: its next campaign finds the lease held and
//! waits for the expiry, as for any live lease (P3, P5). Whatever depended on the release is lost with it: an acquisition
//! that read the freed row commits (synchronously) with a WAL record after the release's, so
//! flushing it flushes the release too, and a replica receives only flushed WAL — no term can
//! be minted on a release the database then forgets (P1, P2). What a lost release costs is
//! availability: the lease stays held until its ttl ends, as after a crash of its holder (P6).
//! A release whose `at_least` reaches past that expiry is the only record of how long the name
//! must stay unavailable: it waits for its flush, as every other write does.
//!
//! Otherwise the statement writes nothing and returns the locked row as it is, with the same
//! `now`. Where the model decides no write on it (someone else leads, a stale release, a step
//! down) that is the answer; where it would write (a renewal, a takeover of an expired holder,
//! a handover, a new name) the full transaction decides instead. The model-based test runs
//! every operation through this path.

use super::marks;
use super::PostgresBackend;
use crate::backend::sql::{acquisition_prunes, bigint, lease_columns, Dialect, EpochSql};
use crate::backend::Applied;
use crate::error::is_retryable;
use crate::error::Result;
use crate::model::{decide, Clock, DbTime, Effect, Epoch, Lease, Op, Purpose, TIMELINE_BITS};
use sqlx::Row;

/// The two statements, with the table prefix filled in, each in its four [`variant`]s.
pub(super) struct CycleStatements {
    /// Parameters: name, candidate, ttl_ms, metadata, actor.
    acquire: [String; 4],
    /// Parameters: name, candidate, term, at_least_ms, actor, detail.
    release: [String; 4],
}

/// The index of the variant that records the event (`record`) and announces it (`wake`).
fn variant(record: bool, wake: bool) -> usize {
    usize::from(record) * 2 + usize::from(wake)
}

/// What a one-statement attempt found.
enum Outcome {
    /// Decided.
    Done(Applied),
    /// The model would write something this path does not cover: run the full transaction.
    Fallback,
}

/// Runs `op` through its one statement, if it has one; `None` where the model's transaction
/// must decide it.
pub(super) async fn run(
    backend: &PostgresBackend,
    name: &str,
    op: &Op,
    actor: &str,
) -> Result<Option<Applied>> {
    let query = match op {
        // Whatever term it names: the statement only acquires a vacant lease.
        Op::Campaign {
            candidate,
            ttl_ms,
            metadata,
            purpose,
            ..
        } => backend
            .query(&backend.engine.cycle.acquire[acquire_variant(*purpose)])
            .bind(name)
            .bind(candidate)
            .bind(bigint("ttl", *ttl_ms)?)
            .bind(metadata)
            .bind(actor),
        Op::Release {
            candidate,
            term,
            at_least_ms,
            reason,
            purpose,
        } => backend
            .query(&backend.engine.cycle.release[release_variant(*purpose, reason.as_deref())])
            .bind(name)
            .bind(candidate)
            .bind(bigint("term", *term)?)
            .bind(bigint("at least", *at_least_ms)?)
            .bind(actor)
            .bind(reason.as_deref().unwrap_or_default()),
        _ => return Ok(None),
    };
    // sqlx's PostgreSQL `fetch_optional` reads every response to `ReadyForQuery`: a commit
    // that fails after the row was sent is an error here, not an answer.
    let row = match query.fetch_optional(&backend.pool).await {
        Ok(Some(row)) => row,
        // A name never used: the transaction inserts it.
        Ok(None) => return Ok(None),
        Err(e) if is_retryable(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let wrote: bool = row.try_get("wrote")?;
    let now = DbTime(row.try_get("now_us")?);
    let tli: i64 = row.try_get("tli")?;
    let epoch = Epoch::timeline(u32::try_from(tli).unwrap_or(u32::MAX));
    let lease = backend.lease_from(&row)?;
    if let Some(keep) = backend
        .retention_us
        .filter(|_| prune_due(op, wrote, lease.term))
    {
        // The acquisition has committed: a failed prune must not make it look failed (the
        // caller would give up a tenure it holds). The next due prune deletes the rows.
        let pruned = backend
            .query(&backend.stmts.prune_history)
            .bind(name)
            .bind(now.0.saturating_sub(keep))
            .execute(&backend.pool)
            .await;
        if let Err(e) = pruned {
            tracing::warn!(name, error = %e, "pruning old history failed; kept for now");
        }
    }
    Ok(
        match outcome(op, wrote, Clock { now, epoch }, lease, name) {
            Outcome::Done(applied) => Some(applied),
            Outcome::Fallback => None,
        },
    )
}

impl CycleStatements {
    pub(super) fn new(prefix: &str, d: &Dialect) -> CycleStatements {
        let lease = format!("{prefix}lease");
        let history = format!("{prefix}history");
        let a_cols = lease_columns(d, "a.");
        let t_cols = lease_columns(d, "t.");
        let now_of = |q: &str| (d.to_us)(&format!("{q}.now"));
        let ms = |p: &str| format!("{p}::BIGINT * INTERVAL '1 millisecond'");
        let EpochSql::Timeline(tli) = d.epoch else {
            unreachable!("PostgreSQL's epoch is its timeline")
        };
        // The row, locked, with the clock (and the timeline) read after the lock was granted.
        let locked = format!(
            "t AS (SELECT l.*, clock_timestamp() AS now, {tli} AS tli \
             FROM (SELECT * FROM {lease} WHERE name = $1 FOR UPDATE) l)"
        );
        // `Epoch::timeline`: timeline t owns the terms (t - 1)·2⁴⁰ ..< t·2⁴⁰.
        let next_term = format!("GREATEST(t.term + 1, (t.tli - 1) << {TIMELINE_BITS})");
        // The event and its NOTIFY (sent at commit), for the row `a` wrote, as the variant
        // asks; then the answer. A data-modifying `h` always runs; a plain `SELECT` runs only
        // where the answer reads it.
        let marked = marks::marked_sql(&lease);
        let event_and_answer = |kind: &str, detail: &str, record: bool, wake: bool| {
            // A release commits without waiting for its WAL flush (`set_config(…, true)`:
            // this statement's transaction only) unless it keeps the name unavailable beyond
            // the expiry it found (`at_least`) — see the module's doc for why a release lost
            // in a crash is safe.
            let (sc, reads_sc) = match kind {
                "released" => (
                    ", sc AS (SELECT set_config('synchronous_commit', \
                     CASE WHEN a.expires_at <= GREATEST(t.expires_at, t.now) THEN 'off' \
                     ELSE current_setting('synchronous_commit') END, true) AS v FROM a, t)",
                    " CROSS JOIN sc",
                ),
                _ => ("", ""),
            };
            let insert = format!(
                "INSERT INTO {history} (name, term, holder, event, at, actor, detail) \
                 SELECT a.name, a.term, $2, '{kind}', a.now, $5, {detail} FROM a"
            );
            let (h, reads_h) = match (record, wake) {
                (true, true) => (
                    format!(", h AS ({insert} RETURNING pg_notify('{lease}', name))"),
                    "",
                ),
                (true, false) => (format!(", h AS ({insert})"), ""),
                // Only a lock's release, as the model has it (an election records every
                // event): announced where someone could be waiting (`marks.rs`).
                (false, true) => (
                    format!(", h AS (SELECT pg_notify('{lease}', a.name) FROM a WHERE {marked})"),
                    " CROSS JOIN (SELECT COUNT(*) FROM h) announced",
                ),
                (false, false) => (String::new(), ""),
            };
            format!(
                "{h}{sc} SELECT TRUE AS wrote, {a_cols}, {} AS now_us, a.tli AS tli \
                 FROM a{reads_h}{reads_sc} \
                 UNION ALL \
                 SELECT FALSE AS wrote, {t_cols}, {} AS now_us, t.tli AS tli FROM t \
                 WHERE NOT EXISTS (SELECT 1 FROM a)",
                now_of("a"),
                now_of("t"),
            )
        };
        let acquire = |record, wake| {
            format!(
                "WITH {locked}, \
             a AS (UPDATE {lease} l SET holder = $2, term = {next_term}, acquired_at = t.now, \
               renewed_at = t.now, expires_at = t.now + {ttl}, ttl_ms = $3, metadata = $4, \
               handover_to = NULL \
             FROM t WHERE l.name = t.name AND t.holder IS NULL AND t.handover_to IS NULL \
               AND NOT t.paused AND t.expires_at <= t.now \
               AND t.tli BETWEEN 1 AND {last_tli} \
               AND {next_term} < (t.tli << {TIMELINE_BITS}) \
             RETURNING l.*, t.now, t.tli)\
             {rest}",
                ttl = ms("$3"),
                last_tli = (1_u64 << (63 - TIMELINE_BITS)) - 1,
                rest = event_and_answer("acquired", "''", record, wake),
            )
        };
        let release = |record, wake| {
            format!(
                "WITH {locked}, \
             a AS (UPDATE {lease} l SET holder = NULL, \
               expires_at = GREATEST(t.now, t.acquired_at + {at_least}), \
               handover_to = CASE WHEN t.handover_to = t.holder THEN NULL ELSE t.handover_to END \
             FROM t WHERE l.name = t.name AND t.holder = $2 AND t.term = $3 \
             RETURNING l.*, t.now, t.tli)\
             {rest}",
                at_least = ms("$4"),
                rest = event_and_answer("released", "$6::TEXT", record, wake),
            )
        };
        let variants = |statement: &dyn Fn(bool, bool) -> String| {
            [(false, false), (false, true), (true, false), (true, true)]
                .map(|(record, wake)| statement(record, wake))
        };
        CycleStatements {
            acquire: variants(&acquire),
            release: variants(&release),
        }
    }
}

/// The acquisition this path covers is uncontested (the lease was vacant, no handover).
fn acquire_variant(purpose: Purpose) -> usize {
    variant(
        purpose.records_every_cycle(),
        purpose.wakes_on_acquisition(),
    )
}

/// A release always wakes (a waiter may be waiting for it).
fn release_variant(purpose: Purpose, reason: Option<&str>) -> usize {
    variant(purpose.records_release(reason), true)
}

/// Turns the statement's answer into the operation's outcome.
fn outcome(op: &Op, wrote: bool, clock: Clock, lease: Lease, name: &str) -> Outcome {
    let Clock { now, epoch } = clock;
    if wrote {
        let effect = match op {
            Op::Release { .. } => Effect::Released,
            _ => Effect::Acquired {
                took_over_from: None,
            },
        };
        return Outcome::Done(Applied {
            now,
            epoch,
            lease: Some(lease),
            effect,
        });
    }
    let decision = decide(clock, name, Some(&lease), op);
    // A refusal (the epoch's last term) is the transaction's to make, as an error.
    if decision.write || decision.event.is_some() || decision.effect == Effect::TermsExhausted {
        return Outcome::Fallback;
    }
    Outcome::Done(Applied {
        now,
        epoch,
        lease: decision.lease,
        effect: decision.effect,
    })
}

/// Whether an acquisition by this path is due to prune its name's old history (one that
/// records its event).
fn prune_due(op: &Op, wrote: bool, term: u64) -> bool {
    let recorded = matches!(op, Op::Campaign { purpose, .. } if purpose.records_every_cycle());
    wrote && recorded && acquisition_prunes(term)
}

#[cfg(test)]
mod tests;
