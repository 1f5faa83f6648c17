//! The Consul layer's requests and answers: sessions, keys, and Consul's bounds.

use crate::model::DbTime;
use std::fmt;
use std::time::Duration;

/// The shortest TTL a session may have unless the handle says otherwise
/// ([`Consul::session_ttl_min`](super::Consul::session_ttl_min)): Consul's default
/// `session_ttl_min`.
pub const MIN_SESSION_TTL: Duration = Duration::from_secs(10);
/// A TTL session ends this many times its TTL after its last renewal, as Consul's do
/// (`SessionTTLMultiplier`): Consul's contract is that a session does not end before its TTL,
/// and its clients (Patroni halves the TTL it asks for) count on the rest.
pub const SESSION_TTL_MULTIPLIER: u64 = 2;
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
    /// with their lock-delay counted from the instant they expired, and settles every key whose
    /// lock tenure took from its session (demote, handover, a takeover): the key forgets the
    /// session at a new `ModifyIndex`, so the index moves. A read that finds such a key (or
    /// an ended session) runs this first and reads again: no answer changes at an index
    /// already answered.
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
    /// An acquire tenure refuses by rule — a live spreading group's name or one of its
    /// shards (`tenure::spread::check_no_group`): nothing was written, and Consul's answer
    /// is `false`, as for any acquire it cannot grant; the reason, for the response's
    /// `X-Tenure-Refused` header and the log.
    Refused(String),
    /// How many sessions a reap ended.
    Reaped(usize),
    /// An index read.
    Index,
}

/// A request's result.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// The index of what the request read, as Consul's blocking queries answer it
    /// (`X-Consul-Index`): one key's `ModifyIndex`, a prefix's highest (deletes included),
    /// the sessions' table index; for a write, the store's index after it.
    pub index: u64,
    /// The store-wide index when the request ran: a blocking query that waits for its
    /// answer to change reads again when the store's index passes this.
    pub store_index: u64,
    /// The database's clock during the request.
    pub now: DbTime,
    /// What it returned.
    pub reply: Reply,
}
