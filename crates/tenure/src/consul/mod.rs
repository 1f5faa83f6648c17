//! Consul's leader-election API — sessions and a key/value store with `acquire` and `release`
//! — on tenure's tables, so that Consul clients (and anything that speaks HTTP, through
//! `tenure serve`) campaign, lock and fence on the database the service already has.
//!
//! A layer on the store's transaction seam (`backend/tx.rs`): its own folder, cargo feature
//! (`consul`), error type, statements and tables; [`Consul`] is its handle. Nothing below the
//! store knows it.
//!
//! # How it maps onto tenure
//! - A **lock on a key is the tenure lease of that name**: `?acquire=<session>` is a campaign
//!   by the session, decided by the same model as every other campaign, under the lease row's
//!   lock, by the database clock. So a key's **`LockIndex` is the lease's term**: it only goes
//!   up, it is a fencing token, and `tenure fence-sql`'s statement fences on it (candidate =
//!   the session id). `tenure status`, `leader`, `history`, `demote`, `pause` and the status
//!   page see and act on these locks like any other lease.
//! - A **session** is a row of `<prefix>consul_session`. It lives until its `expires_at` (the
//!   database's clock): a TTL session twice its TTL after its last renewal, as Consul's do
//!   ([`SESSION_TTL_MULTIPLIER`]: Patroni halves the TTL it asks for and believes its lock for
//!   the whole), a session without TTL as long as the node (the `tenure serve` instance) that
//!   created it keeps renewing it. The leases a session holds expire at the same instant as
//!   the session: a renewal renews both in one transaction. The shortest TTL accepted is the
//!   handle's [`session_ttl_min`](Consul::session_ttl_min) (Consul's 10 s by default); a TTL
//!   out of range is refused in Consul's words ([`Error::SessionTtl`]).
//! - When a session ends (destroyed, or expired and then reaped), each lock it held is released
//!   with Consul's **lock-delay**: nobody can acquire that key before the session's end plus
//!   its `LockDelay` (the lease's `expires_at`, exactly like `tenure demote`). With
//!   `Behavior = delete` its keys are deleted instead of unlocked. An explicit `?release=`
//!   has no lock-delay, as in Consul.
//! - Values live in `<prefix>consul_kv`; one counter row, `<prefix>consul_index`, gives every
//!   write its index (`CreateIndex`, `ModifyIndex`), as Consul's Raft index does. Every write
//!   locks that row first, so Consul writes are serialized; each is one transaction. Two more
//!   rows keep Consul's table indexes (the last change to a key, deletes included, and to the
//!   sessions), and `<prefix>consul_tombstone` the index of each deleted key for 15 minutes
//!   (Consul's graveyard).
//! - **A read answers with Consul's index for it** ([`Answer::index`], `X-Consul-Index`): one
//!   key's `ModifyIndex` (the keys' table index when it is missing), a prefix's highest
//!   `ModifyIndex` among its keys and its deleted keys' tombstones, the sessions' table index
//!   for session reads. A blocking query waits until that index passes the one it was given,
//!   so a watcher of one key wakes when that key changes, not when any key does. A write that
//!   changes nothing (a holder acquiring its lock again with the same value, a set to the same
//!   value) succeeds without moving any index, as Consul's.
//! - **The index moves whenever an answer changes**, also when the change was not a Consul
//!   write: a key whose lease tenure demoted, handed over at once or gave to another holder,
//!   or whose session's time ran out, is *stale*. A read that finds one settles it first
//!   ([`Request::Reap`], a write: the key forgets the session at a new `ModifyIndex`; an
//!   expired session's lease is released with its lock-delay from the session's end) and
//!   reads again; every write settles the keys it touches. A `?release=` counts only from a
//!   live session that holds the key's lock now, as an `?acquire=`.
//!
//! # What differs from Consul
//! Keys are tenure names (1..=191 bytes of UTF-8, no control characters), plus no `.` or `..`
//! segment. There are no agents, health checks or ACL policies; a TTL session does not
//! depend on its node.

mod api;
mod error;
pub mod go_duration;
mod rows;
mod rules;
pub(crate) mod statements;
mod validate;

pub use api::{
    Answer, Behavior, Entry, PutMode, Reply, Request, Session, SessionSpec, DEFAULT_LOCK_DELAY,
    MAX_LOCK_DELAY, MAX_SESSION_TTL, MAX_VALUE_BYTES, MIN_SESSION_TTL, SESSION_TTL_MULTIPLIER,
};
pub use error::{Error, Result};
pub use validate::{new_session_id, validate_key, validate_prefix, validate_spec};

use crate::backend::tx::{cell, Body, Outcome, Schema, Tx};
use crate::store::Store;
use rows::ConsulTx;
use rules::Ran;
use statements::Statements;

/// The topic of the layer's change signals: every write signals it at commit.
pub(crate) const TOPIC: &str = "consul";

