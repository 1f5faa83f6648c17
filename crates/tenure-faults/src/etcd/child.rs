//! The command an `etcdctl lock` holder runs (`tenure-faults etcd-child`): two writes to the
//! register, `start` and `stop`, around its work, each in a transaction of its own on the
//! database `tenure serve` keeps etcd in — first the statement `tenure fence-sql --etcd`
//! printed, with `$ETCD_LOCK_KEY` and `$ETCD_LOCK_REV` (no row: the lock is gone, roll back,
//! record the refusal), then the register row locked, its next sequence number taken and the
//! write appended to the history table. The negative control runs without the fence.
//!
//! Each write's end is also appended to the holders' own log ([`HOLDERS_LOG`]), outside the
//! database: what the `ha` profile's failover scenario checks when the database loses commits.
//!
//! While it works between the two writes, a file `working-<client>` names it: the nemesis
//! strikes holders there (outside any transaction: a holder stopped inside one would keep
//! SQLite's write lock, or on a server the key's row, from everyone).

use sqlx::Connection;
use std::path::PathBuf;
use std::time::Duration;
use tenure::BackendKind;

/// What one holder's command does.
#[derive(Clone, Debug)]
pub struct ChildConfig {
    pub url: String,
    /// The tables' common name (`<table>_reg`, `<table>_hist`, `<table>_refused`).
    pub table: String,
    pub holder: String,
    pub client: usize,
    pub work: Duration,
    /// The fence statement (`tenure fence-sql --etcd`); `None`: the unfenced control.
    pub fence_sql: Option<String>,
    /// Where it says it is working.
    pub dir: PathBuf,
}

/// The tables of one run: the register (one row), the history of committed writes, the
/// writes the fence refused.
pub fn setup_sql(kind: BackendKind, table: &str) -> Vec<String> {
    let text = if kind == BackendKind::MySql {
        "VARCHAR(64)"
    } else {
        "TEXT"
    };
    vec![
        format!("CREATE TABLE {table}_reg (id INTEGER PRIMARY KEY, seq BIGINT NOT NULL)"),
        format!("INSERT INTO {table}_reg VALUES (1, 0)"),
        format!(
            "CREATE TABLE {table}_hist (seq BIGINT PRIMARY KEY, holder {text} NOT NULL, \
             rev BIGINT NOT NULL, phase {text} NOT NULL)"
        ),
        format!(
            "CREATE TABLE {table}_refused (holder {text} NOT NULL, rev BIGINT NOT NULL, \
             phase {text} NOT NULL)"
        ),
    ]
}

/// The tables' names, to drop them.
pub fn tables(table: &str) -> [String; 3] {
    [
        format!("{table}_reg"),
        format!("{table}_hist"),
        format!("{table}_refused"),
    ]
}

/// The statements of one write on `kind`: begin, lock the register, move it on, append.
struct Sql {
    begin: &'static str,
    lock: String,
    bump: String,
    append: String,
    refuse: String,
}

fn sql(kind: BackendKind, table: &str) -> Sql {
    let p = |n: usize| {
        if kind == BackendKind::Postgres {
            format!("${n}")
        } else {
            "?".into()
        }
    };
    let (begin, for_update) = match kind {
        // The write lock at once: the fence's no-op update and the register both need it.
        BackendKind::Sqlite => ("BEGIN IMMEDIATE", ""),
        _ => ("BEGIN", " FOR UPDATE"),
    };
    Sql {
        begin,
        lock: format!("SELECT seq FROM {table}_reg WHERE id = 1{for_update}"),
        bump: format!("UPDATE {table}_reg SET seq = {} WHERE id = 1", p(1)),
        append: format!(
            "INSERT INTO {table}_hist (seq, holder, rev, phase) VALUES ({}, {}, {}, {})",
            p(1),
            p(2),
            p(3),
            p(4)
        ),
        refuse: format!(
            "INSERT INTO {table}_refused (holder, rev, phase) VALUES ({}, {}, {})",
            p(1),
            p(2),
            p(3)
        ),
    }
}

/// Whether a write committed or the fence refused it.
#[derive(Debug, PartialEq, Eq)]
pub enum Written {
    Committed,
    Refused,
}

/// One write (`phase`) in a transaction of its own on `conn`.
macro_rules! write_on {
    ($conn:expr, $s:expr, $c:expr, $key:expr, $rev:expr, $phase:expr) => {{
        let (conn, s, c, key, rev, phase) = ($conn, $s, $c, $key, $rev, $phase);
        sqlx::raw_sql(s.begin).execute(&mut *conn).await?;
        let held = match &c.fence_sql {
            Some(fence) => sqlx::query(fence.trim_end_matches(';'))
                .bind(key)
                .bind(rev)
                .fetch_optional(&mut *conn)
                .await?
                .is_some(),
            None => true,
        };
        if !held {
            sqlx::raw_sql("ROLLBACK").execute(&mut *conn).await?;
            sqlx::query(&s.refuse)
                .bind(&c.holder)
                .bind(rev)
                .bind(phase)
                .execute(&mut *conn)
                .await?;
            return Ok(Written::Refused);
        }
        let seq: i64 = sqlx::query_scalar(&s.lock).fetch_one(&mut *conn).await?;
        sqlx::query(&s.bump)
            .bind(seq + 1)
            .execute(&mut *conn)
            .await?;
        sqlx::query(&s.append)
            .bind(seq + 1)
            .bind(&c.holder)
            .bind(rev)
            .bind(phase)
            .execute(&mut *conn)
            .await?;
        sqlx::raw_sql("COMMIT").execute(&mut *conn).await?;
        Ok(Written::Committed)
    }};
}

