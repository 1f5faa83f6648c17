//! The layers' tables on a store's database: created where missing (and grown by the columns a
//! newer build added), or checked, in one transaction — for whichever layers the caller names
//! (`layers.rs` passes every layer compiled in).

use crate::backend::tx::{Body, Outcome, Schema, Tx};
use crate::backend::{Backend, BackendKind};
use crate::error::{Error, Result};

/// Creates the tables of `layers` on `backend` if they do not exist (`create`), or checks
/// that they do. Unbounded: the store bounds it with its timeout.
///
/// # Errors
/// [`Error::SchemaMissing`] naming the first missing table; database errors.
pub(super) async fn tables(
    backend: &dyn Backend,
    layers: &[&'static Schema],
    create: bool,
) -> Result<()> {
    if layers.is_empty() || backend.kind() == BackendKind::Memory {
        return Ok(());
    }
    let mut body = Tables {
        layers,
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

/// The first of `schema`'s tables that `backend` lacks, if any.
///
/// # Errors
/// Database errors.
pub(super) async fn missing(
    backend: &dyn Backend,
    schema: &'static Schema,
) -> Result<Option<String>> {
    if backend.kind() == BackendKind::Memory {
        return Ok(None);
    }
    let layers = [schema];
    let mut body = Tables {
        layers: &layers,
        create: false,
        missing: None,
    };
    backend.transaction(&mut body).await?;
    Ok(body.missing)
}

/// Creates or checks the layers' tables, in one transaction (run again, like any, after a
/// conflict: a concurrent creator's duplicate object included).
struct Tables<'a> {
    layers: &'a [&'static Schema],
    create: bool,
    /// The first table found missing.
    missing: Option<String>,
}

#[async_trait::async_trait]
impl Body for Tables<'_> {
    fn writes(&self) -> bool {
        self.create
    }

    fn op(&self) -> &'static str {
        "tables"
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        self.missing = None;
        for schema in self.layers {
            if self.create {
                schema.create(tx).await?;
            } else if let Some(table) = schema.missing(tx).await? {
                self.missing = Some(table);
                return Ok(Outcome::Rollback);
            }
        }
        Ok(Outcome::Commit)
    }
}

#[cfg(test)]
mod tests {
    //! A layer's table grows in place: a newer build's added column is added to the table an
    //! older build created, on every engine (`information_schema` / `pragma_table_info`).
    use super::*;
    use crate::backend::tx::{Arg, Column, Kind, Table};
    use crate::store::Store;
    use crate::StoreOptions;

    const V1: Schema = Schema {
        layer: "grow",
        tables: &[Table {
            name: "grow",
            columns: &[
                Column::new("k", Kind::Name(191)),
                Column::new("v", Kind::Int),
            ],
            primary_key: &["k"],
            indexes: &[],
        }],
    };
    const V2: Schema = Schema {
        layer: "grow",
        tables: &[Table {
            name: "grow",
            columns: &[
                Column::new("k", Kind::Name(191)),
                Column::new("v", Kind::Int),
                Column::new("note", Kind::Text).null(),
                Column::new("at", Kind::Time).null(),
                Column::new("count", Kind::Int).default(0),
            ],
            primary_key: &["k"],
            indexes: &[crate::backend::tx::Index {
                name: "v",
                columns: &["v"],
            }],
        }],
    };

    struct Write;

    #[async_trait::async_trait]
    impl Body for Write {
        fn writes(&self) -> bool {
            true
        }
        async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
            let table = format!("{}grow", tx.prefix());
            let insert = format!(
                "INSERT INTO {table} (k, v, note) VALUES ({}, {}, {})",
                (tx.dialect().param)(1),
                (tx.dialect().param)(2),
                (tx.dialect().param)(3)
            );
            tx.execute(&insert, &[Arg::Text("a"), Arg::Int(1), Arg::Text("added")])
                .await?;
            let count = format!("SELECT count FROM {table} WHERE k = 'a'");
            assert_eq!(
                tx.fetch(&count, &[]).await?[0].int("count")?,
                0,
                "the default"
            );
            let rows = tx
                .fetch(
                    &format!(
                        "SELECT {} AS note FROM {table} WHERE k = 'a'",
                        (tx.dialect().text)("note")
                    ),
                    &[],
                )
                .await?;
            assert_eq!(rows[0].opt_text("note")?.as_deref(), Some("added"));
            Ok(Outcome::Rollback)
        }
    }

    async fn grows(url: &str) {
        let prefix = format!("g{}_", rand::random::<u32>());
        let options = StoreOptions::default().table_prefix(&prefix);
        let old = match Store::open(url, options.clone(), &[&V1]).await {
            Ok(store) => store,
            Err(e)
                if !url.starts_with("sqlite") && std::env::var("CI").as_deref() != Ok("true") =>
            {
                eprintln!("SKIPPED: {url} not reachable ({e})");
                return;
            }
            Err(e) => panic!("{url}: {e}"),
        };
        // A store that may not create tables names the first column the older table lacks.
        let checking = Store::open(url, options.clone().auto_create(false), &[&V2]).await;
        match checking {
            Err(Error::SchemaMissing { table, .. }) => {
                assert_eq!(table, format!("{prefix}grow.note"));
            }
            other => panic!("{url}: {other:?}"),
        }
        old.close().await;
        // The newer build's store: the column is added, twice is harmless.
        let new = Store::open(url, options.clone(), &[&V2]).await.unwrap();
        new.migrate_with(&[&V2]).await.unwrap();
        new.check_schema_with(&[&V2]).await.unwrap();
        new.backend.transaction(&mut Write).await.unwrap();
        new.close().await;
    }

    #[tokio::test]
    async fn a_layer_table_grows_in_place_on_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        grows(&format!("sqlite://{}", dir.path().join("g.db").display())).await;
    }

    #[tokio::test]
    async fn a_layer_table_grows_in_place_on_postgres() {
        let url = std::env::var("TENURE_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
        grows(&url).await;
    }

    #[tokio::test]
    async fn a_layer_table_grows_in_place_on_mysql() {
        let url = std::env::var("TENURE_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".into());
        grows(&url).await;
    }
}
