//! The schema of [`SqlBackend`]: creating the tables (and the engine's stored routines) and
//! checking them — `Backend::migrate` and `Backend::check_schema`.

use super::backend::{Engine, SqlBackend};
use super::statements::SCHEMA_VERSION;
use crate::error::{is_duplicate_object, is_missing_table, is_retryable, Error, Result};
use sqlx::database::HasStatementCache;
use sqlx::{ColumnIndex, Database, Decode, Encode, Executor, IntoArguments, Row, Type};

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
    /// `Backend::migrate`: the DDL, run again after a concurrent creator's collision, then
    /// the routines and the check.
    pub(super) async fn create_tables(&self) -> Result<()> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result: std::result::Result<(), sqlx::Error> = async {
                for ddl in &self.stmts.schema {
                    self.read(self.query(ddl)).await?;
                }
                self.read(self.query(&self.stmts.init_version)).await?;
                Ok(())
            }
            .await;
            match result {
                // Concurrent `CREATE TABLE IF NOT EXISTS` can collide in PostgreSQL's
                // catalog; the other creator has then done the work.
                Err(e) if attempt < 6 && (is_retryable(&e) || is_duplicate_object(&e)) => {}
                Err(e) => return Err(e.into()),
                Ok(()) => {
                    self.install_routines().await;
                    return self.verify_schema().await;
                }
            }
        }
    }

    /// `Backend::check_schema`: the schema version row and a probe of every table.
    pub(super) async fn verify_schema(&self) -> Result<()> {
        let missing = |table: &str| Error::SchemaMissing {
            table: table.to_string(),
            url: self.url.to_string(),
        };
        let version = match self.read(self.query(&self.stmts.schema_version)).await {
            Ok(rows) => rows
                .first()
                .ok_or(sqlx::Error::RowNotFound)?
                .try_get::<Option<i64>, _>("version")?,
            Err(e) if is_missing_table(&e) => {
                return Err(missing(&self.stmts.schema_table));
            }
            Err(e) => return Err(e.into()),
        };
        let lease_probe = (&self.stmts.lease_table, &self.stmts.probe_lease);
        let probes = self
            .stmts
            .probes
            .iter()
            .map(|(table, probe)| (table, probe));
        for (table, probe) in std::iter::once(lease_probe).chain(probes) {
            if let Err(e) = self.read(self.query(probe)).await {
                return Err(if is_missing_table(&e) {
                    missing(table)
                } else {
                    e.into()
                });
            }
        }
        match version {
            None => Err(missing(&self.stmts.schema_table)),
            Some(found) if found > SCHEMA_VERSION => Err(Error::SchemaTooNew {
                found,
                supported: SCHEMA_VERSION,
                url: self.url.to_string(),
            }),
            Some(_) => Ok(()),
        }
    }

    /// Installs the engine's stored routines (through the text protocol: a routine's DDL is
    /// no prepared statement); one that cannot be installed (no `CREATE ROUTINE` privilege,
    /// say) costs speed, not correctness: the operations it serves run the transaction.
    async fn install_routines(&self) {
        for routine in &self.stmts.routines {
            if let Err(e) = sqlx::raw_sql(routine).execute(&self.pool).await {
                let first = routine.lines().next().unwrap_or_default();
                tracing::warn!(
                    url = %self.url,
                    error = %e,
                    "could not install a stored routine ({first} …): the operations it serves \
                     run the model's transaction instead"
                );
            }
        }
    }
}
