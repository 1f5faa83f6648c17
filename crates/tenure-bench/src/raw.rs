//! The limit on this machine: the least SQL that does a lock's work — one statement that takes
//! a row lease if it is free or expired and raises its term (the fencing token), one that
//! releases it — autocommitted, on the same engine and driver as tenure.

use crate::db::{Engine, Pool, Target};
use sqlx::Row;

pub(crate) struct Raw {
    pool: Pool,
    take: String,
    release: String,
    /// Seed 004's `cluster_lock` rather than the least SQL: no term, taken when one row changed.
    seed: bool,
}

fn create(engine: Engine, t: &str) -> String {
    match engine {
        Engine::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {t} (name TEXT COLLATE \"C\" NOT NULL PRIMARY KEY, \
             holder TEXT COLLATE \"C\", term BIGINT NOT NULL, \
             acquired_at TIMESTAMPTZ NOT NULL, expires_at TIMESTAMPTZ NOT NULL)"
        ),
        Engine::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {t} (name VARCHAR(191) COLLATE utf8mb4_bin NOT NULL \
             PRIMARY KEY, holder VARCHAR(191) COLLATE utf8mb4_bin NULL, term BIGINT NOT NULL, \
             acquired_at DATETIME(6) NOT NULL, expires_at DATETIME(6) NOT NULL) \
             ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
        ),
        Engine::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {t} (name TEXT NOT NULL PRIMARY KEY, holder TEXT, \
             term INTEGER NOT NULL, acquired_at TEXT NOT NULL, expires_at TEXT NOT NULL)"
        ),
    }
}

fn insert(engine: Engine, t: &str, name: &str) -> String {
    // Names are the benchmark's own (`lock-N`): no quoting needed.
    match engine {
        Engine::Postgres => format!(
            "INSERT INTO {t} VALUES ('{name}', NULL, 0, clock_timestamp(), clock_timestamp()) \
             ON CONFLICT DO NOTHING"
        ),
        Engine::MySql => format!(
            "INSERT IGNORE INTO {t} VALUES ('{name}', NULL, 0, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6))"
        ),
        Engine::Sqlite => format!(
            "INSERT OR IGNORE INTO {t} VALUES ('{name}', NULL, 0, \
             strftime('%Y-%m-%d %H:%M:%f', 'now'), strftime('%Y-%m-%d %H:%M:%f', 'now'))"
        ),
    }
}

/// (take, release). take: parameters holder, name; answers the new term when taken.
/// release: parameters name, holder, term.
pub(crate) fn statements(engine: Engine, t: &str) -> (String, String) {
    match engine {
        Engine::Postgres => (
            format!(
                "UPDATE {t} SET holder = $1, term = term + 1, acquired_at = clock_timestamp(), \
                 expires_at = clock_timestamp() + interval '60 seconds' WHERE name = $2 \
                 AND (holder IS NULL OR expires_at <= clock_timestamp()) RETURNING term"
            ),
            format!(
                "UPDATE {t} SET holder = NULL, expires_at = clock_timestamp() \
                 WHERE name = $1 AND holder = $2 AND term = $3"
            ),
        ),
        // No UPDATE … RETURNING: the new term comes back through LAST_INSERT_ID(expr).
        Engine::MySql => (
            format!(
                "UPDATE {t} SET holder = ?, term = LAST_INSERT_ID(term + 1), \
                 acquired_at = UTC_TIMESTAMP(6), \
                 expires_at = UTC_TIMESTAMP(6) + INTERVAL 60 SECOND WHERE name = ? \
                 AND (holder IS NULL OR expires_at <= UTC_TIMESTAMP(6))"
            ),
            format!(
                "UPDATE {t} SET holder = NULL, expires_at = UTC_TIMESTAMP(6) \
                 WHERE name = ? AND holder = ? AND term = ?"
            ),
        ),
        Engine::Sqlite => (
            format!(
                "UPDATE {t} SET holder = ?1, term = term + 1, \
                 acquired_at = strftime('%Y-%m-%d %H:%M:%f', 'now'), \
                 expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now', '+60 seconds') \
                 WHERE name = ?2 AND (holder IS NULL \
                 OR expires_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')) RETURNING term"
            ),
            format!(
                "UPDATE {t} SET holder = NULL, expires_at = strftime('%Y-%m-%d %H:%M:%f', 'now') \
                 WHERE name = ?1 AND holder = ?2 AND term = ?3"
            ),
        ),
    }
}

