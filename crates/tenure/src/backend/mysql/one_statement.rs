//! A lock's cycle on MariaDB/MySQL in one round trip per operation: two stored procedures that
//! `migrate` installs (`migrate --print` shows them), called with one `CALL` each.
//!
//! MySQL has no `UPDATE … RETURNING` and no data-modifying CTEs, and sqlx sends every
//! statement of the model's transaction as a round trip of its own (`BEGIN`, the locked row,
//! the clock, the write, `COMMIT`): five per operation, ten per cycle, where the least SQL pays
//! two. Each procedure runs the same steps inside the server, in one transaction:
//!
//! 1. `SELECT … FOR UPDATE` locks the row (if there is one) — in the release; the
//!    acquisition's `UPDATE` locks it itself (`lock_acquire_v3`, one statement fewer than
//!    `_v2`);
//! 2. the release reads the clock *after* the lock was granted (`UTC_TIMESTAMP(6)` into a
//!    variable, as the transaction reads it in a second statement); the acquisition reads it
//!    as its `UPDATE` starts, which may be before the row lock is granted. That errs only one
//!    way: a lease is found expired no sooner (`expires_at <= now` at an earlier now), and the
//!    new expiry, `now + ttl`, still lies a whole ttl after the caller sent the call, which is
//!    all its belief counts on (its deadline is the send instant + ttl − margin). The row's
//!    `acquired_at` is that instant too (so `at_least` counts from it), and the answer's `now`
//!    is the `renewed_at` it wrote: the model-based test checks the row against the model at
//!    that `now`;
//! 3. one `UPDATE` writes only in the one case it covers, exactly where the model ([`decide`])
//!    writes the same row and records no event:
//!    - **acquire** (a lock or permit that does not record every cycle): the lease is vacant
//!      (`holder IS NULL`), expired, not paused, no handover is pending, and this server is
//!      the one that began the database's epoch whose floor the caller read last (the
//!      `<prefix>epoch` row against `@@server_id`): term = max(term + 1, floor), as the model
//!      mints it ([`Epoch::next_term`](crate::model::Epoch::next_term)); a store that has not
//!      read the epoch yet, a new server (a promotion) or the last term runs the transaction,
//!      which begins a new epoch where it must;
//!    - **release** (one the model does not record): `holder` and `term` match: `holder = NULL`,
//!      `expires_at = max(now, acquired_at + at_least)`, the mark of an unadopted forced grant
//!      (`handover_to = holder`) dropped — assigned *before* `holder`, since MySQL's `SET`
//!      sees the columns it already assigned;
//! 4. if it wrote, the row and the clock are the answer; `COMMIT`. On any error the
//!    procedure rolls back and raises it again, so no transaction stays open on the pooled
//!    connection.
//!
//! Neither writes on a read-only server (`@@global.read_only`, which a privileged user could
//! otherwise write through, as on a demoted primary): the transaction then answers with its
//! `ReadOnly` error.
//!
//! Times are computed with the dialect's own conversions, from the same microsecond values the
//! model would bind. Where the procedure writes nothing (someone else holds the lease, a new
//! name, a stale release) or the operation records its event, the model's transaction decides
//! instead. The procedures run with the caller's privileges (`SQL SECURITY INVOKER`). Where
//! they cannot be called (a database migrated by an older tenure, a user without `CREATE
//! ROUTINE` — `migrate` then warns — or without `EXECUTE`) every operation runs the
//! transaction. The
//! model-based test runs every operation through this path. The doorbell rings after either
//! path commits (`Engine::applied`).
//!
//! [`decide`]: crate::model::decide

use super::MySql;
use crate::backend::sql::{bigint, lease_columns, Dialect, Engine, SqlBackend};
use crate::backend::Applied;
use crate::error::is_retryable;
use crate::error::Result;
use crate::model::{Epoch, Op};
use std::sync::atomic::Ordering;

/// The procedures' names: versioned, so that a later tenure with other bodies installs its own
/// next to these (`CREATE PROCEDURE IF NOT EXISTS` never replaces one).
fn names(prefix: &str) -> (String, String) {
    (
        format!("{prefix}lock_acquire_v3"),
        format!("{prefix}lock_release_v1"),
    )
}

