//! The three databases: their URLs, raw sqlx pools for the baselines, the server-side counters
//! read as deltas, and the removal of a run's tables.

use sqlx::mysql::{MySqlConnectOptions, MySqlPool, MySqlPoolOptions};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Row;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

/// A native sqlx pool of one engine (the Any driver would add overhead the library does not
/// have, which would flatter it against the raw-SQL baseline).
#[derive(Clone)]
pub(crate) enum Pool {
    Pg(PgPool),
    My(MySqlPool),
    Lite(SqlitePool),
}

/// Runs `$body` with `$p` bound to the engine's own pool (the body is compiled per engine).
macro_rules! with_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            $crate::db::Pool::Pg($p) => $body,
            $crate::db::Pool::My($p) => $body,
            $crate::db::Pool::Lite($p) => $body,
        }
    };
}
pub(crate) use with_pool;

impl Pool {
    pub(crate) async fn close(&self) {
        with_pool!(self, p => p.close().await)
    }

    /// Runs `sql` (no parameters, no result).
    pub(crate) async fn execute(&self, sql: &str) -> Result<(), sqlx::Error> {
        with_pool!(self, p => sqlx::query(sql).execute(p).await.map(|_| ()))
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    Postgres,
    MySql,
    Sqlite,
}

impl Engine {
    pub(crate) fn parse(s: &str) -> Option<Engine> {
        match s.trim() {
            "postgres" | "postgresql" | "pg" => Some(Engine::Postgres),
            "mysql" | "mariadb" => Some(Engine::MySql),
            "sqlite" => Some(Engine::Sqlite),
            _ => None,
        }
    }

    pub(crate) fn title(self) -> &'static str {
        match self {
            Engine::Postgres => "PostgreSQL",
            Engine::MySql => "MariaDB",
            Engine::Sqlite => "SQLite",
        }
    }

    pub(crate) fn key(self) -> &'static str {
        match self {
            Engine::Postgres => "postgres",
            Engine::MySql => "mysql",
            Engine::Sqlite => "sqlite",
        }
    }
}

/// One database under test, with the table prefix of this run.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub engine: Engine,
    pub url: String,
    /// tenure's tables are `<prefix>lease`, … ; the baselines' `<prefix>raw_lock`, ….
    pub prefix: String,
}

impl Target {
    /// A native sqlx pool of `max` connections for the baselines, configured as tenure
    /// configures its own: MySQL family in READ COMMITTED, SQLite in WAL with
    /// `synchronous=FULL`.
    pub(crate) async fn raw_pool(&self, max: u32) -> Result<Pool, sqlx::Error> {
        let timeout = Duration::from_secs(10);
        Ok(match self.engine {
            Engine::Postgres => Pool::Pg(
                PgPoolOptions::new()
                    .max_connections(max)
                    .acquire_timeout(timeout)
                    .connect(&self.url)
                    .await?,
            ),
            Engine::MySql => {
                let opts =
                    MySqlConnectOptions::from_str(&self.url.replacen("mariadb://", "mysql://", 1))?;
                Pool::My(
                    MySqlPoolOptions::new()
                        .max_connections(max)
                        .acquire_timeout(timeout)
                        .after_connect(|conn, _| {
                            Box::pin(async move {
                                sqlx::Executor::execute(
                                    conn,
                                    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
                                )
                                .await?;
                                Ok(())
                            })
                        })
                        .connect_with(opts)
                        .await?,
                )
            }
            Engine::Sqlite => {
                let opts = SqliteConnectOptions::from_str(&self.url)?
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(5));
                Pool::Lite(
                    SqlitePoolOptions::new()
                        .max_connections(max)
                        .acquire_timeout(timeout)
                        .connect_with(opts)
                        .await?,
                )
            }
        })
    }

    /// The lease table of tenure for this run.
    pub(crate) fn lease_table(&self) -> String {
        format!("{}lease", self.prefix)
    }
}

/// Server-side counters, read before and after a window.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Counters {
    /// PostgreSQL: `scans` (`seq_scan + idx_scan` of one table: an `IN` list of n names
    /// counts n index scans), `writes` (its `n_tup_upd + n_tup_ins`) and the database's `xact_commit`.
    /// MariaDB: the server's `questions`, `com_update` and `com_commit`.
    pub values: Vec<(String, i64)>,
}

impl Counters {
    /// `after - before`, per counter.
    pub(crate) fn delta(&self, before: &Counters) -> Counters {
        Counters {
            values: self
                .values
                .iter()
                .map(|(k, v)| {
                    let b = before
                        .values
                        .iter()
                        .find(|(bk, _)| bk == k)
                        .map_or(0, |(_, b)| *b);
                    (k.clone(), v - b)
                })
                .collect(),
        }
    }
}