impl Raw {
    /// Creates the table and the rows `names` (free), with a pool of `connections`.
    pub(crate) async fn prepare(
        target: &Target,
        connections: u32,
        names: &[String],
    ) -> Result<Raw, String> {
        let t = format!("{}raw_lock", target.prefix);
        let e = target.engine;
        let rows: Vec<String> = names.iter().map(|n| insert(e, &t, n)).collect();
        let (take, release) = statements(e, &t);
        Raw::open(
            target,
            connections,
            &create(e, &t),
            &rows,
            (take, release),
            false,
        )
        .await
    }

    /// Seed 004's lock (`crate::seeds::cluster_lock_statements`): its table and the rows
    /// `names`, with a pool of `connections`.
    pub(crate) async fn prepare_seed(
        target: &Target,
        connections: u32,
        names: &[String],
    ) -> Result<Raw, String> {
        use crate::seeds::{cluster_lock_insert, cluster_lock_statements, cluster_lock_table};
        let t = format!("{}cluster_lock", target.prefix);
        let e = target.engine;
        let rows: Vec<String> = names
            .iter()
            .map(|n| cluster_lock_insert(e, &t, n))
            .collect();
        let statements = cluster_lock_statements(e, &t);
        Raw::open(
            target,
            connections,
            &cluster_lock_table(e, &t),
            &rows,
            statements,
            true,
        )
        .await
    }

    /// A pool of `connections` on which `table` was created and `rows` inserted.
    async fn open(
        target: &Target,
        connections: u32,
        table: &str,
        rows: &[String],
        (take, release): (String, String),
        seed: bool,
    ) -> Result<Raw, String> {
        let pool = target
            .raw_pool(connections)
            .await
            .map_err(|e| e.to_string())?;
        for sql in std::iter::once(table).chain(rows.iter().map(String::as_str)) {
            pool.execute(sql).await.map_err(|e| e.to_string())?;
        }
        Ok(Raw {
            pool,
            take,
            release,
            seed,
        })
    }

    /// Takes `name` for `me`: the new term, or `None` if held.
    pub(crate) async fn take(&self, name: &str, me: &str) -> Result<Option<i64>, sqlx::Error> {
        if self.seed {
            // The seed knows no term: one row changed means taken (its own words).
            let changed = crate::db::with_pool!(&self.pool, p => sqlx::query(&self.take)
                .bind(me)
                .bind(me)
                .bind(name)
                .bind(me)
                .execute(p)
                .await?
                .rows_affected());
            return Ok((changed == 1).then_some(0));
        }
        match &self.pool {
            // No `RETURNING` on MySQL: the statement hands the term over as LAST_INSERT_ID.
            Pool::My(p) => {
                let done = sqlx::query(&self.take)
                    .bind(me)
                    .bind(name)
                    .execute(p)
                    .await?;
                Ok((done.rows_affected() == 1)
                    .then_some(i64::try_from(done.last_insert_id()).ok())
                    .flatten())
            }
            pool => crate::db::with_pool!(pool, p => {
                let row = sqlx::query(&self.take)
                    .bind(me)
                    .bind(name)
                    .fetch_optional(p)
                    .await?;
                row.map(|r| r.try_get::<i64, _>("term")).transpose()
            }),
        }
    }

    /// Releases tenure `term` of `name` held by `me`.
    pub(crate) async fn release(&self, name: &str, me: &str, term: i64) -> Result<(), sqlx::Error> {
        if self.seed {
            return crate::db::with_pool!(&self.pool, p => sqlx::query(&self.release)
                .bind(name)
                .bind(me)
                .execute(p)
                .await
                .map(|_| ()));
        }
        crate::db::with_pool!(&self.pool, p => sqlx::query(&self.release)
            .bind(name)
            .bind(me)
            .bind(term)
            .execute(p)
            .await
            .map(|_| ()))
    }

    pub(crate) async fn close(&self) {
        self.pool.close().await;
    }
}
