//! Consul's leader-election API — sessions and a key/value store with `acquire` and `release`
//! — on tenure's tables, so that Consul clients (and anything that speaks HTTP, through
//! `tenure serve`) campaign, lock and fence on the database the service already has.
//!
//! # How it maps onto tenure
//! - A **lock on a key is the tenure lease of that name**: `?acquire=<session>` is a campaign
//!   by the session, decided by the same model as every other campaign, under the lease row's
//!   lock, by the database clock. So a key's **`LockIndex` is the lease's term**: it only goes
//!   up, it is a fencing token, and `tenure fence-sql`'s statement fences on it (candidate =
//!   the session id). `tenure status`, `leader`, `history`, `demote`, `pause` and the status
//!   page see and act on these locks like any other lease.
//! - A **session** is a row of `<prefix>consul_session`. It lives until its `expires_at` (the
//!   database's clock): a TTL session exactly its TTL after its last renewal (Consul allows up
//!   to twice that), a session without TTL as long as the node (the `tenure serve` instance)
//!   that created it keeps renewing it. The leases a session holds expire at the same instant
//!   as the session: a renewal renews both in one transaction.
//! - When a session ends (destroyed, or expired and then reaped), each lock it held is released
//!   with Consul's **lock-delay**: nobody can acquire that key before the session's end plus
//!   its `LockDelay` (the lease's `expires_at`, exactly like `tenure demote`). With
//!   `Behavior = delete` its keys are deleted instead of unlocked. An explicit `?release=`
//!   has no lock-delay, as in Consul.
//! - Values live in `<prefix>consul_kv`; one counter row, `<prefix>consul_index`, gives every
//!   write its index (`CreateIndex`, `ModifyIndex`, `X-Consul-Index`). Every write locks that
//!   row first, so Consul writes are serialized; each is one transaction.
//!
//! # What differs from Consul
//! Keys are tenure names (1..=191 bytes of UTF-8, no control characters), plus no `.` or `..`
//! segment. There are no agents, health checks or ACL policies; a TTL session does not
//! depend on its node. `X-Consul-Index` is the store-wide index: a blocking query may return
//! when an unrelated key changed (Consul's clients handle that; its docs allow it).

mod rules;

use crate::model::DbTime;
use std::fmt;
use std::time::Duration;

pub(crate) use rules::{run, ConsulTx, EntryRow, LeaseState, SessionRow};

/// The shortest TTL a session may have (Consul's bound).
pub const MIN_SESSION_TTL: Duration = Duration::from_secs(10);
/// The longest TTL a session may have (Consul's bound).
pub const MAX_SESSION_TTL: Duration = Duration::from_secs(86_400);
/// The longest lock-delay (Consul's bound).
pub const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);
/// The lock-delay of a session that names none (Consul's default).
pub const DEFAULT_LOCK_DELAY: Duration = Duration::from_secs(15);
/// The largest value a key may hold (Consul's limit).
pub const MAX_VALUE_BYTES: usize = 512 * 1024;

/// What happens to the keys a session holds when the session ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Behavior {
    /// The locks are released (the values stay).
    Release,
    /// The keys are deleted.
    Delete,
}

impl Behavior {
    /// Consul's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Behavior::Release => "release",
            Behavior::Delete => "delete",
        }
    }

    /// Parses Consul's spelling.
    pub fn parse(text: &str) -> Option<Behavior> {
        match text {
            "release" => Some(Behavior::Release),
            "delete" => Some(Behavior::Delete),
            _ => None,
        }
    }
}

impl fmt::Display for Behavior {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A session to create.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSpec {
    /// A human-readable name (may be empty).
    pub name: String,
    /// The node it belongs to: the `tenure serve` instance that keeps a session without TTL.
    pub node: String,
    /// `None`: the session lives as long as its node renews it.
    pub ttl: Option<Duration>,
    /// How long its locks stay unavailable after it ends.
    pub lock_delay: Duration,
    /// What happens to its keys when it ends.
    pub behavior: Behavior,
}

/// A live session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Session {
    /// Its id (a UUID).
    pub id: String,
    /// Its name.
    pub name: String,
    /// Its node.
    pub node: String,
    /// Its TTL, if it has one.
    pub ttl: Option<Duration>,
    /// Its lock-delay.
    pub lock_delay: Duration,
    /// What happens to its keys when it ends.
    pub behavior: Behavior,
    /// The index at which it was created.
    pub create_index: u64,
    /// The index of its last change (renewals are not changes).
    pub modify_index: u64,
    /// When it ends unless renewed (database clock).
    pub expires_at: DbTime,
}

