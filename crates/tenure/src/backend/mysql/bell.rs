//! MySQL's doorbell: how a follower learns of a release at once, with what the server offers.
//!
//! MySQL has no LISTEN/NOTIFY, but it has named locks (`GET_LOCK`), held by a session and freed
//! when it lets go or ends. Each lease name has a bell, a named lock `t:<prefix>:<hash>` (the
//! hash covers the database's name too: named locks are one namespace per server, and two
//! databases on one server with the same prefix must not ring each other's bells):
//!
//! - the process that leads holds its bells on one connection of its own (taken when it
//!   acquires, taken again on a renewal if it could not be then, given back right after the
//!   release commits) — only a store that listens for changes (an elector, a watch) does,
//!   so that a process of locks alone pays nothing;
//! - a follower whose campaign found the lease held waits in `GET_LOCK` on a connection of its
//!   own (at most [`MAX_WAITERS`] names at once per store), once someone holds the bell
//!   (`IS_USED_LOCK`, looked for up to [`HELD_WITHIN`]); granted, it lets go at once and wakes
//!   its electors of that name. A bell never held while it looked may mean the release came
//!   first (the follower's campaign raced it): then the lease row decides, and a lease free
//!   now wakes the electors once.
//!
//! The bell is never the lease: it only wakes, and the lease row decides. A crashed leader's
//! connection frees its bells, which wakes the followers once for nothing (the lease is still
//! live); they find the bell unheld and poll until the next leader holds it. Every failure
//! (a dropped connection, the cap, a server that refuses named locks — Galera does, and the
//! engine starts no bells there; any other that answers "not supported" turns them off) costs
//! a follower at most one poll interval, never safety: it still campaigns on its renew
//! interval.

use crate::model::{Effect, Op};
use crate::records::Applied;
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::{ConnectOptions, Connection};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc, watch};

/// How many names one store's followers wait on at once (one connection each); beyond, poll.
pub(super) const MAX_WAITERS: usize = 8;
/// How long one `GET_LOCK` waits before the follower looks again.
const WAIT_S: i64 = 30;
/// How often the holder checks that its connection (and so its bells) is still there.
const HOLDER_CHECK: Duration = Duration::from_secs(60);
/// How long a follower looks for the bell to be held, and how often: the leader takes its bell
/// just after its campaign commits, on a connection of its own. If the bell was never held
/// meanwhile, the release may have come before the follower began to wait (its campaign raced
/// the leader's release): the lease row then decides, and a lease free now wakes the follower
/// once. At most one such wake per wait, so a follower that cannot take a free-looking lease
/// (holding off for a better candidate) campaigns no more often than this.
const HELD_WITHIN: Duration = Duration::from_secs(2);
const HELD_STEP: Duration = Duration::from_millis(100);

/// One store's bells: the holder task and the waiters.
pub(super) struct Bells {
    connect: MySqlConnectOptions,
    belfry: Belfry,
    holder: mpsc::UnboundedSender<Hold>,
    waiting: Arc<Mutex<HashSet<String>>>,
    wake: broadcast::Sender<String>,
    /// Set when the server refused a named lock as not supported: no bells from then on.
    off: Arc<AtomicBool>,
    /// Set when the store closes: the holder gives its bells back and ends, waiters stop.
    closed: watch::Sender<bool>,
    /// Set once a bell was asked to be taken: until then a release has none to give back, and
    /// a process of locks alone sends its holder task nothing at all.
    took: AtomicBool,
}

/// What the holder task is asked: take or give back `name`'s bell for `candidate`.
enum Hold {
    Take(String, String),
    Give(String, String),
}

