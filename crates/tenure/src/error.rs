//! Typed errors. Losing a race is never an error: it is `None` or an [`Effect`](crate::Effect).
//!
//! No variant carries a database password: URLs are stored as [`RedactedUrl`](crate::RedactedUrl).

use std::time::Duration;

/// Everything that can go wrong in tenure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A name, candidate id, table prefix or metadata value was not acceptable.
    #[error("invalid {what} {value:?}: {rule}")]
    Invalid {
        what: &'static str,
        value: String,
        rule: &'static str,
    },

    /// A timing configuration that could let two candidates lead at once.
    #[error("unsafe timing: {0}")]
    UnsafeTiming(String),

    /// The database URL could not be understood.
    #[error("invalid database URL {url}: {reason}")]
    BadUrl { url: String, reason: String },

    /// The URL names a backend this build does not include.
    #[error("database URL {url}: the {backend} backend is not compiled in (enable the `{backend}` feature)")]
    BackendNotCompiled { url: String, backend: &'static str },

    /// The database could not be reached, or refused the credentials.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: sqlx::Error,
    },

    /// tenure's tables do not exist and auto-creation is off.
    #[error("tenure's tables ({table}) do not exist in {url}; run `tenure migrate`, or apply the DDL printed by `tenure migrate --print`, or enable auto-creation")]
    SchemaMissing { table: String, url: String },

    /// The tables were created by a newer tenure.
    #[error("schema version {found} in {url} is newer than this tenure understands ({supported}); upgrade tenure")]
    SchemaTooNew {
        found: i64,
        supported: i64,
        url: String,
    },

    /// A statement did not complete within `db_timeout`. Its effect is unknown.
    #[error("database did not answer within {0:?}")]
    Timeout(Duration),

    /// Any other database failure. Its effect may be unknown (e.g. a dropped commit).
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),

    /// A stored row could not be understood.
    #[error("corrupt row in {table}: {reason}")]
    Corrupt { table: String, reason: String },

    /// `fence`: the caller no longer holds `term` of `name`; nothing it wrote in this
    /// transaction may be committed.
    #[error("lease {name:?} term {term} is no longer held by {candidate:?}")]
    LeaseLost {
        name: String,
        candidate: String,
        term: u64,
    },

    /// An admin operation named a name that has never been campaigned for.
    #[error("no lease named {0:?} has ever been held")]
    UnknownName(String),

    /// The elector's task has stopped.
    #[error("the elector has shut down")]
    Shutdown,
}

/// `Result` with tenure's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