/// The procedures' DDL, with the table prefix filled in (run by `migrate` through the text
/// protocol; `migrate --print` wraps each in `DELIMITER`).
pub(super) fn routines(prefix: &str) -> Vec<String> {
    let d: Dialect = MySql::dialect();
    let lease = format!("{prefix}lease");
    let epoch = format!("{prefix}epoch");
    let (acquire, release) = names(prefix);
    let text = "VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin";
    let answer = format!(
        "SELECT {}, {} AS now_us FROM {lease} WHERE name = p_name",
        lease_columns(&d, ""),
        (d.to_us)("v_now")
    );
    // Steps 1, 2 and 4 of the module's doc around the one UPDATE of step 3.
    let body = |update: String| {
        format!(
            "BEGIN\n\
             \x20 DECLARE v_now DATETIME(6);\n\
             \x20 DECLARE v_seen INT;\n\
             \x20 DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;\n\
             \x20 START TRANSACTION;\n\
             \x20 SELECT COUNT(*) INTO v_seen FROM {lease} WHERE name = p_name FOR UPDATE;\n\
             \x20 SET v_now = UTC_TIMESTAMP(6);\n\
             \x20 {update};\n\
             \x20 IF ROW_COUNT() = 1 THEN\n\
             \x20   {answer};\n\
             \x20 END IF;\n\
             \x20 COMMIT;\n\
             END"
        )
    };
    // The acquisition: the `UPDATE` alone (its clock is the statement's, see the module's
    // doc), the answer's clock the `renewed_at` it wrote.
    let acquire_answer = format!(
        "SELECT {}, {} AS now_us FROM {lease} WHERE name = p_name",
        lease_columns(&d, ""),
        (d.to_us)("renewed_at")
    );
    let now = "UTC_TIMESTAMP(6)";
    vec![
        format!(
            "CREATE PROCEDURE IF NOT EXISTS {acquire}(IN p_name {text}, IN p_holder {text}, \
             IN p_ttl_ms BIGINT, IN p_metadata TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, \
             IN p_floor BIGINT)\n\
             SQL SECURITY INVOKER\n\
             BEGIN\n\
             \x20 DECLARE EXIT HANDLER FOR SQLEXCEPTION BEGIN ROLLBACK; RESIGNAL; END;\n\
             \x20 START TRANSACTION;\n\
             \x20 UPDATE {lease} SET holder = p_holder, term = GREATEST(term + 1, p_floor), \
             acquired_at = {now}, renewed_at = {now}, \
             expires_at = TIMESTAMPADD(MICROSECOND, p_ttl_ms * 1000, {now}), \
             ttl_ms = p_ttl_ms, metadata = p_metadata, handover_to = NULL \
             WHERE name = p_name AND holder IS NULL AND handover_to IS NULL AND paused = 0 \
             AND expires_at <= {now} AND @@global.read_only = 0 \
             AND term < 9223372036854775807 \
             AND EXISTS (SELECT 1 FROM {epoch} e WHERE e.id = 1 \
             AND e.server_id = @@server_id AND e.epoch = p_floor);\n\
             \x20 IF ROW_COUNT() = 1 THEN\n\
             \x20   {acquire_answer};\n\
             \x20 END IF;\n\
             \x20 COMMIT;\n\
             END"
        ),
        format!(
            "CREATE PROCEDURE IF NOT EXISTS {release}(IN p_name {text}, IN p_holder {text}, \
             IN p_term BIGINT, IN p_at_least_ms BIGINT)\nSQL SECURITY INVOKER\n{}",
            body(format!(
                "UPDATE {lease} SET \
                 handover_to = CASE WHEN handover_to = holder THEN NULL ELSE handover_to END, \
                 holder = NULL, \
                 expires_at = GREATEST(v_now, TIMESTAMPADD(MICROSECOND, p_at_least_ms * 1000, \
                 acquired_at)) \
                 WHERE name = p_name AND holder = p_holder AND term = p_term \
                 AND @@global.read_only = 0"
            ))
        ),
    ]
}

/// The procedures' names, with the table prefix filled in.
pub(super) struct CycleCalls {
    acquire: String,
    release: String,
}

impl CycleCalls {
    pub(super) fn new(prefix: &str) -> CycleCalls {
        let (acquire, release) = names(prefix);
        CycleCalls { acquire, release }
    }
}

