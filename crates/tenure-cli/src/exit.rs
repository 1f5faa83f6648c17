//! Exit codes (documented in `--help` and docs/reference/exit-codes.md) and the error type that
//! carries one.

use std::fmt;

/// Success.
pub(crate) const OK: u8 = 0;
/// `leader --am-i`: the candidate does not lead.
pub(crate) const NOT_LEADER: u8 = 1;
/// Usage or configuration error.
pub(crate) const USAGE: u8 = 64;
/// The database is unreachable or refused the credentials.
pub(crate) const UNAVAILABLE: u8 = 69;
/// A bug or an unexpected failure.
pub(crate) const INTERNAL: u8 = 70;
/// `--no-wait` / `--timeout` gave up.
pub(crate) const NOT_ACQUIRED: u8 = 73;
/// Leadership was lost while the command ran.
pub(crate) const LOST: u8 = 75;

/// A failure with the exit code it maps to and a one-line message.
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: u8,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }

    pub(crate) fn usage(message: impl Into<String>) -> Failure {
        Failure::new(USAGE, message)
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<tenure::Error> for Failure {
    fn from(err: tenure::Error) -> Failure {
        use tenure::Error as E;
        let code = match &err {
            E::Invalid { .. }
            | E::UnsafeTiming(_)
            | E::BadUrl { .. }
            | E::BackendNotCompiled { .. }
            | E::SchemaMissing { .. }
            | E::SchemaTooNew { .. }
            | E::UnknownName(_) => USAGE,
            e if e.is_transient() => UNAVAILABLE,
            _ => INTERNAL,
        };
        Failure::new(code, err.to_string())
    }
}

impl From<std::io::Error> for Failure {
    fn from(err: std::io::Error) -> Failure {
        Failure::new(INTERNAL, err.to_string())
    }
}

/// What a command returns: the exit code on success, or a failure.
pub(crate) type Outcome = Result<u8, Failure>;
