//! A lock's cycle on SQLite in one autocommitted statement per operation: the uncontested
//! acquisition of a vacant lease and its release, each an `UPDATE … RETURNING` that SQLite runs
//! under its single write lock, with `'now'` read once for the whole statement. A lock taken
//! and released in a loop pays two statements, not `BEGIN IMMEDIATE`, a read of the row, a read
//! of the clock, the write and `COMMIT` twice over.
//!
//! Each statement writes only in the one case it covers, exactly where the model ([`decide`])
//! writes the same row and records no event:
//! - **acquire** (a lock or permit that does not record every cycle): the lease is vacant
//!   (`holder IS NULL`), expired, not paused, no handover is pending, and the term is not the
//!   last (SQLite has one history, epoch zero): term + 1, a new tenure;
//! - **release** (one the model does not record: no reason, not recording every cycle):
//!   `holder` and `term` match: `holder = NULL`, `expires_at = max(now, acquired_at +
//!   at_least)`, the mark of an unadopted forced grant (`handover_to = holder`) dropped.
//!
//! Times are computed with the dialect's own conversions, from the same microsecond values the
//! model would bind, so the row written is the row the transaction would write. Where the
//! statement changes nothing (someone else holds the lease, a new name, a stale release) or
//! the operation records its event (an election, a release with a reason), the model's
//! transaction decides instead. The model-based test runs every operation through this path.
//! SQLite's doorbell rings after either path commits (`Engine::applied`).

use super::Sqlite;
use crate::backend::sql::{bigint, lease_columns, Dialect, Engine, SqlBackend};
use crate::backend::Applied;
use crate::error::is_retryable;
use crate::error::Result;
use crate::model::{Epoch, Op};

/// The two statements, with the table prefix filled in.
pub(super) struct CycleStatements {
    /// Parameters: name, candidate, ttl_ms, metadata.
    acquire: String,
    /// Parameters: name, candidate, term, at_least_ms.
    release: String,
}

impl CycleStatements {
    pub(super) fn new(prefix: &str) -> CycleStatements {
        let d: Dialect = Sqlite::dialect();
        let lease = format!("{prefix}lease");
        let now = d.now_us;
        let returning = format!("RETURNING {}, {now} AS now_us", lease_columns(&d, ""));
        let at = |us: &str| (d.from_us)(us);
        let acquire = format!(
            "UPDATE {lease} SET holder = ?2, term = term + 1, acquired_at = {now_at}, \
             renewed_at = {now_at}, expires_at = {expires}, ttl_ms = ?3, metadata = ?4, \
             handover_to = NULL \
             WHERE name = ?1 AND holder IS NULL AND handover_to IS NULL AND paused = 0 \
             AND term < 9223372036854775807 AND {expires_us} <= {now} {returning}",
            now_at = at(now),
            expires = at(&format!("({now} + ?3 * 1000)")),
            expires_us = (d.to_us)("expires_at"),
        );
        let release = format!(
            "UPDATE {lease} SET holder = NULL, \
             expires_at = {expires}, \
             handover_to = CASE WHEN handover_to = holder THEN NULL ELSE handover_to END \
             WHERE name = ?1 AND holder = ?2 AND term = ?3 {returning}",
            expires = at(&format!(
                "MAX({now}, {} + ?4 * 1000)",
                (d.to_us)("acquired_at")
            )),
        );
        CycleStatements { acquire, release }
    }
}

/// Runs `op` through its one statement, if it has one; `None` where the model's transaction
/// must decide it.
pub(super) async fn run(
    backend: &SqlBackend<Sqlite>,
    name: &str,
    op: &Op,
) -> Result<Option<Applied>> {
    let cycle = &backend.engine.cycle;
    let query = match op {
        Op::Campaign {
            candidate,
            ttl_ms,
            metadata,
            purpose,
            ..
        } if !purpose.records_every_cycle() => backend
            .query(&cycle.acquire)
            .bind(name)
            .bind(candidate)
            .bind(bigint("ttl", *ttl_ms)?)
            .bind(metadata),
        Op::Release {
            candidate,
            term,
            at_least_ms,
            reason,
            purpose,
        } if !purpose.records_release(reason.as_deref()) => backend
            .query(&cycle.release)
            .bind(name)
            .bind(candidate)
            .bind(bigint("term", *term)?)
            .bind(bigint("at least", *at_least_ms)?),
        _ => return Ok(None),
    };
    // Stepped to its end, which commits the autocommitted statement: an answer is believed
    // only once its write is committed. (sqlx's `fetch_optional` stops at the first row.)
    let row = match query
        .fetch_all(&backend.pool)
        .await
        .map(|rows| rows.into_iter().next())
    {
        Ok(Some(row)) => row,
        // Nothing covered here: held by someone, a new name, a stale release.
        Ok(None) => return Ok(None),
        Err(e) if is_retryable(&e) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    backend.cycle_applied(&row, op, Epoch::ZERO).map(Some)
}
