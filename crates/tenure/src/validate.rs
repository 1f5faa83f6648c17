//! Validation of names, candidate ids, table prefixes and metadata, and the default candidate id.

use crate::error::{Error, Result};
use rand::distributions::{Alphanumeric, DistString};
use std::time::Duration;

/// Longest name or candidate id, in bytes (fits a MySQL utf8mb4 index).
pub const MAX_ID_BYTES: usize = 191;
/// Largest metadata value, in bytes.
pub const MAX_METADATA_BYTES: usize = 4096;
/// Longest table prefix.
pub const MAX_PREFIX_CHARS: usize = 41;
/// The longest duration tenure writes into the database (a lock's minimum hold time, a
/// history retention): 100 years of 365 days. An instant that far from the database's now
/// is a timestamp every engine stores (MySQL/MariaDB's `DATETIME` ends with the year 9999),
/// and its microseconds fit an `i64` with room to spare.
pub const MAX_DURATION: Duration = Duration::from_secs(100 * 365 * 86_400);

/// `d` in whole milliseconds (rounded down), checked against [`MAX_DURATION`]: the one
/// conversion of a duration on its way to the database.
///
/// # Errors
/// [`Error::Invalid`] naming `what`, the value and the bound.
pub fn duration_ms(what: &'static str, d: Duration) -> Result<u64> {
    match u64::try_from(d.as_millis()) {
        Ok(ms) if d <= MAX_DURATION => Ok(ms),
        _ => Err(Error::Invalid {
            what,
            value: format!("{d:?}"),
            rule: "at most 100 years (3153600000s)",
        }),
    }
}

/// Checks a duration in milliseconds against [`MAX_DURATION`] (an operation's own value).
pub(crate) fn stored_ms(what: &'static str, ms: u64) -> Result<()> {
    duration_ms(what, Duration::from_millis(ms)).map(|_| ())
}

fn invalid(what: &'static str, value: &str, rule: &'static str) -> Error {
    Error::Invalid {
        what,
        value: value.to_string(),
        rule,
    }
}

fn check_id(what: &'static str, value: &str) -> Result<()> {
    if value.is_empty() || value.len() > MAX_ID_BYTES {
        return Err(invalid(what, value, "must be 1 to 191 bytes of UTF-8"));
    }
    if value.chars().any(char::is_control) {
        return Err(invalid(what, value, "must not contain control characters"));
    }
    // MySQL/MariaDB compare with PAD SPACE: `job` and `job ` would be one row there.
    if value.ends_with(' ') {
        return Err(invalid(what, value, "must not end with a space"));
    }
    Ok(())
}

/// Checks an election or lock name: 1..=191 bytes of UTF-8, no control characters, no
/// trailing space (MySQL/MariaDB's PAD SPACE collations would equate `job` and `job `; refusing
/// it keeps names compared byte for byte on every backend).
///
/// # Errors
/// [`Error::Invalid`] naming the value and the rule.
pub fn name(value: &str) -> Result<()> {
    check_id("name", value)
}

/// Checks a semaphore of `permits` on `name`: at least one permit, and every permit's lease
/// name (`name#i`) a valid name.
///
/// # Errors
/// [`Error::Invalid`] naming the rule.
pub fn semaphore(name: &str, permits: u32) -> Result<()> {
    if permits == 0 {
        return Err(Error::Invalid {
            what: "permits",
            value: "0".into(),
            rule: "must be at least 1",
        });
    }
    self::name(&permit_name(name, permits - 1))
}

/// The lease name of permit `i` of the semaphore `name`.
pub(crate) fn permit_name(name: &str, i: u32) -> String {
    format!("{name}#{i}")
}

/// Checks a candidate id: 1..=191 bytes of UTF-8, no control characters, no trailing space.
///
/// # Errors
/// [`Error::Invalid`] naming the value and the rule.
pub fn candidate(value: &str) -> Result<()> {
    check_id("candidate id", value)
}

/// Checks a table prefix against `^[A-Za-z_][A-Za-z0-9_]{0,40}$`.
///
/// # Errors
/// [`Error::Invalid`] naming the value and the rule.
pub fn table_prefix(value: &str) -> Result<()> {
    let mut chars = value.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if first_ok && rest_ok && value.len() <= MAX_PREFIX_CHARS {
        Ok(())
    } else {
        Err(invalid(
            "table prefix",
            value,
            "must match ^[A-Za-z_][A-Za-z0-9_]{0,40}$",
        ))
    }
}

/// Checks a metadata value: at most 4096 bytes.
///
/// # Errors
/// [`Error::Invalid`] naming the value and the rule.
pub fn metadata(value: &str) -> Result<()> {
    if value.len() > MAX_METADATA_BYTES {
        let shown: String = value.chars().take(40).collect();
        return Err(invalid(
            "metadata",
            &format!("{shown}…"),
            "must be at most 4096 bytes",
        ));
    }
    Ok(())
}

/// The default candidate id: `<hostname>-<pid>-<4 random chars>`, readable by an operator and
/// unique per process incarnation.
pub fn default_candidate_id() -> String {
    let host = hostname::get()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "host".to_string());
    let suffix = Alphanumeric.sample_string(&mut rand::thread_rng(), 4);
    let mut id = format!("{host}-{}-{suffix}", std::process::id());
    if id.len() > MAX_ID_BYTES {
        let keep = id.len() - MAX_ID_BYTES;
        id.drain(..keep);
    }
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids() {
        assert!(name("billing-cron").is_ok());
        assert!(name("ünïcode ok").is_ok());
        assert!(name(&"x".repeat(191)).is_ok());
        let err = name(&"x".repeat(192)).unwrap_err().to_string();
        assert!(err.contains("1 to 191 bytes"), "{err}");
        assert!(name("").is_err());
        let err = candidate("a\nb").unwrap_err().to_string();
        assert!(
            err.contains("candidate id") && err.contains("control"),
            "{err}"
        );
    }

    #[test]
    fn prefixes() {
        for ok in ["tenure_", "_x", "A9_", &format!("a{}", "b".repeat(40))] {
            assert!(table_prefix(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "9a",
            "a-b",
            "a b",
            "a;drop",
            &format!("a{}", "b".repeat(41)),
        ] {
            let err = table_prefix(bad).unwrap_err().to_string();
            assert!(err.contains("table prefix"), "{err}");
        }
    }

    #[test]
    fn default_id_is_valid_and_unique() {
        let a = default_candidate_id();
        let b = default_candidate_id();
        assert!(candidate(&a).is_ok());
        assert!(a.contains(&format!("-{}-", std::process::id())), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn durations_are_bounded() {
        assert_eq!(
            duration_ms("x", Duration::from_millis(1_500)).unwrap(),
            1_500
        );
        assert_eq!(
            duration_ms("x", MAX_DURATION).unwrap(),
            3_153_600_000_000,
            "the rule's figure is the bound"
        );
        for bad in [
            MAX_DURATION + Duration::from_millis(1),
            Duration::from_secs(999_999_999_999 * 3600),
            Duration::MAX,
        ] {
            let err = duration_ms("at least", bad).unwrap_err().to_string();
            assert!(
                err.contains("at least") && err.contains("3153600000s"),
                "{err}"
            );
        }
        assert!(stored_ms("ttl", u64::MAX).is_err());
    }

    #[test]
    fn metadata_limit() {
        assert!(metadata(&"m".repeat(4096)).is_ok());
        assert!(metadata(&"m".repeat(4097)).is_err());
    }
}