/// An argument of a `CALL` sent as text: sqlx's prepared `CALL` answers rows without their
/// column names (it keeps the prepare's metadata, which a procedure's result lacks), so the
/// call goes through the text protocol, with every value spelled so that no byte of it is
/// SQL: text as a hex literal in `utf8mb4`, numbers as digits.
enum Arg<'a> {
    Text(&'a str),
    OptText(Option<&'a str>),
    Int(i64),
}

impl Arg<'_> {
    fn sql(&self) -> String {
        match self {
            Arg::Text(t) | Arg::OptText(Some(t)) if t.is_empty() => "_utf8mb4''".to_string(),
            Arg::Text(t) | Arg::OptText(Some(t)) => {
                let hex: String = t.bytes().map(|b| format!("{b:02x}")).collect();
                format!("_utf8mb4 X'{hex}'")
            }
            Arg::OptText(None) => "NULL".to_string(),
            Arg::Int(i) => i.to_string(),
        }
    }
}

fn call(procedure: &str, args: &[Arg<'_>]) -> String {
    let args: Vec<String> = args.iter().map(Arg::sql).collect();
    format!("CALL {procedure}({})", args.join(", "))
}

/// The procedure cannot be called here: it does not exist (1305), this user may not execute
/// it (1370), or its definer is gone (1449). Then the transaction serves instead.
fn is_unusable_routine(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .is_some_and(|my| matches!(my.number(), 1305 | 1370 | 1449)),
        _ => false,
    }
}

/// Runs `op` through its procedure, if it has one; `None` where the model's transaction must
/// decide it.
pub(super) async fn run(
    backend: &SqlBackend<MySql>,
    name: &str,
    op: &Op,
) -> Result<Option<Applied>> {
    let engine = &backend.engine;
    if engine.without_routines.load(Ordering::Relaxed) {
        return Ok(None);
    }
    let calls = &engine.calls;
    let floor = engine.epoch_floor.load(Ordering::Relaxed);
    let sql = match op {
        Op::Campaign {
            candidate,
            ttl_ms,
            metadata,
            purpose,
            ..
        } if !purpose.records_every_cycle() && floor >= 0 => call(
            &calls.acquire,
            &[
                Arg::Text(name),
                Arg::Text(candidate),
                Arg::Int(bigint("ttl", *ttl_ms)?),
                Arg::OptText(metadata.as_deref()),
                Arg::Int(floor),
            ],
        ),
        Op::Release {
            candidate,
            term,
            at_least_ms,
            reason,
            purpose,
        } if !purpose.records_release(reason.as_deref()) => call(
            &calls.release,
            &[
                Arg::Text(name),
                Arg::Text(candidate),
                Arg::Int(bigint("term", *term)?),
                Arg::Int(bigint("at least", *at_least_ms)?),
            ],
        ),
        _ => return Ok(None),
    };
    // Every result of the CALL, to its end: the answer's row comes before the procedure's
    // `COMMIT`, and a `COMMIT` that fails (a Galera certification conflict, say) must not leave
    // us believing a row that was rolled back. (sqlx's `fetch_optional` stops at the first row.)
    let answer = sqlx::Executor::fetch_all(&backend.pool, sqlx::raw_sql(&sql)).await;
    let row = match answer.map(|rows| rows.into_iter().next()) {
        Ok(Some(row)) => row,
        // Nothing covered here: held by someone, a new name, a stale release.
        Ok(None) => return Ok(None),
        Err(e) if is_retryable(&e) => return Ok(None),
        Err(e) if is_unusable_routine(&e) => {
            if !engine.without_routines.swap(true, Ordering::Relaxed) {
                tracing::info!(
                    error = %e,
                    "the lock-cycle procedures cannot be called here (see `tenure migrate \
                     --print`): lock cycles run the transaction"
                );
            }
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    // An acquisition wrote only in the epoch of that floor; a release mints nothing.
    let epoch = Epoch::from_floor(u64::try_from(floor).unwrap_or(0));
    backend.cycle_applied(&row, op, epoch).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_spelled_without_sql() {
        assert_eq!(
            call(
                "p",
                &[
                    Arg::Text("a'); DROP TABLE x; --"),
                    Arg::OptText(None),
                    Arg::OptText(Some("")),
                    Arg::Int(-3)
                ]
            ),
            "CALL p(_utf8mb4 X'6127293b2044524f50205441424c4520783b202d2d', NULL, _utf8mb4'', -3)"
        );
        assert_eq!(Arg::Text("é").sql(), "_utf8mb4 X'c3a9'");
    }
}