impl Bells {
    /// Starts the holder task (on the current runtime); connections open when first needed.
    pub(super) fn start(connect: MySqlConnectOptions, prefix: &str) -> Bells {
        let connect = connect.disable_statement_logging();
        let belfry = Belfry {
            database: connect.get_database().unwrap_or_default().to_string(),
            prefix: prefix.to_string(),
        };
        let (holder, asks) = mpsc::unbounded_channel();
        let off = Arc::new(AtomicBool::new(false));
        let closed = watch::Sender::new(false);
        tokio::spawn(hold(
            connect.clone(),
            belfry.clone(),
            asks,
            off.clone(),
            closed.subscribe(),
        ));
        let (wake, _) = broadcast::channel(1024);
        Bells {
            connect,
            belfry,
            holder,
            waiting: Arc::new(Mutex::new(HashSet::new())),
            wake,
            off,
            closed,
            took: AtomicBool::new(false),
        }
    }

    /// The store is closing: the holder gives its bells back (its connection closes) and
    /// ends, and every waiter stops waiting (its connection closes too).
    pub(super) fn close(&self) {
        self.closed.send_replace(true);
    }

    /// The names whose bell rang, from now on.
    pub(super) fn subscribe(&self) -> broadcast::Receiver<String> {
        self.wake.subscribe()
    }

    /// Tells this store's own listeners of the topics its committed transaction signalled (a
    /// layer's rows: etcd's writes): named locks carry only leases across processes, so other
    /// processes hear of these at their poll, but this one need not wait for it (its etcd
    /// watch hub, its lock recipes' waiters). A wake-up is a hint to read again, never the data.
    pub(super) fn echo(&self, topics: &[String]) {
        for topic in topics {
            let _ = self.wake.send(topic.clone());
        }
    }

    /// Hears of a committed operation: a leader takes or gives back its bell, a follower that
    /// found the lease held waits on it.
    pub(super) fn applied(&self, name: &str, op: &Op, applied: &Applied) {
        if self.off.load(Ordering::Relaxed) {
            return;
        }
        // Only a store that listens (an elector, a watch) rings or waits: a process of locks
        // alone pays nothing.
        let listens = self.wake.receiver_count() > 0;
        let ask = match (op, &applied.effect) {
            (Op::Campaign { candidate, .. }, Effect::Acquired { .. } | Effect::Renewed)
                if listens =>
            {
                self.took.store(true, Ordering::Relaxed);
                Hold::Take(name.to_string(), candidate.clone())
            }
            (Op::Release { candidate, .. }, Effect::Released | Effect::NotHolder)
                if self.took.load(Ordering::Relaxed) =>
            {
                Hold::Give(name.to_string(), candidate.clone())
            }
            (Op::Campaign { .. }, Effect::Unavailable) => return self.wait(name),
            _ => return,
        };
        // The task ends with the runtime, or when the store closes: then nobody is asked.
        let _ = self.holder.send(ask);
    }

    /// Waits on `name`'s bell in a task of its own, unless nobody listens, it already waits on
    /// that name, or it waits on [`MAX_WAITERS`] names.
    fn wait(&self, name: &str) {
        if self.wake.receiver_count() == 0 {
            return;
        }
        {
            let mut waiting = self.waiting.lock().unwrap_or_else(|e| e.into_inner());
            if waiting.len() >= MAX_WAITERS || !waiting.insert(name.to_string()) {
                return;
            }
        }
        let (connect, bell) = (self.connect.clone(), self.belfry.bell(name));
        let (waiting, wake, name) = (self.waiting.clone(), self.wake.clone(), name.to_string());
        let mut closed = self.closed.subscribe();
        let free = format!(
            "SELECT COUNT(*) FROM {}lease WHERE name = ? AND expires_at <= UTC_TIMESTAMP(6) \
             AND NOT paused AND handover_to IS NULL",
            self.belfry.prefix
        );
        tokio::spawn(async move {
            let waited = tokio::select! {
                waited = wait_once(&connect, &bell, &free, &name) => waited,
                () = closing(&mut closed) => return,
            };
            let rang = match waited {
                Ok(rang) => rang,
                Err(e) => {
                    tracing::debug!(bell, error = %e, "could not wait on the doorbell; polling");
                    false
                }
            };
            waiting
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
            if rang {
                let _ = wake.send(name);
            }
        });
    }
}

