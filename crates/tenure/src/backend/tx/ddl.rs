//! A layer's tables as data: each column's kind, the primary key and the indexes, written once
//! and rendered for each engine — so a layer never spells three dialects of `CREATE TABLE`, and
//! every layer's tables follow the same conventions:
//!
//! - names, ids and keys compare byte for byte, as the lease's names (`COLLATE "C"` on
//!   PostgreSQL, `utf8mb4_bin` on MySQL/MariaDB); times are the engine's timestamps
//!   (`TIMESTAMPTZ`, `DATETIME(6)`, ISO text on SQLite), so that a plain `SELECT *` reads well;
//! - every table is created `IF NOT EXISTS`, and a column or index a newer build added to a
//!   table that an older one created is added in place ([`Schema::create`]): a layer's table
//!   only grows, and an added column is nullable or has a default, so that an older build
//!   still writes the table. [`Schema::missing`] names what a table lacks where the store may
//!   not create it.

use super::{BackendKind, Tx};
use crate::error::Result;

/// What a column holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Text compared byte for byte, at most this many bytes (a key, an id, a name).
    Name(u16),
    /// Text of any length (not a key).
    Text,
    /// Bytes compared byte for byte, at most this many (a binary key).
    Key(u16),
    /// Bytes of any length (a value).
    Bytes,
    /// A signed 64-bit integer.
    Int,
    /// A boolean.
    Bool,
    /// An instant of the database's clock, written and read as microseconds through the
    /// dialect.
    Time,
}

/// One column.
#[derive(Clone, Copy, Debug)]
pub struct Column {
    pub name: &'static str,
    pub kind: Kind,
    pub null: bool,
    /// The value of the rows that were there when the column was added (an integer).
    pub default: Option<i64>,
}

impl Column {
    /// A `NOT NULL` column.
    pub const fn new(name: &'static str, kind: Kind) -> Column {
        Column {
            name,
            kind,
            null: false,
            default: None,
        }
    }

    /// A column that may be `NULL`.
    pub const fn null(self) -> Column {
        Column { null: true, ..self }
    }

    /// A `NOT NULL` column with a default (an integer column a newer build adds).
    pub const fn default(self, value: i64) -> Column {
        Column {
            default: Some(value),
            ..self
        }
    }

    /// Whether it can be added to a table that has rows (nullable, or with a default).
    pub const fn addable(&self) -> bool {
        self.null || self.default.is_some()
    }
}

/// A secondary index, named `<prefix><table>_<name>`.
#[derive(Clone, Copy, Debug)]
pub struct Index {
    pub name: &'static str,
    pub columns: &'static [&'static str],
}

/// One table of a layer, named `<prefix><name>`.
#[derive(Clone, Copy, Debug)]
pub struct Table {
    pub name: &'static str,
    pub columns: &'static [Column],
    pub primary_key: &'static [&'static str],
    pub indexes: &'static [Index],
}

/// A layer's tables: what a store creates (or checks) for it, and prints for a DBA.
#[derive(Clone, Copy, Debug)]
pub struct Schema {
    /// The layer, for messages.
    pub layer: &'static str,
    pub tables: &'static [Table],
}

impl Kind {
    fn sql(self, kind: BackendKind) -> String {
        match (kind, self) {
            (BackendKind::Postgres, Kind::Name(_)) => "TEXT COLLATE \"C\"".into(),
            (BackendKind::Postgres, Kind::Text) => "TEXT".into(),
            (BackendKind::Postgres, Kind::Key(_) | Kind::Bytes) => "BYTEA".into(),
            (BackendKind::Postgres, Kind::Int) => "BIGINT".into(),
            (BackendKind::Postgres, Kind::Bool) => "BOOLEAN".into(),
            (BackendKind::Postgres, Kind::Time) => "TIMESTAMPTZ".into(),
            (BackendKind::MySql, Kind::Name(n)) => {
                format!("VARCHAR({n}) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")
            }
            (BackendKind::MySql, Kind::Text) => {
                "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin".into()
            }
            (BackendKind::MySql, Kind::Key(n)) => format!("VARBINARY({n})"),
            (BackendKind::MySql, Kind::Bytes) => "LONGBLOB".into(),
            (BackendKind::MySql, Kind::Int) => "BIGINT".into(),
            (BackendKind::MySql, Kind::Bool) => "BOOLEAN".into(),
            (BackendKind::MySql, Kind::Time) => "DATETIME(6)".into(),
            (_, Kind::Name(_) | Kind::Text | Kind::Time) => "TEXT".into(),
            (_, Kind::Key(_) | Kind::Bytes) => "BLOB".into(),
            (_, Kind::Int | Kind::Bool) => "INTEGER".into(),
        }
    }
}

