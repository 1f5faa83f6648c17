//! Why an etcd call failed: etcd's own errors with etcd's exact texts (clients map them back by
//! their message), each with the gRPC status code etcd answers it with.

use std::fmt;

/// The gRPC status code an error is answered with (the library does not depend on a gRPC
/// crate; `tenure serve` maps these to its own).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Code {
    /// `INVALID_ARGUMENT` (3).
    InvalidArgument,
    /// `NOT_FOUND` (5).
    NotFound,
    /// `FAILED_PRECONDITION` (9).
    FailedPrecondition,
    /// `OUT_OF_RANGE` (11).
    OutOfRange,
    /// `UNAVAILABLE` (14): the database did not answer in time or failed; try again.
    Unavailable,
    /// `INTERNAL` (13): the database holds what tenure cannot read.
    Internal,
    /// `UNKNOWN` (2): errors etcd's recipes return as plain errors (a gRPC server answers them
    /// with this code and their text).
    Unknown,
}

impl Code {
    /// The code's number in gRPC.
    pub fn number(self) -> i32 {
        match self {
            Code::Unknown => 2,
            Code::InvalidArgument => 3,
            Code::NotFound => 5,
            Code::FailedPrecondition => 9,
            Code::OutOfRange => 11,
            Code::Internal => 13,
            Code::Unavailable => 14,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::NotFound => "NOT_FOUND",
            Code::FailedPrecondition => "FAILED_PRECONDITION",
            Code::OutOfRange => "OUT_OF_RANGE",
            Code::Unavailable => "UNAVAILABLE",
            Code::Internal => "INTERNAL",
            Code::Unknown => "UNKNOWN",
        })
    }
}

/// Why an etcd call failed. Every refusal wrote nothing; after a [`Store`](Error::Store)
/// failure the effect may be unknown (as for any store call that timed out).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A request without a key.
    #[error("etcdserver: key is not provided")]
    EmptyKey,
    /// A Put with `ignore_value` or `ignore_lease` on a key that does not exist, or a Txn
    /// operation that is empty.
    #[error("etcdserver: key not found")]
    KeyNotFound,
    /// A Put with `ignore_value` and a value.
    #[error("etcdserver: value is provided")]
    ValueProvided,
    /// A Put with `ignore_lease` and a lease.
    #[error("etcdserver: lease is provided")]
    LeaseProvided,
    /// A Txn with more than [`MAX_TXN_OPS`](super::MAX_TXN_OPS) compares or operations in a
    /// branch.
    #[error("etcdserver: too many operations in txn request")]
    TooManyOps,
    /// A Txn that puts one key twice, or puts and deletes it.
    #[error("etcdserver: duplicate key given in txn request")]
    DuplicateKey,
    /// A Range with an unknown sort order or target.
    #[error("etcdserver: invalid sort option")]
    InvalidSortOption,
    /// A read of (or a watch from, or a compaction to) a revision below the compaction floor
    /// `floor`.
    #[error("etcdserver: mvcc: required revision has been compacted")]
    Compacted {
        /// The compaction floor: the oldest revision that can still be read.
        floor: i64,
    },
    /// A read of (or a compaction to) a revision after the current one.
    #[error("etcdserver: mvcc: required revision is a future revision")]
    FutureRevision,
    /// A request larger than [`MAX_REQUEST_BYTES`](super::MAX_REQUEST_BYTES), or a key
    /// longer than [`MAX_KEY_BYTES`](super::MAX_KEY_BYTES).
    #[error("etcdserver: request is too large")]
    RequestTooLarge,
    /// A lease that does not exist or has ended.
    #[error("etcdserver: requested lease not found")]
    LeaseNotFound,
    /// A grant of a lease id that exists.
    #[error("etcdserver: lease already exists")]
    LeaseExists,
    /// A grant with a TTL above [`MAX_LEASE_TTL`](super::MAX_LEASE_TTL).
    #[error("etcdserver: too large lease TTL")]
    LeaseTtlTooLarge,
    /// A lock whose key was deleted (its lease ended) while it waited (etcd's
    /// `concurrency.ErrSessionExpired`).
    #[error("mutex: session is expired")]
    SessionExpired,
    /// A proclaim or resign by a campaigner that no longer leads (`ErrElectionNotLeader`).
    #[error("election: not leader")]
    NotLeader,
    /// A leader asked of an election nobody leads (`ErrElectionNoLeader`).
    #[error("election: no leader")]
    NoLeader,
    /// A proclaim or resign without its leader key (etcd's election server says so).
    #[error("\"leader\" field must be provided")]
    MissingLeaderKey,
    /// A timeout, a database failure, bad input the store refused.
    #[error(transparent)]
    Store(#[from] crate::error::Error),
}

impl Error {
    /// The gRPC status code etcd answers this error with.
    pub fn code(&self) -> Code {
        use crate::error::Error as StoreError;
        match self {
            Error::EmptyKey
            | Error::KeyNotFound
            | Error::ValueProvided
            | Error::LeaseProvided
            | Error::TooManyOps
            | Error::DuplicateKey
            | Error::InvalidSortOption
            | Error::RequestTooLarge => Code::InvalidArgument,
            Error::Compacted { .. } | Error::FutureRevision | Error::LeaseTtlTooLarge => {
                Code::OutOfRange
            }
            Error::LeaseNotFound => Code::NotFound,
            Error::LeaseExists => Code::FailedPrecondition,
            Error::SessionExpired
            | Error::NotLeader
            | Error::NoLeader
            | Error::MissingLeaderKey => Code::Unknown,
            Error::Store(StoreError::Invalid { .. }) => Code::InvalidArgument,
            Error::Store(StoreError::Corrupt { .. } | StoreError::SchemaMissing { .. }) => {
                Code::Internal
            }
            Error::Store(_) => Code::Unavailable,
        }
    }
}

/// An etcd call's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_and_codes_are_etcds() {
        for (error, text, code) in [
            (Error::EmptyKey, "etcdserver: key is not provided", 3),
            (
                Error::TooManyOps,
                "etcdserver: too many operations in txn request",
                3,
            ),
            (
                Error::DuplicateKey,
                "etcdserver: duplicate key given in txn request",
                3,
            ),
            (
                Error::Compacted { floor: 4 },
                "etcdserver: mvcc: required revision has been compacted",
                11,
            ),
            (
                Error::FutureRevision,
                "etcdserver: mvcc: required revision is a future revision",
                11,
            ),
            (
                Error::LeaseNotFound,
                "etcdserver: requested lease not found",
                5,
            ),
            (Error::LeaseExists, "etcdserver: lease already exists", 9),
            (
                Error::LeaseTtlTooLarge,
                "etcdserver: too large lease TTL",
                11,
            ),
            (
                Error::RequestTooLarge,
                "etcdserver: request is too large",
                3,
            ),
            (Error::SessionExpired, "mutex: session is expired", 2),
        ] {
            assert_eq!(error.to_string(), text);
            assert_eq!(error.code().number(), code, "{text}");
        }
        let timeout = Error::Store(crate::Error::Timeout(std::time::Duration::from_secs(1)));
        assert_eq!(timeout.code(), Code::Unavailable);
    }
}
