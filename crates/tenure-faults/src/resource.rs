//! The protected resources: one register table with two rows, written by the leaders.
//!
//! Each lease the nodes hold (the election, or each lock and semaphore permit of the lock
//! workload) has a **slot** of two rows. Row `2·slot + 1` is the **fenced** register: written
//! inside a transaction that first calls the backend's `fence` for the writer's term. Row
//! `2·slot + 2` is the **negative control**: the same write on the writer's belief alone. Every write records the write it replaced (`prev_*`), read back
//! in the same transaction while the row is locked, so the history shows each resource's full
//! order of writes and the checker can see a lower term land after a higher one.

use crate::event::Resource;
use std::sync::Arc;
use std::time::Duration;
use tenure::backend::mysql::MySqlBackend;
use tenure::backend::postgres::PostgresBackend;
use tenure::backend::sqlite::SqliteBackend;
use tenure::{BackendKind, Store, StoreOptions};

/// The write a register held before an accepted write replaced it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prev {
    pub node: String,
    pub term: u64,
    pub seq: u64,
}

/// A node's connection, with the engine's own transaction type behind it.
#[derive(Clone)]
pub enum Db {
    Postgres(Arc<PostgresBackend>),
    MySql(Arc<MySqlBackend>),
    Sqlite(Arc<SqliteBackend>),
}

/// The `CREATE TABLE` of the register table and the two rows of each of `slots`, for the runner.
pub fn setup_sql(kind: BackendKind, table: &str, slots: u32) -> Vec<String> {
    let text = if kind == BackendKind::MySql {
        "VARCHAR(64)"
    } else {
        "TEXT"
    };
    let mut sql = vec![format!(
        "CREATE TABLE {table} (id INTEGER PRIMARY KEY, node {text} NOT NULL, term BIGINT NOT NULL, \
         seq BIGINT NOT NULL, prev_node {text} NOT NULL, prev_term BIGINT NOT NULL, \
         prev_seq BIGINT NOT NULL)"
    )];
    for id in 1..=2 * i64::from(slots) {
        sql.push(format!(
            "INSERT INTO {table} VALUES ({id}, '', 0, 0, '', 0, 0)"
        ));
    }
    sql
}

fn row(slot: u32, resource: Resource) -> i64 {
    2 * i64::from(slot)
        + match resource {
            Resource::Fenced => 1,
            Resource::Unfenced => 2,
        }
}

/// The write: `SET prev = current, current = new` (MySQL assigns left to right, the others
/// from the old row; both read the old values here), then the read-back of `prev`.
fn statements(kind: BackendKind, table: &str) -> (String, String) {
    let p = |n: usize| {
        if kind == BackendKind::Postgres {
            format!("${n}")
        } else {
            "?".to_string()
        }
    };
    (
        format!(
            "UPDATE {table} SET prev_node = node, prev_term = term, prev_seq = seq, \
             node = {}, term = {}, seq = {} WHERE id = {}",
            p(1),
            p(2),
            p(3),
            p(4)
        ),
        format!(
            "SELECT prev_node, prev_term, prev_seq FROM {table} WHERE id = {}",
            p(1)
        ),
    )
}

impl Db {
    /// Connects to `url` with tenure's own backend (so `fence` is available) and returns it with
    /// a [`Store`] over the same pool. `epochs: false` mints every term in epoch zero
    /// ([`StoreOptions::without_epochs`]: the negative control of an asynchronous failover).
    pub async fn connect(
        url: &str,
        timeout: Duration,
        epochs: bool,
    ) -> tenure::Result<(Db, Store)> {
        let mut options = StoreOptions::default().timeout(timeout);
        if !epochs {
            options = options.without_epochs();
        }
        Ok(match BackendKind::check_url(url)? {
            BackendKind::Postgres => {
                let b = Arc::new(PostgresBackend::connect(url, &options).await?);
                (Db::Postgres(b.clone()), Store::from_backend(b, timeout))
            }
            BackendKind::MySql => {
                let b = Arc::new(MySqlBackend::connect(url, &options).await?);
                (Db::MySql(b.clone()), Store::from_backend(b, timeout))
            }
            BackendKind::Sqlite => {
                let b = Arc::new(SqliteBackend::connect(url, &options).await?);
                (Db::Sqlite(b.clone()), Store::from_backend(b, timeout))
            }
            other => {
                return Err(tenure::Error::BadUrl {
                    url: url.to_string(),
                    reason: format!("no fault-injection support for {other:?}"),
                })
            }
        })
    }

    /// Writes `(node, term, seq)` into `resource` of `slot`. The fenced register first checks
    /// the lease with `fence` in the same transaction; `inside` runs in the transaction after
    /// that check and before the write (the SQLite stop-in-transaction fault uses it).
    pub async fn write(
        &self,
        table: &str,
        slot: u32,
        resource: Resource,
        lease: (&str, &str),
        write: (&str, u64, u64),
        inside: impl FnOnce(),
    ) -> Result<Prev, String> {
        macro_rules! write_with {
            ($backend:expr, $kind:expr) => {{
                let backend = $backend;
                let (update, select) = statements($kind, table);
                // PostgreSQL: as tenure begins its own (behind PgBouncer with the store's
                // timeouts, SET LOCAL; the statements unnamed there). SQLite: a plain BEGIN.
                let named = !backend.transaction_pooler();
                let mut tx = if $kind == BackendKind::Postgres {
                    backend.begin().await.map_err(|e| e.to_string())?
                } else {
                    backend.pool().begin().await.map_err(|e| e.to_string())?
                };
                if resource == Resource::Fenced {
                    backend
                        .fence(&mut tx, lease.0, lease.1, write.1)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                inside();
                sqlx::query(&update)
                    .persistent(named)
                    .bind(write.0)
                    .bind(i64::try_from(write.1).expect("a term fits in BIGINT"))
                    .bind(i64::try_from(write.2).expect("a sequence number fits in BIGINT"))
                    .bind(row(slot, resource))
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| e.to_string())?;
                let (node, term, seq): (String, i64, i64) = sqlx::query_as(&select)
                    .persistent(named)
                    .bind(row(slot, resource))
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(|e| e.to_string())?;
                tx.commit().await.map_err(|e| e.to_string())?;
                Ok(Prev {
                    node,
                    term: u64::try_from(term).unwrap_or(0),
                    seq: u64::try_from(seq).unwrap_or(0),
                })
            }};
        }
        match self {
            Db::Postgres(b) => write_with!(b, BackendKind::Postgres),
            Db::MySql(b) => write_with!(b, BackendKind::MySql),
            Db::Sqlite(b) => write_with!(b, BackendKind::Sqlite),
        }
    }
}

impl Db {
    /// Runs one statement outside any transaction (the runner's setup; behind PgBouncer in one
    /// of its own, unnamed).
    pub async fn execute(&self, sql: &str) -> Result<(), String> {
        let done = match self {
            Db::Postgres(b) if b.transaction_pooler() => async {
                let mut tx = b.begin().await.map_err(|e| e.to_string())?;
                sqlx::query(sql)
                    .persistent(false)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| e.to_string())?;
                tx.commit().await.map_err(|e| e.to_string())
            }
            .await
            .map_err(sqlx::Error::Protocol),
            Db::Postgres(b) => sqlx::query(sql).execute(b.pool()).await.map(drop),
            Db::MySql(b) => sqlx::query(sql).execute(b.pool()).await.map(drop),
            Db::Sqlite(b) => sqlx::query(sql).execute(b.pool()).await.map(drop),
        };
        done.map_err(|e| format!("{sql}: {e}"))
    }
}