impl Column {
    fn sql(&self, kind: BackendKind) -> String {
        let null = match (self.null, self.default) {
            (true, _) => "NULL".to_string(),
            (false, Some(value)) => format!("NOT NULL DEFAULT {value}"),
            (false, None) => "NOT NULL".to_string(),
        };
        format!("{} {} {null}", self.name, self.kind.sql(kind))
    }
}

impl Table {
    /// Its name with the store's prefix.
    pub fn named(&self, prefix: &str) -> String {
        format!("{prefix}{}", self.name)
    }

    /// Its `CREATE TABLE IF NOT EXISTS` and index statements on `kind` (none on a backend
    /// without SQL).
    pub fn create(&self, kind: BackendKind, prefix: &str) -> Vec<String> {
        if !matches!(
            kind,
            BackendKind::Postgres | BackendKind::MySql | BackendKind::Sqlite
        ) {
            return Vec::new();
        }
        let table = self.named(prefix);
        let index_name = |index: &Index| format!("{table}_{}", index.name);
        let mut lines: Vec<String> = self.columns.iter().map(|c| c.sql(kind)).collect();
        lines.push(format!("PRIMARY KEY ({})", self.primary_key.join(", ")));
        if kind == BackendKind::MySql {
            // MySQL 8 has no `CREATE INDEX IF NOT EXISTS`: its indexes come with the table.
            for index in self.indexes {
                let columns = index.columns.join(", ");
                lines.push(format!("INDEX {} ({columns})", index_name(index)));
            }
        }
        let engine = if kind == BackendKind::MySql {
            " ENGINE=InnoDB"
        } else {
            ""
        };
        let mut statements = vec![format!(
            "CREATE TABLE IF NOT EXISTS {table} (\n    {}\n){engine}",
            lines.join(",\n    ")
        )];
        if kind != BackendKind::MySql {
            for index in self.indexes {
                statements.push(format!(
                    "CREATE INDEX IF NOT EXISTS {} ON {table} ({})",
                    index_name(index),
                    index.columns.join(", ")
                ));
            }
        }
        statements
    }

    /// Its columns that the table in `tx`'s database lacks (a table an older build created).
    async fn lacking(&self, tx: &mut dyn Tx) -> Result<Vec<Column>> {
        let query = self.columns_query(tx.kind(), tx.prefix());
        let found: Vec<String> = tx
            .fetch(&query, &[])
            .await?
            .iter()
            .map(|row| row.text("column_name"))
            .collect::<Result<_>>()?;
        Ok(self
            .columns
            .iter()
            .filter(|c| !found.iter().any(|f| f.eq_ignore_ascii_case(c.name)))
            .copied()
            .collect())
    }

    /// The statement that lists the names of its indexes on MySQL (`index_name`): MySQL 8 has
    /// no `CREATE INDEX IF NOT EXISTS`, so an index added later is created after this probe.
    fn indexes_query(&self, prefix: &str) -> String {
        format!(
            "SELECT CAST(index_name AS CHAR) AS index_name FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = '{}'",
            self.named(prefix)
        )
    }

    /// The statement that lists its columns' names (`column_name`), on `kind`.
    fn columns_query(&self, kind: BackendKind, prefix: &str) -> String {
        let table = self.named(prefix);
        match kind {
            BackendKind::Postgres => format!(
                "SELECT column_name::text AS column_name FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = '{table}'"
            ),
            BackendKind::MySql => format!(
                "SELECT CAST(column_name AS CHAR) AS column_name FROM information_schema.columns \
                 WHERE table_schema = DATABASE() AND table_name = '{table}'"
            ),
            _ => format!("SELECT name AS column_name FROM pragma_table_info('{table}')"),
        }
    }
}

impl Schema {
    /// Every statement that creates its tables on `kind` with `prefix`.
    pub fn script(&self, kind: BackendKind, prefix: &str) -> Vec<String> {
        self.tables
            .iter()
            .flat_map(|t| t.create(kind, prefix))
            .collect()
    }