/// Where a store's bells ring: its database's tables of its prefix. Named locks are one
/// namespace per server, so the database is part of every bell.
#[derive(Clone, Debug)]
pub(super) struct Belfry {
    pub(super) database: String,
    pub(super) prefix: String,
}

impl Belfry {
    /// The named lock of `name`'s bell: at most 64 characters, as MySQL allows (the prefix is
    /// at most 41), the same in every process and version (FNV-1a of the database's name, a
    /// NUL, and the lease's name). Two bells that share a hash only cost a spurious wake-up:
    /// the bell never is the lease.
    pub(super) fn bell(&self, name: &str) -> String {
        let bytes = self.database.bytes().chain([0]).chain(name.bytes());
        let hash = bytes.fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("t:{}:{hash:016x}", self.prefix)
    }
}

/// One wait: `true` if the bell was held (within [`HELD_WITHIN`]) and then let go (a release,
/// or its holder's end), or if it never was and the lease `name` is free now (`free`: the
/// count of its row when acquirable).
async fn wait_once(
    connect: &MySqlConnectOptions,
    bell: &str,
    free: &str,
    name: &str,
) -> sqlx::Result<bool> {
    let mut conn = connect.connect().await?;
    let give_up = tokio::time::Instant::now() + HELD_WITHIN;
    loop {
        let held: Option<i64> = sqlx::query_scalar("SELECT IS_USED_LOCK(?)")
            .bind(bell)
            .fetch_one(&mut conn)
            .await?;
        if held.is_some() {
            break;
        }
        if tokio::time::Instant::now() >= give_up {
            let free: i64 = sqlx::query_scalar(free)
                .bind(name)
                .fetch_one(&mut conn)
                .await?;
            conn.close().await?;
            return Ok(free > 0);
        }
        tokio::time::sleep(HELD_STEP).await;
    }
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, ?)")
        .bind(bell)
        .bind(WAIT_S)
        .fetch_one(&mut conn)
        .await?;
    // Let go at once (closing the connection would too): the next follower's turn.
    if got == Some(1) {
        sqlx::query("SELECT RELEASE_LOCK(?)")
            .bind(bell)
            .execute(&mut conn)
            .await?;
    }
    conn.close().await?;
    Ok(got == Some(1))
}

/// Ends once the store closes (or its bells are gone).
async fn closing(closed: &mut watch::Receiver<bool>) {
    let _ = closed.wait_for(|&closed| closed).await;
}

/// The holder task: takes and gives back this store's bells on one connection, in the order
/// asked; checks every [`HOLDER_CHECK`] that the connection (and so the bells) is still there,
/// and if not, takes them again on a new one.
async fn hold(
    connect: MySqlConnectOptions,
    belfry: Belfry,
    mut asks: mpsc::UnboundedReceiver<Hold>,
    off: Arc<AtomicBool>,
    mut closed: watch::Receiver<bool>,
) {
    let mut holder = Holder {
        connect,
        belfry,
        conn: None,
        held: HashMap::new(),
        off,
    };
    let mut check = tokio::time::interval(HOLDER_CHECK);
    loop {
        tokio::select! {
            ask = asks.recv() => match ask {
                Some(Hold::Take(name, who)) => holder.take(name, who).await,
                Some(Hold::Give(name, who)) => holder.give(&name, &who).await,
                None => return,
            },
            _ = check.tick() => holder.check().await,
            () = closing(&mut closed) => {
                // Closing the connection gives every bell back.
                if let Some(conn) = holder.conn.take() {
                    let _ = conn.close().await;
                }
                return;
            }
        }
    }
}

/// The holder's connection and the bells it holds (name → the candidate that leads).
struct Holder {
    connect: MySqlConnectOptions,
    belfry: Belfry,
    conn: Option<MySqlConnection>,
    held: HashMap<String, String>,
    off: Arc<AtomicBool>,
}

