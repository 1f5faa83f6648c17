//! The features compiled into this build that keep tables of their own beside the lease's —
//! each a folder of its own on the store's transaction seam (`backend/tx.rs`) — as seen by
//! what must know them all: the tables to create when a store connects or migrates, to check
//! when it may not create them, and to print for a DBA ([`schema_script`]). A new feature adds
//! one line to [`FEATURES`].

use crate::backend::tx::{Body, Outcome, Tx};
use crate::backend::{self, Backend, BackendKind};
use crate::error::{Error, Result};

/// One feature's tables: their names (without the prefix) and their DDL on one engine.
struct Feature {
    tables: &'static [&'static str],
    schema: fn(BackendKind, &str) -> Vec<String>,
}

/// Every feature with tables of its own, as the cargo features compile them in.
const FEATURES: &[Feature] = &[
    Feature {
        tables: &crate::candidates::statements::TABLES,
        schema: crate::candidates::statements::schema,
    },
    Feature {
        tables: &crate::spread::statements::TABLES,
        schema: crate::spread::statements::schema,
    },
    #[cfg(feature = "consul")]
    Feature {
        tables: &crate::consul::statements::TABLES,
        schema: crate::consul::statements::schema,
    },
];

/// Every feature's DDL on `kind` with `prefix`.
fn ddl(kind: BackendKind, prefix: &str) -> Vec<String> {
    FEATURES
        .iter()
        .flat_map(|f| (f.schema)(kind, prefix))
        .collect()
}

/// The DDL of every table this build uses — the lease's (what
/// [`Backend::migrate`](crate::backend::Backend::migrate) runs, with its stored routines) and
/// each compiled-in feature's — with `prefix` on `kind`, for a DBA to apply by hand (`tenure
/// migrate --print`), without connecting.
///
/// # Errors
/// [`Error::Invalid`] for a bad prefix, [`Error::BackendNotCompiled`].
pub fn schema_script(kind: BackendKind, prefix: &str) -> Result<String> {
    let mut script = backend::lease_script(kind, prefix)?;
    for statement in ddl(kind, prefix) {
        script.push('\n');
        script.push_str(statement.trim());
        script.push_str(";\n");
    }
    Ok(script)
}

/// Creates the features' tables on `backend` if they do not exist (`create`), or checks that
/// they do. Unbounded: the store bounds it with its timeout.
///
/// # Errors
/// [`Error::SchemaMissing`] naming the first missing table; database errors.
pub(crate) async fn tables(backend: &dyn Backend, create: bool) -> Result<()> {
    if FEATURES.is_empty() || backend.kind() == BackendKind::Memory {
        return Ok(());
    }
    let mut body = Tables {
        create,
        missing: None,
    };
    backend.transaction(&mut body).await?;
    match body.missing {
        Some(table) => Err(Error::SchemaMissing {
            table,
            url: backend.url().to_string(),
        }),
        None => Ok(()),
    }
}

/// The first of the features' tables that `backend` lacks, if any.
///
/// # Errors
/// Database errors.
pub(crate) async fn missing(backend: &dyn Backend) -> Result<Option<String>> {
    if FEATURES.is_empty() || backend.kind() == BackendKind::Memory {
        return Ok(None);
    }
    let mut body = Tables {
        create: false,
        missing: None,
    };
    backend.transaction(&mut body).await?;
    Ok(body.missing)
}

/// Creates or checks the features' tables, in one transaction (run again, like any, after a
/// conflict: a concurrent creator's duplicate object included).
struct Tables {
    create: bool,
    /// The first table found missing.
    missing: Option<String>,
}

#[async_trait::async_trait]
impl Body for Tables {
    fn writes(&self) -> bool {
        self.create
    }

    fn op(&self) -> &'static str {
        "tables"
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.missing = None;
        if self.create {
            for statement in ddl(tx.kind(), tx.prefix()) {
                tx.execute(&statement, &[]).await?;
            }
            return Ok(Outcome::Commit);
        }
        let names: Vec<String> = FEATURES
            .iter()
            .flat_map(|f| f.tables.iter().map(|t| format!("{}{t}", tx.prefix())))
            .collect();
        for table in names {
            let probe = format!("SELECT 1 AS one FROM {table} WHERE 1 = 0");
            match tx.fetch(&probe, &[]).await {
                Ok(_) => {}
                Err(e) if e.is_missing_table() => {
                    self.missing = Some(table);
                    return Ok(Outcome::Rollback);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Outcome::Commit)
    }
}