/// One key's entry, as Consul shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The key.
    pub key: String,
    /// The value (Consul shows an empty value as `null`).
    pub value: Vec<u8>,
    /// The client's flags.
    pub flags: u64,
    /// The session that holds the lock now, if any (a session that has ended holds nothing).
    pub session: Option<String>,
    /// The term of the key's lease as of its last acquisition through the KV API: the fencing
    /// token of the lock. 0 before the first.
    pub lock_index: u64,
    /// The index at which the key was created.
    pub create_index: u64,
    /// The index of the key's last change.
    pub modify_index: u64,
}

/// How a `PUT` treats the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PutMode {
    /// Sets the value; with `cas`, only if the key's `ModifyIndex` is that (0: only if absent).
    Set {
        /// The check-and-set index.
        cas: Option<u64>,
    },
    /// Takes the lock for the session (and sets the value) if it is free.
    Acquire(String),
    /// Gives up the session's lock (and sets the value) if it holds it.
    Release(String),
}

/// A request to the Consul layer. Every one runs in one transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Creates the session `id` from `spec`; one without TTL lives `node_lease` past each
    /// renewal by its node.
    CreateSession {
        /// The new session's id (the caller makes it: a random UUID).
        id: String,
        /// What to create.
        spec: SessionSpec,
        /// How long a session without TTL lives past each renewal of its node.
        node_lease: Duration,
    },
    /// Renews a TTL session and the locks it holds; `Reply::Session(None)` if it has ended.
    RenewSession(String),
    /// Ends a session; `Reply::Done(true)` even if it had ended already (as Consul).
    DestroySession(String),
    /// Reads one live session.
    Session(String),
    /// Reads the live sessions, of one node or all.
    Sessions(Option<String>),
    /// Reads one key, or (`recurse`) every key with that prefix.
    Get {
        /// The key or prefix.
        key: String,
        /// Every key that starts with `key`.
        recurse: bool,
    },
    /// Writes one key.
    Put {
        /// The key.
        key: String,
        /// The new value.
        value: Vec<u8>,
        /// The new flags.
        flags: u64,
        /// How the lock is treated.
        mode: PutMode,
    },
    /// Deletes one key or (`recurse`) every key with that prefix.
    Delete {
        /// The key or prefix.
        key: String,
        /// Every key that starts with `key`.
        recurse: bool,
        /// Only if the key's `ModifyIndex` is this (never with `recurse`; 0 deletes nothing).
        cas: Option<u64>,
    },
    /// A node's keep-alive: renews every session without TTL of `node` (and their locks) by
    /// `lease`.
    Heartbeat {
        /// The node (the `tenure serve` instance).
        node: String,
        /// How long they live past this renewal.
        lease: Duration,
    },
    /// Ends up to `limit` sessions whose time ran out, releasing (or deleting) what they held
    /// with their lock-delay counted from the instant they expired.
    Reap {
        /// The most sessions ended in one transaction.
        limit: u32,
    },
    /// Reads the store-wide index.
    Index,
}

impl Request {
    /// Whether the request may write (and so locks the index row).
    pub fn writes(&self) -> bool {
        !matches!(
            self,
            Request::Session(_) | Request::Sessions(_) | Request::Get { .. } | Request::Index
        )
    }
}

/// What a request returns besides the index.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// A session, or `None` if there is no such live session.
    Session(Option<Session>),
    /// Sessions.
    Sessions(Vec<Session>),
    /// Entries, sorted by key.
    Entries(Vec<Entry>),
    /// Whether a write took place (`PUT`, `DELETE`, destroy), as Consul's `true`/`false`.
    Done(bool),
    /// How many sessions a reap ended.
    Reaped(usize),
    /// An index read.
    Index,
}

/// A request's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The store-wide index after the request (`X-Consul-Index`).
    pub index: u64,
    /// The database's clock during the request.
    pub now: DbTime,
    /// What it returned.
    pub reply: Reply,
}