impl Holder {
    async fn take(&mut self, name: String, who: String) {
        if let Some(holder) = self.held.get_mut(&name) {
            // Held already (by this connection): another candidate of this process leads now.
            *holder = who;
            return;
        }
        let bell = self.belfry.bell(&name);
        // Without waiting: a follower's waiter holds it only for an instant, and a stale
        // holder elsewhere may keep it; the next renewal asks again.
        match self.query("SELECT GET_LOCK(?, 0)", &bell).await {
            Ok(Some(1)) => {
                self.held.insert(name, who);
            }
            Ok(_) => tracing::debug!(bell, "doorbell held elsewhere; taken on a later renewal"),
            Err(e) => tracing::debug!(bell, error = %e, "could not take the doorbell"),
        }
    }

    async fn give(&mut self, name: &str, who: &str) {
        if self.held.get(name).map(String::as_str) != Some(who) {
            return;
        }
        self.held.remove(name);
        let bell = self.belfry.bell(name);
        if let Err(e) = self.query("SELECT RELEASE_LOCK(?)", &bell).await {
            tracing::debug!(bell, error = %e, "could not ring the doorbell");
        }
    }

    /// Checks the connection; after a loss, takes every bell again on a new one.
    async fn check(&mut self) {
        if self.held.is_empty() {
            return;
        }
        let alive = match &mut self.conn {
            Some(conn) => conn.ping().await.is_ok(),
            None => false,
        };
        if !alive {
            self.conn = None;
            let held = std::mem::take(&mut self.held);
            for (name, who) in held {
                self.take(name, who).await;
            }
        }
    }

    /// Runs `sql` with the bell's name on the holder connection (opened if needed). A failure
    /// drops the connection, and with it every bell it held.
    async fn query(&mut self, sql: &str, bell: &str) -> sqlx::Result<Option<i64>> {
        if self.conn.is_none() {
            self.conn = Some(self.connect.connect().await?);
        }
        let conn = self.conn.as_mut().expect("just opened");
        let result = sqlx::query_scalar(sql).bind(bell).fetch_one(conn).await;
        if let Err(e) = &result {
            if not_supported(e) {
                tracing::info!(error = %e, "this server refuses named locks: no doorbell, followers poll");
                self.off.store(true, Ordering::Relaxed);
            }
            self.conn = None;
            self.held.clear();
        }
        result
    }
}

/// MySQL's ER_NOT_SUPPORTED_YET (1235), as a Galera node answers GET_LOCK.
fn not_supported(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|d| d.number() == 1235)
}

#[cfg(test)]
mod tests {
    use super::Belfry;

    fn bell(database: &str, prefix: &str, name: &str) -> String {
        let belfry = Belfry {
            database: database.to_string(),
            prefix: prefix.to_string(),
        };
        belfry.bell(name)
    }

    #[test]
    fn a_bell_name_fits_mysql_and_tells_names_apart() {
        let long = bell(&"d".repeat(64), &"p".repeat(41), &"n".repeat(191));
        assert!(long.len() <= 64, "{} characters", long.len());
        assert_ne!(bell("app", "tenure_", "a"), bell("app", "tenure_", "b"));
        assert_ne!(bell("app", "tenure_", "a"), bell("app", "other_", "a"));
        assert_eq!(
            bell("app", "tenure_", "billing"),
            bell("app", "tenure_", "billing")
        );
    }

    /// Named locks are server-wide: staging and production on one server, with the same
    /// prefix and lease name, ring different bells.
    #[test]
    fn two_databases_on_one_server_ring_different_bells() {
        assert_ne!(
            bell("staging", "tenure_", "billing"),
            bell("production", "tenure_", "billing")
        );
        // The boundary between the database's name and the lease's is part of the hash.
        assert_ne!(bell("ab", "tenure_", "c"), bell("a", "tenure_", "bc"));
    }
}
