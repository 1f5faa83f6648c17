//! Why a Consul request failed: the layer's own error, converted from the store's at the edge.

/// Why a Consul request failed. A refusal ([`InvalidSession`](Error::InvalidSession),
/// [`UnknownNode`](Error::UnknownNode), [`SessionTtl`](Error::SessionTtl)) wrote nothing; after a [`Store`](Error::Store) failure
/// the effect may be unknown (as for any store call that timed out).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// `?acquire=` with a session that does not exist or has ended (Consul answers 500).
    #[error("invalid session {0:?}: it does not exist or has ended")]
    InvalidSession(String),
    /// A session for a node this store does not keep (Consul: "Missing node registration").
    #[error("missing node registration: node {0:?} is not this tenure serve instance")]
    UnknownNode(String),
    /// A session TTL outside the server's range, in Consul's words (Consul answers 500; its
    /// clients, Patroni among them, recognise the text and read the minimum from
    /// `/v1/agent/self`). The TTL is in nanoseconds, the bounds in Go's duration syntax.
    #[error(
        "Invalid Session TTL '{}', must be between [{}={}]",
        ttl.as_nanos(),
        super::go_duration::format(*min),
        super::go_duration::format(*max)
    )]
    SessionTtl {
        /// The TTL asked for.
        ttl: std::time::Duration,
        /// The server's minimum.
        min: std::time::Duration,
        /// Consul's maximum (24 h).
        max: std::time::Duration,
    },
    /// Bad input ([`crate::error::Error::Invalid`]), a timeout, a database failure.
    #[error(transparent)]
    Store(#[from] crate::error::Error),
}

/// A Consul request's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
