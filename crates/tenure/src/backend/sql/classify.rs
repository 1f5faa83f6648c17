//! What a database error means to the shared code: try again, someone else did it, or a table
//! is missing.

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

/// Whether an error says that a table, index or type already exists (PostgreSQL's answer to
/// a concurrent `CREATE … IF NOT EXISTS`).
pub(crate) fn is_duplicate_object(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => matches!(db.code().as_deref(), Some("42P07" | "42710")),
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