    /// Creates its tables where they do not exist, and adds the columns and indexes a table
    /// created by an older build lacks (an added column is nullable or has a default:
    /// [`Column::addable`]), in `tx`.
    ///
    /// # Errors
    /// Database errors (a concurrent creator's collision is one the seam retries).
    pub async fn create(&self, tx: &mut dyn Tx) -> Result<()> {
        let (kind, prefix) = (tx.kind(), tx.prefix().to_string());
        for statement in self.script(kind, &prefix) {
            tx.execute(&statement, &[]).await?;
        }
        for table in self.tables {
            for column in table.lacking(tx).await? {
                debug_assert!(column.addable(), "{} cannot be added", column.name);
                let add = format!(
                    "ALTER TABLE {} ADD COLUMN {}",
                    table.named(&prefix),
                    column.sql(kind)
                );
                tx.execute(&add, &[]).await?;
            }
            if kind == BackendKind::MySql && !table.indexes.is_empty() {
                let found = tx.fetch(&table.indexes_query(&prefix), &[]).await?;
                let found: Vec<String> = found
                    .iter()
                    .map(|row| row.text("index_name"))
                    .collect::<Result<_>>()?;
                for index in table.indexes {
                    let name = format!("{}_{}", table.named(&prefix), index.name);
                    if !found.iter().any(|f| f.eq_ignore_ascii_case(&name)) {
                        let create = format!(
                            "CREATE INDEX {name} ON {} ({})",
                            table.named(&prefix),
                            index.columns.join(", ")
                        );
                        tx.execute(&create, &[]).await?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The first of its tables that `tx`'s database lacks, or the first column a table made by
    /// an older build lacks (`table.column`), if any (with the prefix).
    ///
    /// # Errors
    /// Database errors other than a missing table.
    pub async fn missing(&self, tx: &mut dyn Tx) -> Result<Option<String>> {
        for table in self.tables {
            let name = table.named(tx.prefix());
            let probe = format!("SELECT 1 AS one FROM {name} WHERE 1 = 0");
            match tx.fetch(&probe, &[]).await {
                Ok(_) => {}
                Err(e) if e.is_missing_table() => return Ok(Some(name)),
                Err(e) => return Err(e),
            }
            if let Some(column) = table.lacking(tx).await?.first() {
                return Ok(Some(format!("{name}.{}", column.name)));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: Table = Table {
        name: "demo_kv",
        columns: &[
            Column::new("k", Kind::Name(191)),
            Column::new("v", Kind::Bytes),
            Column::new("rev", Kind::Int),
            Column::new("owner", Kind::Name(64)).null(),
            Column::new("at", Kind::Time),
        ],
        primary_key: &["k"],
        indexes: &[Index {
            name: "owner",
            columns: &["owner"],
        }],
    };

    #[test]
    fn one_table_three_dialects() {
        let pg = TABLE.create(BackendKind::Postgres, "t_");
        assert_eq!(pg.len(), 2);
        assert!(pg[0].starts_with("CREATE TABLE IF NOT EXISTS t_demo_kv ("));
        assert!(pg[0].contains("k TEXT COLLATE \"C\" NOT NULL"));
        assert!(pg[0].contains("owner TEXT COLLATE \"C\" NULL"));
        assert!(pg[0].contains("at TIMESTAMPTZ NOT NULL"));
        assert!(pg[0].contains("PRIMARY KEY (k)"));
        assert_eq!(
            pg[1],
            "CREATE INDEX IF NOT EXISTS t_demo_kv_owner ON t_demo_kv (owner)"
        );

        let my = TABLE.create(BackendKind::MySql, "t_");
        assert_eq!(my.len(), 1, "MySQL's indexes come with the table");
        assert!(my[0].contains("k VARCHAR(191) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL"));
        assert!(my[0].contains("v LONGBLOB NOT NULL"));
        assert!(my[0].contains("at DATETIME(6) NOT NULL"));
        assert!(my[0].contains("INDEX t_demo_kv_owner (owner)"));
        assert!(my[0].ends_with(") ENGINE=InnoDB"));

        let lite = TABLE.create(BackendKind::Sqlite, "t_");
        assert!(lite[0].contains("v BLOB NOT NULL") && lite[0].contains("at TEXT NOT NULL"));
        assert!(TABLE.create(BackendKind::Memory, "t_").is_empty());
    }
}
