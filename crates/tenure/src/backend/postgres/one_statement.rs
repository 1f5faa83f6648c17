//! The two operations a lock cycle is made of, each in one autocommitted statement: a campaign
//! for a vacant lease and a release. A lock taken and released in a loop pays two round trips
//! and two commits, not ten statements in two transactions.
//!
//! Each statement locks the row (`FOR UPDATE`), reads `clock_timestamp()` after the lock was
//! granted, and writes only in the one case it covers — exactly where the model
//! ([`decide`]) writes the same row and event:
//! - **acquire**: the lease is vacant (`holder IS NULL`), expired, not paused, and no handover
//!   is pending: term + 1, a new tenure, an `acquired` event;
//! - **release**: `holder` and `term` match: `holder = NULL`, `expires_at = max(now,
//!   acquired_at + at_least)`, the mark of an unadopted forced grant (`handover_to = holder`)
//!   dropped, a `released` event with the release's reason as its detail.
//!
//! Otherwise the statement writes nothing and returns the locked row as it is, with the same
//! `now`. Where the model decides no write on it (someone else leads, a stale release, a step
//! down) that is the answer; where it would write (a renewal, a takeover of an expired holder,
//! a handover, a new name) the full transaction decides instead. The model-based test runs
//! every operation through this path.

use super::PostgresBackend;
use crate::backend::sql::{acquisition_prunes, is_retryable, lease_columns, Dialect};
use crate::backend::Applied;
use crate::error::Result;
use crate::model::{decide, DbTime, Effect, Lease, Op};
use sqlx::Row;

/// The two statements, with the table prefix filled in.
pub(super) struct CycleStatements {
    /// Parameters: name, candidate, ttl_ms, metadata, actor.
    pub acquire: String,
    /// Parameters: name, candidate, term, at_least_ms, actor, detail.
    pub release: String,
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
            ..
        } => backend
            .query(&backend.engine.cycle.acquire)
            .bind(name)
            .bind(candidate)
            .bind(*ttl_ms as i64)
            .bind(metadata)
            .bind(actor),
        Op::Release {
            candidate,
            term,
            at_least_ms,
            reason,
        } => backend
            .query(&backend.engine.cycle.release)
            .bind(name)
            .bind(candidate)
            .bind(*term as i64)
            .bind(*at_least_ms as i64)
            .bind(actor)
            .bind(reason.as_deref().unwrap_or_default()),
        _ => return Ok(None),
    };
    let row = match query.fetch_optional(&backend.pool).await {
        Ok(Some(row)) => row,
        // A name never used: the transaction inserts it.
        Ok(None) => return Ok(None),
        Err(e) if is_retryable(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let wrote: bool = row.try_get("wrote")?;
    let now = DbTime(row.try_get("now_us")?);
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
    Ok(match outcome(op, wrote, now, lease, name) {
        Outcome::Done(applied) => Some(applied),
        Outcome::Fallback => None,
    })
}

impl CycleStatements {
    pub fn new(prefix: &str, d: &Dialect) -> CycleStatements {
        let lease = format!("{prefix}lease");
        let history = format!("{prefix}history");
        let a_cols = lease_columns(d, "a.");
        let t_cols = lease_columns(d, "t.");
        let now_of = |q: &str| (d.to_us)(&format!("{q}.now"));
        let ms = |p: &str| format!("{p}::BIGINT * INTERVAL '1 millisecond'");
        // The row, locked, with the clock read after the lock was granted.
        let locked = format!(
            "t AS (SELECT l.*, clock_timestamp() AS now \
             FROM (SELECT * FROM {lease} WHERE name = $1 FOR UPDATE) l)"
        );
        // The event and its NOTIFY (sent at commit), for the row `a` wrote.
        let event = |kind: &str, detail: &str| {
            format!(
                "h AS (INSERT INTO {history} (name, term, holder, event, at, actor, detail) \
                 SELECT a.name, a.term, $2, '{kind}', a.now, $5, {detail} FROM a \
                 RETURNING pg_notify('{lease}', name))"
            )
        };
        let answer = format!(
            "SELECT TRUE AS wrote, {a_cols}, {} AS now_us FROM a \
             UNION ALL \
             SELECT FALSE AS wrote, {t_cols}, {} AS now_us FROM t \
             WHERE NOT EXISTS (SELECT 1 FROM a)",
            now_of("a"),
            now_of("t"),
        );
        let acquire = format!(
            "WITH {locked}, \
             a AS (UPDATE {lease} l SET holder = $2, term = t.term + 1, acquired_at = t.now, \
               renewed_at = t.now, expires_at = t.now + {ttl}, ttl_ms = $3, metadata = $4, \
               handover_to = NULL \
             FROM t WHERE l.name = t.name AND t.holder IS NULL AND t.handover_to IS NULL \
               AND NOT t.paused AND t.expires_at <= t.now \
             RETURNING l.*, t.now), \
             {event} {answer}",
            ttl = ms("$3"),
            event = event("acquired", "''"),
        );
        let release = format!(
            "WITH {locked}, \
             a AS (UPDATE {lease} l SET holder = NULL, \
               expires_at = GREATEST(t.now, t.acquired_at + {at_least}), \
               handover_to = CASE WHEN t.handover_to = t.holder THEN NULL ELSE t.handover_to END \
             FROM t WHERE l.name = t.name AND t.holder = $2 AND t.term = $3 \
             RETURNING l.*, t.now), \
             {event} {answer}",
            at_least = ms("$4"),
            event = event("released", "$6::TEXT"),
        );
        CycleStatements { acquire, release }
    }
}

/// Turns the statement's answer into the operation's outcome.
fn outcome(op: &Op, wrote: bool, now: DbTime, lease: Lease, name: &str) -> Outcome {
    if wrote {
        let effect = match op {
            Op::Release { .. } => Effect::Released,
            _ => Effect::Acquired {
                took_over_from: None,
            },
        };
        return Outcome::Done(Applied {
            now,
            lease: Some(lease),
            effect,
        });
    }
    let decision = decide(now, name, Some(&lease), op);
    if decision.write || decision.event.is_some() {
        return Outcome::Fallback;
    }
    Outcome::Done(Applied {
        now,
        lease: decision.lease,
        effect: decision.effect,
    })
}

/// Whether an acquisition by this path is due to prune its name's old history.
fn prune_due(op: &Op, wrote: bool, term: u64) -> bool {
    wrote && matches!(op, Op::Campaign { .. }) && acquisition_prunes(term)
}
