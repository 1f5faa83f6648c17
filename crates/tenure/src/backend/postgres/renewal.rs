//! The locks' keep-alive on PostgreSQL: one `UPDATE` however many locks it renews. The (name,
//! term) pairs go as two arrays joined through `unnest`, where the other engines send them as
//! lists of row values, [`RENEW_CHUNK`] pairs per statement.
//!
//! PostgreSQL plans a list of 5,000 row values as 5,000 alternatives: on the 2-core machine
//! of docs/benchmarks.md the keep-alive of 100,000 locks took 3.7 s in 20 such statements,
//! against a bound of 4 s (the `db_timeout` of a 20 s ttl), and a keep-alive that runs past its
//! bound renews nothing — each next one was as long, and the locks were lost as their
//! deadlines passed. Two arrays are one plan of any length: 0.8 s for the same 100,000.
//!
//! The rules are [`Statements::renew`]'s, which the model-based test checks on this path: a
//! row is renewed only while `holder` holds it in that term, unexpired at the batch's `now`,
//! not paused, and not handed over to someone else (an unadopted forced grant to the holder
//! itself is dropped); the expiry is `now + ttl_ms`.
//!
//! [`RENEW_CHUNK`]: crate::backend::sql::RENEW_CHUNK
//! [`Statements::renew`]: crate::backend::sql::Statements::renew

use super::PostgresBackend;
use crate::backend::sql::{bigint, lease_columns, Dialect};
use crate::error::Result;
use crate::model::DbTime;
use sqlx::postgres::{PgConnection, PgRow};

/// The statement, with the table prefix filled in. Parameters: now (µs), holder, holder,
/// names (`TEXT[]`), terms (`BIGINT[]`).
pub(super) fn statement(prefix: &str, d: &Dialect) -> String {
    let now = (d.from_us)("$1");
    format!(
        "UPDATE {prefix}lease AS l SET renewed_at = {now}, expires_at = {expires}, \
         handover_to = NULL \
         FROM unnest($4::TEXT[], $5::BIGINT[]) AS x(name, term) \
         WHERE l.name = x.name AND l.term = x.term AND l.holder = $2 AND l.expires_at > {now} \
         AND NOT l.paused AND (l.handover_to IS NULL OR l.handover_to = $3) \
         RETURNING {cols}",
        expires = (d.from_us)("($1 + l.ttl_ms * 1000)"),
        cols = lease_columns(d, "l."),
    )
}

/// Renews `leases` of `holder` at `now` on `conn` (inside the keep-alive's transaction): the
/// rows renewed.
pub(super) async fn run(
    backend: &PostgresBackend,
    conn: &mut PgConnection,
    holder: &str,
    leases: &[(String, u64)],
    now: DbTime,
) -> Result<Vec<PgRow>> {
    let names: Vec<&str> = leases.iter().map(|(name, _)| name.as_str()).collect();
    let terms = leases
        .iter()
        .map(|(_, term)| bigint("term", *term))
        .collect::<Result<Vec<i64>>>()?;
    Ok(backend
        .query(&backend.engine.renewal)
        .bind(now.0)
        .bind(holder)
        .bind(holder)
        .bind(names)
        .bind(terms)
        .fetch_all(conn)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::sql::Engine;

    #[test]
    fn one_statement_names_every_column_of_the_lease_row_it_joins() {
        let sql = statement("t_", &super::super::Postgres::dialect());
        assert!(sql.starts_with("UPDATE t_lease AS l SET renewed_at = "));
        assert!(sql.contains("FROM unnest($4::TEXT[], $5::BIGINT[]) AS x(name, term)"));
        // `name` and `term` are also the join's columns: every one read back is the lease's.
        let returning = sql.split(" RETURNING ").nth(1).expect("returning");
        assert!(returning.starts_with("l.name AS name, l.holder AS holder, l.term AS term"));
        for column in returning.split(", ") {
            assert!(column.contains("l."), "{column} is not the lease's");
        }
    }
}
