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
        /// What was checked (`name`, `candidate id`, …).
        what: &'static str,
        /// The value given.
        value: String,
        /// The rule it broke.
        rule: &'static str,
    },

    /// A timing configuration that could let two candidates lead at once.
    #[error("unsafe timing: {0}")]
    UnsafeTiming(String),

    /// The database URL could not be understood.
    #[error("invalid database URL {url}: {reason}")]
    BadUrl {
        /// The URL, password redacted.
        url: String,
        /// What is wrong with it.
        reason: String,
    },

    /// The URL names a backend this build does not include.
    #[error("database URL {url}: the {backend} backend is not compiled in (enable the `{backend}` feature)")]
    BackendNotCompiled {
        /// The URL, password redacted.
        url: String,
        /// The cargo feature that would compile the backend in.
        backend: &'static str,
    },

    /// The database could not be reached, or refused the credentials.
    #[error("cannot connect to {url}: {source}")]
    Connect {
        /// The URL, password redacted.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },

    /// tenure's tables do not exist and auto-creation is off.
    #[error("tenure's tables ({table}) do not exist in {url}; run `tenure migrate`, or apply the DDL printed by `tenure migrate --print`, or enable auto-creation")]
    SchemaMissing {
        /// The first missing table.
        table: String,
        /// The URL, password redacted.
        url: String,
    },

    /// The tables were created by a newer tenure.
    #[error("schema version {found} in {url} is newer than this tenure understands ({supported}); upgrade tenure")]
    SchemaTooNew {
        /// The version found in the database.
        found: i64,
        /// The newest version this build understands.
        supported: i64,
        /// The URL, password redacted.
        url: String,
    },

    /// A statement did not complete within `db_timeout`. Its effect is unknown.
    #[error("database did not answer within {0:?}")]
    Timeout(Duration),

    /// The server will not take writes: a PostgreSQL standby or a read-only transaction
    /// (SQLSTATE 25006), a MySQL/MariaDB server with `read_only` on (tenure checks it itself:
    /// a user with `SUPER` or `READ ONLY ADMIN`, such as `root`, could still write there), or a
    /// read-only SQLite file. Nothing was written, and tenure never leads from such a server.
    /// The store stops using the connections it had, so that a DNS name, a virtual IP or a
    /// proxy that now points at the new primary is reached by the next call.
    #[error(
        "the database is read-only ({detail}): tenure never leads from a standby or a \
         read-only server; point the URL at the primary"
    )]
    ReadOnly {
        /// What the server said.
        detail: String,
    },

    /// Any other database failure. Its effect may be unknown (e.g. a dropped commit).
    #[error("database error: {0}{hint}", hint = pooler_hint(.0))]
    Database(#[source] sqlx::Error),

    /// A stored row could not be understood.
    #[error("corrupt row in {table}: {reason}")]
    Corrupt {
        /// The table of the row.
        table: String,
        /// What could not be understood.
        reason: String,
    },

    /// `fence`: the caller no longer holds `term` of `name`; nothing it wrote in this
    /// transaction may be committed.
    #[error("lease {name:?} term {term} is no longer held by {candidate:?}")]
    LeaseLost {
        /// The lease's name.
        name: String,
        /// Who believed it held the lease.
        candidate: String,
        /// The tenure it believed it held.
        term: u64,
    },

    /// A guard cannot fence this transaction: it is on another kind of database than the
    /// guard's store, or the store has no SQL lease table. Nothing was checked: roll back.
    #[error("cannot fence: {reason}")]
    CannotFence {
        /// Why.
        reason: String,
    },

    /// No new tenure of `name` can begin: its next term would leave the database's current
    /// epoch (2⁴⁰ tenures of one name on one PostgreSQL timeline, or 2⁶³ in all). Terms are
    /// never wrapped or reused; nothing was written.
    #[error(
        "lease {name:?} has used every term of the database's current epoch (last term {term}, \
         epoch floor {epoch_floor}): no term is reused, so no new tenure can begin; use another \
         name (a new epoch, such as a PostgreSQL promotion, also makes room)"
    )]
    TermsExhausted {
        /// The lease's name.
        name: String,
        /// Its last term.
        term: u64,
        /// The lowest term of the current epoch.
        epoch_floor: u64,
    },

    /// An admin operation named a name that has never been campaigned for.
    #[error("no lease named {0:?} has ever been held")]
    UnknownName(String),

    /// The elector's task has stopped.
    #[error("the elector has shut down")]
    Shutdown,

    /// The backend does not implement this part of tenure (a test or wrapper backend).
    #[error("{0} is not supported by this backend")]
    Unsupported(&'static str),
}

impl From<sqlx::Error> for Error {
    /// A driver error; a server that refuses writes because it is read-only becomes
    /// [`Error::ReadOnly`].
    fn from(e: sqlx::Error) -> Self {
        match read_only_refusal(&e) {
            Some(detail) => Error::ReadOnly { detail },
            None => Error::Database(e),
        }
    }
}

