//! Checks of what a Consul request carries (keys, session specs), and new session ids.

use super::{Request, SessionSpec, MAX_LOCK_DELAY, MAX_SESSION_TTL, MAX_VALUE_BYTES};
use crate::error::{Error, Result};
use std::time::Duration;

/// Checks what `request` carries before it runs: keys (or prefixes), a session spec (its TTL
/// at least `ttl_min`), a value's size.
///
/// # Errors
/// [`Error::Invalid`] naming the bad value; a TTL out of range is
/// [`consul::Error::SessionTtl`](super::Error::SessionTtl).
pub(super) fn request(request: &Request, ttl_min: Duration) -> super::Result<()> {
    match request {
        Request::CreateSession { spec, .. } => validate_spec(spec, ttl_min),
        Request::Get { key, recurse } | Request::Delete { key, recurse, .. } => {
            if *recurse {
                validate_prefix(key)?;
            } else {
                validate_key(key)?;
            }
            Ok(())
        }
        Request::Put { key, value, .. } => {
            validate_key(key)?;
            if value.len() > MAX_VALUE_BYTES {
                return Err(Error::Invalid {
                    what: "value",
                    value: format!("{} bytes", value.len()),
                    rule: "at most 512 KiB (524288 bytes)",
                }
                .into());
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Checks a KV key: a tenure name (1..=191 bytes, no control characters) with no empty, `.`
/// or `..` segment other than a trailing `/` (a "folder" key).
///
/// # Errors
/// [`Error::Invalid`] naming the key and the rule.
pub fn validate_key(key: &str) -> Result<()> {
    crate::validate::name(key).map_err(|_| invalid_key(key))?;
    let body = key.strip_suffix('/').unwrap_or(key);
    if key.starts_with('/')
        || body
            .split('/')
            .any(|s| s.is_empty() || s == "." || s == "..")
    {
        return Err(invalid_key(key));
    }
    Ok(())
}

/// Checks a key prefix (for `?recurse` and `?keys`): empty, or a key that may end in `/`.
///
/// # Errors
/// As [`validate_key`].
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Ok(());
    }
    validate_key(prefix)
}

fn invalid_key(key: &str) -> Error {
    Error::Invalid {
        what: "key",
        value: key.to_string(),
        rule: "1 to 191 bytes of UTF-8 without control characters, not starting with '/', \
               with no empty, '.' or '..' segment",
    }
}

/// Checks a session spec against Consul's bounds, its TTL (0 is none) against `ttl_min` (the
/// server's `session_ttl_min`) and 24 h.
///
/// # Errors
/// [`consul::Error::SessionTtl`](super::Error::SessionTtl) in Consul's words; otherwise
/// [`Error::Invalid`] naming the value and the bound.
pub fn validate_spec(spec: &SessionSpec, ttl_min: Duration) -> super::Result<()> {
    if let Some(ttl) = spec.ttl {
        if !(ttl_min..=MAX_SESSION_TTL).contains(&ttl) {
            return Err(super::Error::SessionTtl {
                ttl,
                min: ttl_min,
                max: MAX_SESSION_TTL,
            });
        }
    }
    if spec.lock_delay > MAX_LOCK_DELAY {
        return Err(Error::Invalid {
            what: "lock delay",
            value: format!("{:?}", spec.lock_delay),
            rule: "at most 60s",
        }
        .into());
    }
    if spec.name.len() > 191 || spec.name.chars().any(char::is_control) {
        return Err(Error::Invalid {
            what: "session name",
            value: spec.name.clone(),
            rule: "at most 191 bytes, no control characters",
        }
        .into());
    }
    crate::validate::name(&spec.node).map_err(|_| {
        Error::Invalid {
            what: "node",
            value: spec.node.clone(),
            rule: "1 to 191 bytes of UTF-8 without control characters",
        }
        .into()
    })
}

/// A new random session id, formatted as a UUID (version 4).
pub fn new_session_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consul::Behavior;
    use std::time::Duration;

    #[test]
    fn keys() {
        for good in ["a", "service/leader", "a/b/", "x.y", "a/.b"] {
            assert!(validate_key(good).is_ok(), "{good}");
        }
        for bad in [
            "", "/a", "a//b", "a/../b", "..", "a/.", "a\0b", "a\nb", "//",
        ] {
            assert!(validate_key(bad).is_err(), "{bad:?}");
        }
        assert!(validate_key(&"k".repeat(192)).is_err());
        assert!(validate_prefix("").is_ok());
    }

    #[test]
    fn session_ids_are_uuids() {
        let id = new_session_id();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert_ne!(id, new_session_id());
    }

    #[test]
    fn spec_bounds() {
        let spec = |ttl: Option<u64>, delay: u64| SessionSpec {
            name: "n".into(),
            node: "node".into(),
            ttl: ttl.map(Duration::from_secs),
            lock_delay: Duration::from_secs(delay),
            behavior: Behavior::Release,
        };
        let min = super::super::MIN_SESSION_TTL;
        assert!(validate_spec(&spec(None, 15), min).is_ok());
        assert!(validate_spec(&spec(Some(10), 0), min).is_ok());
        assert!(validate_spec(&spec(Some(86_400), 60), min).is_ok());
        assert!(validate_spec(&spec(Some(9), 15), min).is_err());
        assert!(validate_spec(&spec(Some(86_401), 15), min).is_err());
        assert!(validate_spec(&spec(None, 61), min).is_err());
        // A lower minimum (a server's `--session-ttl-min`) lets a short TTL through.
        assert!(validate_spec(&spec(Some(5), 0), Duration::from_secs(5)).is_ok());
    }

    /// Consul's own words and status for a TTL out of range: Patroni matches the text's start
    /// and then asks `/v1/agent/self` for the minimum.
    #[test]
    fn a_ttl_out_of_range_is_refused_in_consuls_words() {
        let spec = SessionSpec {
            name: "n".into(),
            node: "node".into(),
            ttl: Some(Duration::from_secs(5)),
            lock_delay: Duration::ZERO,
            behavior: Behavior::Delete,
        };
        let err = validate_spec(&spec, super::super::MIN_SESSION_TTL).unwrap_err();
        assert_eq!(
            err.to_string(),
            "Invalid Session TTL '5000000000', must be between [10s=24h0m0s]"
        );
    }
}
