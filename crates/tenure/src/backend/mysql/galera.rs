//! Galera (MariaDB's multi-primary cluster): recognised at connect, and a warning when tenure's
//! own writes show that the lease rows are written through more than one node.
//!
//! On one Galera node tenure works as on a single server: the row lock serialises every
//! decision, and a replicated takeover aborts a local transaction that conflicts with it. Written
//! through *several* nodes, a row lock on one node does not hold back a write on another until
//! commit-time certification: a `fence` taken on node A (a shared lock, which Galera does not
//! replicate) does not stop a takeover committed through node B, so a fenced write can land after
//! the lease moved. So every tenure process must write through the same node (HAProxy's first
//! available server, as the `ha` fault profile does, or one node's address).
//!
//! tenure cannot see the other processes' nodes, but it sees the symptom: a transaction of its
//! own aborted by a conflicting write that another node replicated (a brute-force abort or a
//! failed certification, both answered as a deadlock, 1213 / SQLSTATE 40001). A single node
//! serialises tenure's one-row transactions on the row lock and answers none.

use sqlx::{MySqlPool, Row};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How often the conflict warning may repeat.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The Galera node a store writes through.
#[derive(Debug)]
pub(super) struct Galera {
    /// `wsrep_node_name`.
    node: String,
    /// When the conflict warning was last logged.
    warned_at: Mutex<Option<Instant>>,
}

impl Galera {
    /// The node behind `pool`, if it is a Galera node with replication on (`wsrep_on`); `None`
    /// for a plain server, MySQL included (which has no such variables).
    pub(super) async fn detect(pool: &MySqlPool) -> sqlx::Result<Option<Galera>> {
        let rows =
            sqlx::query("SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_node_name')")
                .fetch_all(pool)
                .await?;
        let variables = rows
            .iter()
            .map(|row| Ok((row.try_get::<String, _>(0)?, row.try_get::<String, _>(1)?)))
            .collect::<sqlx::Result<Vec<(String, String)>>>()?;
        let value = |name: &str| {
            variables
                .iter()
                .find(|(key, _)| key.eq_ignore_ascii_case(name))
                .map(|(_, value)| value.clone())
        };
        if !value("wsrep_on").is_some_and(|on| on.eq_ignore_ascii_case("ON")) {
            return Ok(None);
        }
        Ok(Some(Galera {
            node: value("wsrep_node_name").unwrap_or_default(),
            warned_at: Mutex::new(None),
        }))
    }

    /// The warning logged once at connect.
    pub(super) fn announce(&self, url: &str) {
        tracing::warn!(
            url,
            node = %self.node,
            "this MariaDB server is a Galera node: tenure's locks and fences hold only if every \
             tenure process writes through the same node (HAProxy's first available server, or \
             one node's address); a fence on one node does not hold back a takeover written \
             through another"
        );
    }

    /// A transaction on lease `name` was aborted as a deadlock: on Galera, a conflicting write
    /// replicated from another node. Warns (at most once a minute per store).
    pub(super) fn conflict(&self, name: &str, error: &sqlx::Error) {
        if !is_deadlock(error) {
            return;
        }
        let now = Instant::now();
        let mut warned_at = self.warned_at.lock().unwrap_or_else(|e| e.into_inner());
        if warned_at.is_some_and(|at| now.duration_since(at) < WARN_EVERY) {
            return;
        }
        *warned_at = Some(now);
        tracing::warn!(
            name,
            node = %self.node,
            error = %error,
            "writes to this lease are spread across Galera nodes: a write replicated from \
             another node aborted tenure's transaction here. Point every tenure process at the \
             same node; until then a fenced write can land after a takeover"
        );
    }
}

/// MySQL's deadlock answer (1213, SQLSTATE 40001), which Galera also gives to a transaction
/// aborted by a replicated write or a failed certification.
fn is_deadlock(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().as_deref() == Some("40001"))
}