/// Consul's sessions and keys on one store: the layer's handle. Cheap to clone.
///
/// ```
/// # #[tokio::main] async fn main() -> Result<(), tenure::consul::Error> {
/// # let dir = tempfile::tempdir().unwrap();
/// # let url = format!("sqlite://{}", dir.path().join("consul.db").display());
/// use tenure::consul::{Consul, PutMode, Reply, Request};
/// let consul = Consul::new(tenure::Store::connect(&url).await?);
/// let put = Request::Put {
///     key: "service/config".into(),
///     value: b"on".to_vec(),
///     flags: 0,
///     mode: PutMode::Set { cas: None },
/// };
/// assert_eq!(consul.request(&put, "me").await?.reply, Reply::Done(true));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Consul {
    store: Store,
    statements: cell::Statements<Statements>,
    /// The shortest session TTL it accepts.
    session_ttl_min: std::time::Duration,
}

impl Consul {
    /// The Consul layer on `store` (whose tables `Store::connect` created with the lease's),
    /// accepting session TTLs from Consul's default minimum, [`MIN_SESSION_TTL`].
    pub fn new(store: Store) -> Consul {
        Consul {
            store,
            statements: cell::Statements::default(),
            session_ttl_min: MIN_SESSION_TTL,
        }
    }

    /// The same handle accepting session TTLs from `min` (Consul's agent setting
    /// `session_ttl_min`, which deployments with short TTLs lower). A TTL session lives twice
    /// its TTL after each renewal, each renewal one write transaction.
    pub fn session_ttl_min(mut self, min: std::time::Duration) -> Consul {
        self.session_ttl_min = min;
        self
    }

    /// The shortest session TTL this handle accepts.
    pub fn min_session_ttl(&self) -> std::time::Duration {
        self.session_ttl_min
    }

    /// The store underneath.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Runs one request in one transaction, bounded by the store's timeout; `actor` goes into
    /// the history of the leases it changes. Keys, session specs and value sizes are checked
    /// first. A read that finds what changed without a write (a key whose lock tenure took, a
    /// session whose time ran out) settles it first ([`Request::Reap`], a write, which moves
    /// the index) and reads again, so that no answer changes at an index already answered;
    /// after three rounds of changes racing it, it answers what it read.
    ///
    /// # Errors
    /// [`Error::Store`] with [`crate::Error::Invalid`] for a bad key, spec or value (nothing
    /// is written); [`Error::SessionTtl`] for a session TTL out of range;
    /// [`Error::InvalidSession`] for an acquire by a session that does not exist or has ended; [`Error::Store`] for database errors and timeouts, after which the effect
    /// is unknown.
    pub async fn request(&self, request: &Request, actor: &str) -> Result<Answer> {
        validate::request(request, self.session_ttl_min)?;
        let mut rounds = 0;
        loop {
            match self.once(request, actor).await? {
                Ran::Answered(answer) => return Ok(answer),
                Ran::Unsettled(answer) if rounds == 3 => return Ok(answer),
                Ran::Unsettled(_) => {
                    rounds += 1;
                    let settler = if actor.is_empty() { "consul" } else { actor };
                    self.once(&Request::Reap { limit: 100 }, settler).await?;
                }
            }
        }
    }

    async fn once(&self, request: &Request, actor: &str) -> Result<Ran> {
        let mut body = Run {
            statements: &self.statements,
            request,
            actor,
            out: None,
        };
        self.store.transaction(&mut body).await?;
        body.out.unwrap_or_else(|| {
            Err(Error::Store(crate::error::Error::Unsupported(
                "a Consul request that ran no transaction",
            )))
        })
    }
}

/// One request as a transaction's body.
struct Run<'a> {
    statements: &'a cell::Statements<Statements>,
    request: &'a Request,
    actor: &'a str,
    /// What the last run answered, or why it refused (then rolled back).
    out: Option<Result<Ran>>,
}

#[async_trait::async_trait]
impl Body for Run<'_> {
    fn writes(&self) -> bool {
        self.request.writes()
    }

    fn op(&self) -> &'static str {
        "consul"
    }

    fn schema(&self) -> Option<&'static Schema> {
        Some(&statements::SCHEMA)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> crate::error::Result<Outcome> {
        let s = self
            .statements
            .get(tx, |tx| Statements::new(tx.prefix(), tx.dialect()));
        let mut rows = ConsulTx::new(tx, s);
        match rules::run(&mut rows, self.request, self.actor).await {
            Ok(ran) => {
                self.out = Some(Ok(ran));
                Ok(Outcome::Commit)
            }
            // The seam rolls back, and runs the body again after a transient conflict.
            Err(Error::Store(e)) => Err(e),
            Err(refused) => {
                self.out = Some(Err(refused));
                Ok(Outcome::Rollback)
            }
        }
    }
}
