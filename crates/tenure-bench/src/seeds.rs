//! The polled-upsert leader election tenure is compared with ("the seeds' SQL" in the reports:
//! the statement the project started from, as orchestrators commonly run it): every candidate
//! runs one upsert every second, then asks whether it is the leader. A holder silent for longer
//! than the timeout is replaced. This file is the whole of it.
//!
//! `tenure-bench seed-candidate` is one such candidate, as a process of its own (so that it can
//! be SIGKILLed like `tenure run`); it stamps the instant it first finds itself leader.

use crate::db::{with_pool, Engine, Target};
use crate::procs::{append_stamp, mono_ns, Stamp};
use std::path::Path;
use std::time::Duration;

/// The election's table; MariaDB exactly as it was first written (a `timestamp`: whole seconds).
pub(crate) fn create_table(engine: Engine, table: &str) -> String {
    match engine {
        Engine::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {table} (anchor tinyint(3) unsigned NOT NULL, \
             service_id varchar(128) NOT NULL, \
             last_seen_active timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP, \
             PRIMARY KEY (anchor)) ENGINE=InnoDB"
        ),
        Engine::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {table} (anchor smallint NOT NULL PRIMARY KEY, \
             service_id varchar(128) NOT NULL, \
             last_seen_active timestamptz NOT NULL DEFAULT now())"
        ),
        Engine::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {table} (anchor INTEGER NOT NULL PRIMARY KEY, \
             service_id TEXT NOT NULL, last_seen_active TEXT NOT NULL)"
        ),
    }
}

/// The statement every candidate runs every second, with a timeout of `timeout_s` seconds.
/// MariaDB: the original statement (its `IF`s see the columns already assigned, left to right).
/// PostgreSQL and SQLite: the equivalent `INSERT … ON CONFLICT DO UPDATE … WHERE`.
pub(crate) fn upsert(engine: Engine, table: &str, timeout_s: u64) -> String {
    match engine {
        Engine::MySql => format!(
            "insert ignore into {table} (anchor, service_id, last_seen_active) \
             values (1, ?, now()) on duplicate key update \
             service_id = if(last_seen_active < now() - interval {timeout_s} second, \
             values(service_id), service_id), \
             last_seen_active = if(service_id = values(service_id), \
             values(last_seen_active), last_seen_active)"
        ),
        Engine::Postgres => format!(
            "INSERT INTO {table} (anchor, service_id, last_seen_active) VALUES (1, $1, now()) \
             ON CONFLICT (anchor) DO UPDATE SET service_id = excluded.service_id, \
             last_seen_active = excluded.last_seen_active \
             WHERE {table}.service_id = excluded.service_id \
             OR {table}.last_seen_active < now() - interval '{timeout_s} seconds'"
        ),
        Engine::Sqlite => format!(
            "INSERT INTO {table} (anchor, service_id, last_seen_active) \
             VALUES (1, ?1, strftime('%Y-%m-%d %H:%M:%f', 'now')) \
             ON CONFLICT (anchor) DO UPDATE SET service_id = excluded.service_id, \
             last_seen_active = excluded.last_seen_active \
             WHERE service_id = excluded.service_id \
             OR last_seen_active < strftime('%Y-%m-%d %H:%M:%f', 'now', '-{timeout_s} seconds')"
        ),
    }
}

/// The election's "am I the leader?".
pub(crate) fn am_i_leader(engine: Engine, table: &str) -> String {
    let p = if engine == Engine::Postgres {
        "$1"
    } else {
        "?"
    };
    format!("SELECT count(*) AS is_leader FROM {table} WHERE anchor = 1 AND service_id = {p}")
}

// === seed 004: `cluster_lock`, a lock with an expiry ===

/// Seed 004's lock table (`cluster_lock`: the lock's name, its expiry, the owner's id and
/// name), with times at the engine's finest resolution (the seed's `timestamp`: a release and
/// the next take within one tick would otherwise find the lock not yet expired).
pub(crate) fn cluster_lock_table(engine: Engine, t: &str) -> String {
    match engine {
        Engine::MySql => format!(
            "CREATE TABLE IF NOT EXISTS {t} (lock_name varchar(32) NOT NULL PRIMARY KEY, \
             expiry_date_time datetime(6) NOT NULL, owner_id varchar(32) NULL, \
             owner_name varchar(32) NULL) ENGINE=InnoDB"
        ),
        Engine::Postgres => format!(
            "CREATE TABLE IF NOT EXISTS {t} (lock_name varchar(32) PRIMARY KEY, \
             expiry_date_time timestamptz NOT NULL, owner_id varchar(32), \
             owner_name varchar(32))"
        ),
        Engine::Sqlite => format!(
            "CREATE TABLE IF NOT EXISTS {t} (lock_name TEXT PRIMARY KEY, \
             expiry_date_time TEXT NOT NULL, owner_id TEXT, owner_name TEXT)"
        ),
    }
}

/// The engine's `now` for seed 004's statements (the database's clock, as the seed asks).
fn cluster_lock_now(engine: Engine) -> &'static str {
    match engine {
        Engine::MySql => "UTC_TIMESTAMP(6)",
        Engine::Postgres => "clock_timestamp()",
        Engine::Sqlite => "strftime('%Y-%m-%d %H:%M:%f', 'now')",
    }
}