impl Error {
    /// Whether trying again later may succeed: the database did not answer in time, could not
    /// be reached, failed (a dropped connection, a conflict), or refused writes because it is
    /// read-only (a failover may be under way). Bad input, missing tables, a lost lease or a
    /// stopped elector are not transient. The effect of a transient failure may be unknown.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Error::Timeout(_) | Error::Connect { .. } | Error::Database(_) | Error::ReadOnly { .. }
        )
    }

    /// Whether the database said that a table does not exist.
    pub(crate) fn is_missing_table(&self) -> bool {
        matches!(self, Error::Database(e) if is_missing_table(e))
    }
}

// === what a database error means ===

/// Whether an error is a transient conflict after which the whole transaction may simply be
/// tried again: a unique violation (two creators of one row), a deadlock or a serialization
/// failure. Nothing was committed in these cases.
pub(crate) fn is_retryable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            matches!(db.kind(), sqlx::error::ErrorKind::UniqueViolation)
                || matches!(db.code().as_deref(), Some("40001" | "40P01"))
        }
        _ => false,
    }
}

/// Whether a call lost its connection: the socket closed or failed (`Io`: how sqlx reports a
/// MySQL session killed or a server gone), or the server said it ends the session (SQLSTATE
/// class 08, connection exceptions, on both engines; PostgreSQL's shutdown and termination
/// codes 57P01–03). A sign that the pool's other connections may be as dead, or lead to a
/// server that restarted or failed over.
pub(crate) fn is_connection_lost(err: &Error) -> bool {
    let Error::Database(e) = err else {
        return false;
    };
    match e {
        sqlx::Error::Io(_) => true,
        sqlx::Error::Database(db) => {
            let code = db.code();
            let code = code.as_deref().unwrap_or_default();
            code.starts_with("08") || matches!(code, "57P01" | "57P02" | "57P03")
        }
        _ => false,
    }
}

/// Whether an error says that a table, index, type or column already exists (PostgreSQL's
/// answer to a concurrent `CREATE … IF NOT EXISTS`; any engine's to a concurrent `ALTER TABLE
/// … ADD COLUMN` or `CREATE INDEX` of a schema upgrade, which checked first).
pub(crate) fn is_duplicate_object(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            let message = db.message().to_ascii_lowercase();
            matches!(
                db.code().as_deref(),
                Some("42P07" | "42710" | "42701" | "42S21")
            ) || message.contains("duplicate column name")
                || message.contains("duplicate key name")
        }
        _ => false,
    }
}

/// Whether an error says that a column does not exist (a table an older build created).
pub(crate) fn is_missing_column(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("42703" | "42S22"))
                || db.message().contains("no such column")
        }
        _ => false,
    }
}

/// Whether an error says that a table does not exist.
pub(crate) fn is_missing_table(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("42P01" | "42S02" | "1146"))
                || db.message().contains("no such table")
        }
        _ => false,
    }
}

/// Whether `e` is a server's refusal because it is read-only (see [`Error::ReadOnly`]).
// Used by PostgreSQL's engine.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(crate) fn is_read_only(e: &sqlx::Error) -> bool {
    read_only_refusal(e).is_some()
}

/// What the server said, if `e` is its refusal to write because it is read-only.
///
/// - PostgreSQL: SQLSTATE 25006 (`read_only_sql_transaction`), the answer of a hot standby
///   and of a transaction under `default_transaction_read_only`; and 55000 "recovery is in
///   progress", a standby's answer to the timeline read every write begins with.
/// - MySQL/MariaDB: 25006 as well (1792, a read-only transaction), or `HY000` with error 1290
///   or 1836 naming the read-only option or mode.
/// - SQLite: result code 8 (`SQLITE_READONLY`) and its extended codes.
fn read_only_refusal(e: &sqlx::Error) -> Option<String> {
    let sqlx::Error::Database(db) = e else {
        return None;
    };
    let code = db.code();
    let message = db.message();
    let sqlite_read_only = code
        .as_deref()
        .and_then(|c| c.parse::<u32>().ok())
        .is_some_and(|c| c & 0xff == 8)
        && message.contains("readonly");
    let mysql_read_only = code.as_deref() == Some("HY000")
        && (message.contains("--read-only") || message.contains("READ ONLY mode"));
    let standby = code.as_deref() == Some("55000") && message.contains("recovery is in progress");
    (code.as_deref() == Some("25006") || standby || sqlite_read_only || mysql_read_only)
        .then(|| message.to_string())
}

/// PostgreSQL's "prepared statement already exists" (42P05) and "does not exist" (26000) on a
/// store without `?pooler=transaction`: named statements met another client's on a server that
/// a transaction-mode pooler shares.
fn pooler_hint(err: &sqlx::Error) -> &'static str {
    match err {
        sqlx::Error::Database(db) if matches!(db.code().as_deref(), Some("42P05" | "26000")) => {
            " (the server is probably behind a transaction-mode pooler such as PgBouncer with \
             pool_mode = transaction: add ?pooler=transaction to the database URL)"
        }
        _ => "",
    }
}

/// `Result` with tenure's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
