//! Waiting marks: whether anyone could be waiting for a lock's release, so that a lock's
//! release sends its NOTIFY only then.
//!
//! PostgreSQL serializes the commits of transactions that notify (one database-wide lock,
//! held through the commit's WAL flush): with eight tasks cycling locks, a NOTIFY on every
//! release halved the throughput (`docs/benchmarks.md`). Yet a NOTIFY only matters to a
//! process that listens. So a store whose process listens — a lock or semaphore waiting, an
//! elector, a watch, `tenure serve` — holds a *mark*: a shared session-level advisory lock
//! `(MARK_CLASS, hash of the channel)` on a connection of its own, while anyone in the process
//! subscribes to changes. A lock's release (`one_statement.rs`) sends its NOTIFY only where
//! `pg_locks` shows a granted mark on its channel; an election, and every operation of the
//! model's transaction, always notify.
//!
//! The mark is never the lease and never safety: it only decides whether a wake-up is sent.
//! A release that ran just before the mark was granted sent none; so once the mark is granted
//! (again, after its connection was lost) the store wakes all its subscribers for any name
//! ([`ANY`]): each looks at the lease once more, which a release committed before — or, holding
//! the row lock at its check, committing now — already freed. Whatever fails here (a connection
//! lost, a user's exclusive advisory lock on the same key) costs a waiter at most its poll
//! interval, as without notifications.

use crate::changes::ANY;
use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{ConnectOptions, Connection};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, Notify};
use tokio::task::JoinHandle;

/// The first key of every mark (`'tenu'`): advisory locks with two `int4` keys live apart from
/// those with one `bigint` key, which is what applications mostly use.
pub(super) const MARK_CLASS: i32 = 0x7465_6e75;
/// How often a held mark's connection is checked (a lost one is taken again, with a wake-up)
/// and whether its subscribers are gone (then the mark is let go).
const CHECK: Duration = Duration::from_secs(5);
/// How often an idle task looks again (a subscriber also wakes it at once).
const IDLE: Duration = Duration::from_secs(1);
/// The longest a connect or a statement of the task may take (then: lost, taken again).
const STEP: Duration = Duration::from_secs(10);

/// The second key of the marks of `channel` (the table prefix's `lease`): FNV-1a, positive.
pub(super) fn mark_key(channel: &str) -> i32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in channel.bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    i32::try_from(hash & 0x7fff_ffff).expect("31 bits fit an i32")
}

/// The SQL condition that a mark of `channel` is held by some session of this database.
pub(super) fn marked_sql(channel: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = {MARK_CLASS} \
         AND objid = {} AND objsubid = 2 AND granted \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))",
        mark_key(channel)
    )
}

/// A store's mark: the task that holds it while the store has subscribers.
pub(super) struct Marks {
    wanted: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Drop for Marks {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Marks {
    /// Starts the task (on the current runtime); it connects when first wanted.
    pub(super) fn start(
        connect: PgConnectOptions,
        channel: &str,
        out: broadcast::Sender<String>,
    ) -> Marks {
        let wanted = Arc::new(Notify::new());
        let key = mark_key(channel);
        let connect = connect.disable_statement_logging();
        let task = tokio::spawn(hold(connect, key, out, wanted.clone()));
        Marks { wanted, task }
    }

    /// Someone subscribed: take the mark now if it is not held.
    pub(super) fn want(&self) {
        self.wanted.notify_one();
    }

    /// Stops the task: its connection closes, and with it the mark (the store is closing).
    pub(super) fn stop(&self) {
        self.task.abort();
    }
}

/// Holds the mark while `out` has subscribers, lets it go when they are gone.
async fn hold(
    connect: PgConnectOptions,
    key: i32,
    out: broadcast::Sender<String>,
    wanted: Arc<Notify>,
) {
    let mut conn: Option<PgConnection> = None;
    let mut marked = false;
    let mut warned = false;
    loop {
        let want = out.receiver_count() > 0;
        let step = async {
            match (want, marked) {
                (true, false) => take(&mut conn, &connect, key).await,
                (false, true) => give_back(&mut conn, key).await.map(|()| false),
                (true, true) => check(&mut conn).await.map(|()| true),
                (false, false) => Ok(false),
            }
        };
        let step = tokio::time::timeout(STEP, step)
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut));
        match step {
            Ok(now) => {
                if now && !marked {
                    // Releases before the mark sent no NOTIFY: look again.
                    let _ = out.send(ANY.to_string());
                }
                if !now && want && !warned {
                    warned = true;
                    tracing::warn!(
                        class = MARK_CLASS,
                        key,
                        "an exclusive advisory lock holds tenure's waiting mark: lock releases \
                         will not wake this process's waiters, which poll instead"
                    );
                }
                marked = now;
            }
            Err(e) => {
                tracing::debug!(error = %e, "waiting mark lost; taking it again");
                conn = None;
                marked = false;
            }
        }
        let pause = match (marked, want) {
            (true, _) => CHECK,
            // Lost or refused: try again soon.
            (false, true) => Duration::from_millis(200),
            (false, false) => IDLE,
        };
        tokio::select! {
            () = wanted.notified() => {}
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// Takes the mark (shared: every listening process holds its own); `false` if a session holds
/// the key exclusively.
async fn take(
    conn: &mut Option<PgConnection>,
    connect: &PgConnectOptions,
    key: i32,
) -> Result<bool, sqlx::Error> {
    if conn.is_none() {
        *conn = Some(connect.connect().await?);
    }
    let conn = conn.as_mut().expect("connected above");
    sqlx::query_scalar("SELECT pg_try_advisory_lock_shared($1, $2)")
        .bind(MARK_CLASS)
        .bind(key)
        .fetch_one(conn)
        .await
}

async fn give_back(conn: &mut Option<PgConnection>, key: i32) -> Result<(), sqlx::Error> {
    let Some(conn) = conn.as_mut() else {
        return Ok(());
    };
    sqlx::query("SELECT pg_advisory_unlock_shared($1, $2)")
        .bind(MARK_CLASS)
        .bind(key)
        .execute(conn)
        .await
        .map(drop)
}

async fn check(conn: &mut Option<PgConnection>) -> Result<(), sqlx::Error> {
    match conn.as_mut() {
        Some(conn) => conn.ping().await,
        None => Err(sqlx::Error::PoolClosed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_positive_and_differ_by_prefix() {
        assert!(mark_key("tenure_lease") >= 0);
        assert_ne!(mark_key("tenure_lease"), mark_key("other_lease"));
        assert_eq!(mark_key("a"), mark_key("a"));
        assert!(marked_sql("tenure_lease").contains(&mark_key("tenure_lease").to_string()));
    }
}