/// Why a Consul request was refused (before or while it ran; nothing was written).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refused {
    /// `?acquire=` with a session that does not exist or has ended (Consul answers 500).
    #[error("invalid session {0:?}: it does not exist or has ended")]
    InvalidSession(String),
    /// A session for a node this store does not keep (Consul: "Missing node registration").
    #[error("missing node registration: node {0:?} is not this tenure serve instance")]
    UnknownNode(String),
}

/// Checks a KV key: a tenure name (1..=191 bytes, no control characters) with no empty, `.`
/// or `..` segment other than a trailing `/` (a "folder" key).
///
/// # Errors
/// [`Error::Invalid`](crate::Error::Invalid) naming the key and the rule.
pub fn validate_key(key: &str) -> crate::Result<()> {
    crate::validate::name(key).map_err(|_| invalid_key(key))?;
    let body = key.strip_suffix('/').unwrap_or(key);
    if key.starts_with('/')
        || body
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(invalid_key(key));
    }
    Ok(())
}

/// Checks a key prefix (for `?recurse` and `?keys`): empty, or a key that may end in `/`.
///
/// # Errors
/// As [`validate_key`].
pub fn validate_prefix(prefix: &str) -> crate::Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    validate_key(prefix)
}

fn invalid_key(key: &str) -> crate::Error {
    crate::Error::Invalid {
        what: "key",
        value: key.to_string(),
        rule: "1 to 191 bytes of UTF-8 without control characters, not starting with '/', \
               with no empty, '.' or '..' segment",
    }
}

/// Checks a session spec against Consul's bounds.
///
/// # Errors
/// [`Error::Invalid`](crate::Error::Invalid) naming the value and the bound.
pub fn validate_spec(spec: &SessionSpec) -> crate::Result<()> {
    if let Some(ttl) = spec.ttl {
        if !(MIN_SESSION_TTL..=MAX_SESSION_TTL).contains(&ttl) {
            return Err(crate::Error::Invalid {
                what: "session TTL",
                value: format!("{ttl:?}"),
                rule: "between 10s and 24h (86400s)",
            });
        }
    }
    if spec.lock_delay > MAX_LOCK_DELAY {
        return Err(crate::Error::Invalid {
            what: "lock delay",
            value: format!("{:?}", spec.lock_delay),
            rule: "at most 60s",
        });
    }
    if spec.name.len() > 191 || spec.name.chars().any(char::is_control) {
        return Err(crate::Error::Invalid {
            what: "session name",
            value: spec.name.clone(),
            rule: "at most 191 bytes, no control characters",
        });
    }
    crate::validate::name(&spec.node).map_err(|_| crate::Error::Invalid {
        what: "node",
        value: spec.node.clone(),
        rule: "1 to 191 bytes of UTF-8 without control characters",
    })
}

/// A new random session id, formatted as a UUID (version 4).
pub fn new_session_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        for good in ["a", "service/leader", "a/b/", "x.y", "a/.b"] {
            assert!(validate_key(good).is_ok(), "{good}");
        }
        for bad in [
            "", "/a", "a//b", "a/../b", "..", "a/.", "a\0b", "a\nb", "//",
        ] {
            assert!(validate_key(bad).is_err(), "{bad:?}");
        }
        assert!(validate_key(&"k".repeat(192)).is_err());
        assert!(validate_prefix("").is_ok());
    }

    #[test]
    fn session_ids_are_uuids() {
        let id = new_session_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, new_session_id());
    }

    #[test]
    fn spec_bounds() {
        let spec = |ttl: Option<u64>, delay: u64| SessionSpec {
            name: "n".into(),
            node: "node".into(),
            ttl: ttl.map(Duration::from_secs),
            lock_delay: Duration::from_secs(delay),
            behavior: Behavior::Release,
        };
        assert!(validate_spec(&spec(None, 15)).is_ok());
        assert!(validate_spec(&spec(Some(10), 0)).is_ok());
        assert!(validate_spec(&spec(Some(86_400), 60)).is_ok());
        assert!(validate_spec(&spec(Some(9), 15)).is_err());
        assert!(validate_spec(&spec(Some(86_401), 15)).is_err());
        assert!(validate_spec(&spec(None, 61)).is_err());
    }
}
