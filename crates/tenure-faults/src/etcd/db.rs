//! The runner's side of the register: creating and dropping the tables, the last write (what
//! the nemesis waits on), and the history the checker reads.

use super::check::Write;
use super::child::{self, Conn};
use sqlx::Row;
use tenure::BackendKind;

/// The last committed write, if any: (seq, holder, revision).
pub(crate) type Last = Option<(i64, String, i64)>;

macro_rules! on_each {
    ($self:expr, $conn:ident => $body:expr) => {
        match $self {
            Conn::Postgres($conn) => $body,
            Conn::MySql($conn) => $body,
            Conn::Sqlite($conn) => $body,
        }
    };
}

impl Conn {
    /// Opens a connection of the runner (a SQLite file is created if missing).
    pub(crate) async fn admin(url: &str) -> Result<(Conn, BackendKind), String> {
        Conn::open(url, true)
            .await
            .map_err(|e| format!("{url}: {e}"))
    }

    pub(super) async fn execute(&mut self, sql: &str) -> Result<(), String> {
        on_each!(self, c => sqlx::raw_sql(sql).execute(&mut *c).await.map(|_| ()))
            .map_err(|e| format!("{sql}: {e}"))
    }

    /// Creates the tables of `table`.
    pub(crate) async fn create(&mut self, kind: BackendKind, table: &str) -> Result<(), String> {
        for sql in child::setup_sql(kind, table) {
            self.execute(&sql).await?;
        }
        Ok(())
    }

    /// Drops the tables of `table`.
    pub(crate) async fn drop_tables(&mut self, table: &str) -> Result<(), String> {
        for t in child::tables(table) {
            self.execute(&format!("DROP TABLE {t}")).await?;
        }
        Ok(())
    }

    pub(crate) async fn last(&mut self, table: &str) -> Result<Last, String> {
        let sql = format!("SELECT seq, holder, rev FROM {table}_hist ORDER BY seq DESC LIMIT 1");
        let row = on_each!(self, c => sqlx::query(&sql)
            .fetch_optional(&mut *c)
            .await
            .and_then(|r| r.map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?))).transpose()))
        .map_err(|e| e.to_string())?;
        Ok(row)
    }

    /// The highest revision `tenure serve`'s etcd has handed out on this database (its
    /// revision counter, `tenure_etcd_revision`, holds the current revision less one).
    pub(crate) async fn revision(&mut self) -> Result<i64, String> {
        let sql = "SELECT idx FROM tenure_etcd_revision WHERE id = 1";
        let idx: i64 = on_each!(self, c => sqlx::query_scalar(sql).fetch_one(&mut *c).await)
            .map_err(|e| format!("{sql}: {e}"))?;
        Ok(idx + 1)
    }

    /// Every committed write, and how many writes the fence refused.
    pub(crate) async fn history(&mut self, table: &str) -> Result<(Vec<Write>, usize), String> {
        let sql = format!("SELECT seq, holder, rev, phase FROM {table}_hist ORDER BY seq");
        let writes: Vec<Write> = on_each!(self, c => {
            let rows = sqlx::query(&sql).fetch_all(&mut *c).await;
            rows.and_then(|rows| {
                rows.iter()
                    .map(|r| {
                        Ok(Write {
                            seq: r.try_get(0)?,
                            holder: r.try_get(1)?,
                            rev: r.try_get(2)?,
                            phase: r.try_get(3)?,
                        })
                    })
                    .collect()
            })
        })
        .map_err(|e| e.to_string())?;
        let count = format!("SELECT COUNT(*) FROM {table}_refused");
        let refused: i64 = on_each!(self, c => sqlx::query_scalar(&count).fetch_one(&mut *c).await)
            .map_err(|e| e.to_string())?;
        Ok((writes, usize::try_from(refused).unwrap_or(0)))
    }
}
