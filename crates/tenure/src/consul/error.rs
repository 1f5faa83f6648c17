//! Why a Consul request failed: the layer's own error, converted from the store's at the edge.

/// Why a Consul request failed. A refusal ([`InvalidSession`](Error::InvalidSession),
/// [`UnknownNode`](Error::UnknownNode)) wrote nothing; after a [`Store`](Error::Store) failure
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
    /// Bad input ([`crate::error::Error::Invalid`]), a timeout, a database failure.
    #[error(transparent)]
    Store(#[from] crate::error::Error),
}

/// A Consul request's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
