//! [`BackendKind`]: which engine a URL names.

use super::url::RedactedUrl;
use crate::error::Result;
use std::fmt;

/// Which database engine a backend talks to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BackendKind {
    /// PostgreSQL (`postgres://`, `postgresql://`).
    Postgres,
    /// MySQL or MariaDB (`mysql://`, `mariadb://`).
    MySql,
    /// SQLite, a file on this machine (`sqlite://PATH`).
    Sqlite,
    /// No database: a backend that keeps its leases in process memory, as a test double does
    /// (tenure ships none; its own timing and simulation tests use one). No URL names it and it
    /// has no SQL schema.
    Memory,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Postgres => "postgres",
            BackendKind::MySql => "mysql",
            BackendKind::Sqlite => "sqlite",
            BackendKind::Memory => "memory",
        })
    }
}

impl BackendKind {
    /// The backend a URL names by its scheme.
    ///
    /// # Errors
    /// [`Error::BadUrl`](crate::Error::BadUrl) for any other scheme.
    pub fn from_url(url: &str) -> Result<BackendKind> {
        let scheme = url
            .split(':')
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        match scheme.as_str() {
            "postgres" | "postgresql" => Ok(BackendKind::Postgres),
            "mysql" | "mariadb" => Ok(BackendKind::MySql),
            "sqlite" => Ok(BackendKind::Sqlite),
            _ => Err(crate::error::Error::BadUrl {
                url: RedactedUrl::new(url).to_string(),
                reason: "the scheme must be postgres://, mysql://, mariadb:// or sqlite://"
                    .to_string(),
            }),
        }
    }

    /// The backend a URL names, after checking what can be checked without connecting: the
    /// scheme, and that an SQLite URL names a file (with an empty path SQLite opens a private
    /// temporary database per connection, so nothing would be shared or kept).
    ///
    /// # Errors
    /// [`Error::BadUrl`](crate::Error::BadUrl), saying what is wrong.
    pub fn check_url(url: &str) -> Result<BackendKind> {
        let kind = BackendKind::from_url(url)?;
        if kind == BackendKind::Sqlite {
            // `from_url` matched the scheme case-insensitively: the first 7 bytes are ASCII.
            let rest = &url["sqlite:".len()..];
            let rest = rest.strip_prefix("//").unwrap_or(rest);
            if rest.split('?').next().unwrap_or_default().is_empty() {
                return Err(crate::error::Error::BadUrl {
                    url: RedactedUrl::new(url).to_string(),
                    reason: "the path of the SQLite file is missing (e.g. \
                             sqlite:///var/lib/tenure/tenure.db or sqlite:tenure.db)"
                        .to_string(),
                });
            }
        }
        Ok(kind)
    }

    /// The cargo feature that compiles this backend in (`memory` names none: tenure ships no
    /// in-memory backend).
    pub fn feature(self) -> &'static str {
        match self {
            BackendKind::Postgres => "postgres",
            BackendKind::MySql => "mysql",
            BackendKind::Sqlite => "sqlite",
            BackendKind::Memory => "memory",
        }
    }
}