/// A connection of the child's engine (or the runner's: `db.rs`).
pub(crate) enum Conn {
    Postgres(sqlx::PgConnection),
    MySql(sqlx::MySqlConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl Conn {
    pub(super) async fn open(url: &str, create: bool) -> Result<(Conn, BackendKind), sqlx::Error> {
        if url.starts_with("postgres") {
            Ok((
                Conn::Postgres(sqlx::PgConnection::connect(url).await?),
                BackendKind::Postgres,
            ))
        } else if url.starts_with("mysql") || url.starts_with("mariadb") {
            Ok((
                Conn::MySql(sqlx::MySqlConnection::connect(url).await?),
                BackendKind::MySql,
            ))
        } else {
            use std::str::FromStr;
            // `tenure serve` writes the same file: wait for its write lock rather than fail.
            let options = sqlx::sqlite::SqliteConnectOptions::from_str(url)?
                .busy_timeout(Duration::from_secs(30))
                .create_if_missing(create);
            Ok((
                Conn::Sqlite(sqlx::SqliteConnection::connect_with(&options).await?),
                BackendKind::Sqlite,
            ))
        }
    }

    async fn write(
        &mut self,
        s: &Sql,
        c: &ChildConfig,
        key: &[u8],
        rev: i64,
        phase: &str,
    ) -> Result<Written, sqlx::Error> {
        match self {
            Conn::Postgres(conn) => write_on!(conn, s, c, key, rev, phase),
            Conn::MySql(conn) => write_on!(conn, s, c, key, rev, phase),
            Conn::Sqlite(conn) => write_on!(conn, s, c, key, rev, phase),
        }
    }
}

/// Runs one holder's command: `start`, the work, `stop`. Refused, it stops there (the lock
/// is gone): exit code 3 says so to the log.
pub async fn run(c: ChildConfig) -> Result<Written, String> {
    let key =
        std::env::var("ETCD_LOCK_KEY").map_err(|_| "no $ETCD_LOCK_KEY (run by etcdctl lock)")?;
    let rev: i64 = std::env::var("ETCD_LOCK_REV")
        .ok()
        .and_then(|r| r.parse().ok())
        .ok_or("no numeric $ETCD_LOCK_REV (run by etcdctl lock)")?;
    let (mut conn, kind) = Conn::open(&c.url, false).await.map_err(|e| e.to_string())?;
    let s = sql(kind, &c.table);
    let key = key.as_bytes();
    let refused = |e: sqlx::Error, phase: &str| format!("{phase} write at revision {rev}: {e}");
    let start = conn.write(&s, &c, key, rev, "start").await;
    note(&c, rev, "start", &start);
    if start.map_err(|e| refused(e, "start"))? == Written::Refused {
        return Ok(Written::Refused);
    }
    let working = c.dir.join(format!("working-{}", c.client));
    std::fs::write(&working, format!("{} {rev}", c.holder)).map_err(|e| e.to_string())?;
    tokio::time::sleep(c.work).await;
    // Gone before the transaction begins: a holder the nemesis found working is outside one.
    let _ = std::fs::remove_file(&working);
    let stop = conn.write(&s, &c, key, rev, "stop").await;
    note(&c, rev, "stop", &stop);
    stop.map_err(|e| refused(e, "stop"))
}

/// The holders' own log, outside the database (`holders.tsv`): one line per write as its
/// command saw it end — CLOCK_MONOTONIC (ns), holder, revision, phase, and `committed`,
/// `refused` or `error` — appended in one `write` (a line of this size is never interleaved).
/// A write the database later loses (a failover) stays here.
pub const HOLDERS_LOG: &str = "holders.tsv";

fn note(c: &ChildConfig, rev: i64, phase: &str, result: &Result<Written, sqlx::Error>) {
    use std::io::Write;
    let outcome = match result {
        Ok(Written::Committed) => "committed",
        Ok(Written::Refused) => "refused",
        Err(_) => "error",
    };
    let line = format!(
        "{}\t{}\t{rev}\t{phase}\t{outcome}\n",
        crate::clock::now_ns(),
        c.holder
    );
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(c.dir.join(HOLDERS_LOG));
    if let Ok(mut file) = file {
        let _ = file.write_all(line.as_bytes());
    }
}