/// Seed 004's "define all possible locks": the row of `name` (the benchmark's own `lock-N`:
/// no quoting needed), free.
pub(crate) fn cluster_lock_insert(engine: Engine, t: &str, name: &str) -> String {
    let now = cluster_lock_now(engine);
    let verb = match engine {
        Engine::MySql => "INSERT IGNORE",
        Engine::Postgres => "INSERT",
        Engine::Sqlite => "INSERT OR IGNORE",
    };
    let tail = match engine {
        Engine::Postgres => " ON CONFLICT DO NOTHING",
        _ => "",
    };
    format!("{verb} INTO {t} (lock_name, expiry_date_time) VALUES ('{name}', {now}){tail}")
}

/// Seed 004's two statements, (take, release). take: parameters owner id, owner name, lock
/// name, owner id; one row changed means taken. release: parameters lock name, owner id.
pub(crate) fn cluster_lock_statements(engine: Engine, t: &str) -> (String, String) {
    let now = cluster_lock_now(engine);
    let p = |n: usize| match engine {
        Engine::Postgres => format!("${n}"),
        Engine::MySql => "?".to_string(),
        Engine::Sqlite => format!("?{n}"),
    };
    let later = match engine {
        Engine::MySql => format!("{now} + INTERVAL 60 SECOND"),
        Engine::Postgres => format!("{now} + interval '60 seconds'"),
        Engine::Sqlite => "strftime('%Y-%m-%d %H:%M:%f', 'now', '+60 seconds')".to_string(),
    };
    (
        format!(
            "UPDATE {t} SET expiry_date_time = {later}, owner_id = {}, owner_name = {} \
             WHERE lock_name = {} AND (expiry_date_time < {now} OR owner_id = {})",
            p(1),
            p(2),
            p(3),
            p(4)
        ),
        format!(
            "UPDATE {t} SET expiry_date_time = {now}, owner_id = NULL, owner_name = NULL \
             WHERE lock_name = {} AND owner_id = {}",
            p(1),
            p(2)
        ),
    )
}

/// Creates the election's table for `target`.
pub(crate) async fn prepare(target: &Target) -> Result<(), String> {
    let pool = target.raw_pool(1).await.map_err(|e| e.to_string())?;
    let table = format!("{}service_election", target.prefix);
    pool.execute(&create_table(target.engine, &table))
        .await
        .map_err(|e| e.to_string())?;
    pool.execute(&format!("DELETE FROM {table}"))
        .await
        .map_err(|e| e.to_string())?;
    pool.close().await;
    Ok(())
}

/// One candidate, polling every second from a random phase, until killed.
pub(crate) async fn candidate(
    target: &Target,
    me: &str,
    timeout_s: u64,
    stamps: &Path,
) -> Result<(), String> {
    let pool = target.raw_pool(1).await.map_err(|e| e.to_string())?;
    let table = format!("{}service_election", target.prefix);
    let upsert = upsert(target.engine, &table, timeout_s);
    let check = am_i_leader(target.engine, &table);
    let phase = Duration::from_millis(rand::random::<u64>() % 1000);
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + phase, Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leading = false;
    loop {
        tick.tick().await;
        let outcome: Result<i64, sqlx::Error> = with_pool!(&pool, p => async {
            sqlx::query(&upsert).bind(me).execute(p).await?;
            let row = sqlx::query(&check).bind(me).fetch_one(p).await?;
            sqlx::Row::try_get::<i64, _>(&row, "is_leader")
        }.await);
        match outcome {
            Ok(n) if n > 0 && !leading => {
                leading = true;
                let stamp = Stamp {
                    event: "start".into(),
                    mono_ns: mono_ns(),
                    pid: nix::unistd::getpid().as_raw(),
                    supervisor: nix::unistd::getpid().as_raw(),
                    token: "-".into(),
                };
                append_stamp(stamps, &stamp).map_err(|e| e.to_string())?;
            }
            Ok(n) => leading = n > 0,
            Err(e) => eprintln!("seed candidate {me}: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_statement_is_kept_on_mariadb() {
        let s = upsert(Engine::MySql, "t", 2);
        assert!(s.starts_with("insert ignore into t"));
        assert!(s.contains("if(last_seen_active < now() - interval 2 second"));
        let pg = upsert(Engine::Postgres, "t", 2);
        assert!(pg.contains("ON CONFLICT (anchor) DO UPDATE"));
        assert!(pg.contains("t.last_seen_active < now() - interval '2 seconds'"));
        assert!(upsert(Engine::Sqlite, "t", 3).contains("'-3 seconds'"));
        assert!(am_i_leader(Engine::Postgres, "t").ends_with("service_id = $1"));
        let (take, release) = cluster_lock_statements(Engine::Postgres, "cluster_lock");
        assert!(take.contains(
            "WHERE lock_name = $3 AND (expiry_date_time < clock_timestamp() OR owner_id = $4)"
        ));
        assert!(release.contains("owner_id = NULL, owner_name = NULL"));
        let (take, _) = cluster_lock_statements(Engine::MySql, "c");
        assert_eq!(take.matches('?').count(), 4);
    }
}