/// Reads the counters of `table` (PostgreSQL) or the server's (MariaDB); SQLite has none.
///
/// PostgreSQL publishes table statistics at the end of each transaction, with up to a second's
/// delay (`stats_fetch_consistency`): callers wait a moment before reading.
pub(crate) async fn counters(pool: &Pool, table: &str) -> Counters {
    let mut values = Vec::new();
    match pool {
        Pool::Pg(pool) => {
            let q = "SELECT (COALESCE(seq_scan, 0) + COALESCE(idx_scan, 0))::BIGINT AS scans, \
                     (n_tup_upd + n_tup_ins)::BIGINT AS writes FROM pg_stat_user_tables \
                     WHERE relname = $1";
            if let Ok(row) = sqlx::query(q).bind(table).fetch_one(pool).await {
                values.push(("scans".into(), row.try_get("scans").unwrap_or(0)));
                values.push(("writes".into(), row.try_get("writes").unwrap_or(0)));
            }
            let q = "SELECT xact_commit::BIGINT AS c FROM pg_stat_database \
                     WHERE datname = current_database()";
            if let Ok(row) = sqlx::query(q).fetch_one(pool).await {
                values.push(("xact_commit".into(), row.try_get("c").unwrap_or(0)));
            }
        }
        Pool::My(pool) => {
            let q = "SELECT CAST(VARIABLE_NAME AS CHAR) AS n, CAST(VARIABLE_VALUE AS SIGNED) AS v \
                     FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME IN \
                     ('QUESTIONS', 'COM_UPDATE', 'COM_COMMIT')";
            if let Ok(rows) = sqlx::query(q).fetch_all(pool).await {
                for row in rows {
                    let name: String = row.try_get("n").unwrap_or_default();
                    values.push((name.to_ascii_lowercase(), row.try_get("v").unwrap_or(0)));
                }
            }
        }
        Pool::Lite(_) => {}
    }
    Counters { values }
}

/// Drops every table of this run (tenure's, its layers' and the baselines': every table whose
/// name begins with the run's prefix) and, on MySQL, its procedures.
pub(crate) async fn drop_tables(target: &Target) {
    let Ok(pool) = target.raw_pool(1).await else {
        return;
    };
    let (tables, cascade) = match target.engine {
        Engine::Postgres => (
            "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema() \
             AND left(tablename, $1::int) = $2",
            " CASCADE",
        ),
        Engine::MySql => (
            "SELECT CAST(table_name AS CHAR) FROM information_schema.tables \
             WHERE table_schema = DATABASE() AND LEFT(table_name, ?) = ?",
            "",
        ),
        Engine::Sqlite => (
            "SELECT name FROM sqlite_master WHERE type = 'table' AND substr(name, 1, ?) = ?",
            "",
        ),
    };
    for table in prefixed(&pool, tables, &target.prefix).await {
        let _ = pool
            .execute(&format!("DROP TABLE IF EXISTS {table}{cascade}"))
            .await;
    }
    if target.engine == Engine::MySql {
        let routines = "SELECT CAST(routine_name AS CHAR) FROM information_schema.routines \
                        WHERE routine_schema = DATABASE() AND LEFT(routine_name, ?) = ?";
        for routine in prefixed(&pool, routines, &target.prefix).await {
            let _ = pool
                .execute(&format!("DROP PROCEDURE IF EXISTS {routine}"))
                .await;
        }
    }
    pool.close().await;
}

/// The names a catalog query `sql` answers for `prefix` (its parameters: the prefix's length,
/// the prefix); none if it fails.
async fn prefixed(pool: &Pool, sql: &str, prefix: &str) -> Vec<String> {
    let len = i64::try_from(prefix.len()).unwrap_or(i64::MAX);
    with_pool!(pool, p => sqlx::query_scalar(sql).bind(len).bind(prefix).fetch_all(p).await)
        .unwrap_or_default()
}

/// The SQLite URL of a file in `dir`.
pub(crate) fn sqlite_url(dir: &Path, file: &str) -> String {
    format!("sqlite://{}", dir.join(file).display())
}

/// The server's version, for the report.
pub(crate) async fn version(target: &Target) -> String {
    let Ok(pool) = target.raw_pool(1).await else {
        return "unreachable".into();
    };
    let q = match target.engine {
        Engine::Sqlite => "SELECT 'SQLite ' || sqlite_version()",
        Engine::MySql => "SELECT CONCAT('MariaDB/MySQL ', VERSION())",
        Engine::Postgres => "SELECT version()",
    };
    let v = with_pool!(&pool, p => sqlx::query(q)
        .fetch_one(p)
        .await
        .and_then(|r| r.try_get::<String, _>(0)))
    .unwrap_or_else(|e| format!("unknown ({e})"));
    pool.close().await;
    v
}
