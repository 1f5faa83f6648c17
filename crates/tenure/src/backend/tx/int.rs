//! Checked conversions between the values a layer counts in (`u64` terms, indexes, revisions,
//! milliseconds; `u64` flags of 64 bits) and the signed `BIGINT` columns every engine stores
//! them in. A value that does not fit is an error naming it, never a wrapped number; a stored
//! value out of range is a corrupt row, named with its table.

use crate::error::{Error, Result};

/// `value` (a term, an index, milliseconds) as the signed `BIGINT` it is stored in: checked,
/// never wrapped into a negative number.
///
/// # Errors
/// [`Error::Invalid`] naming `what` above `i64::MAX`.
pub(crate) fn bigint(what: &'static str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::Invalid {
        what,
        value: value.to_string(),
        rule: "at most 9223372036854775807 (a BIGINT)",
    })
}

/// A stored counter or duration (never written negative) read back as the unsigned value it
/// was.
///
/// # Errors
/// [`Error::Corrupt`] naming `table` and `what` for a negative value.
pub(crate) fn unsigned(table: &str, what: &str, value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| Error::Corrupt {
        table: table.to_string(),
        reason: format!("negative {what} {value}"),
    })
}

/// A stored `BIGINT` read back as the `i32` it was written from.
///
/// # Errors
/// [`Error::Corrupt`] naming `table` and `what` when it is out of range.
pub(crate) fn int32(table: &str, what: &str, value: i64) -> Result<i32> {
    i32::try_from(value).map_err(|_| Error::Corrupt {
        table: table.to_string(),
        reason: format!("{what} {value} is not a 32-bit integer"),
    })
}

/// All 64 bits of `value` in a `BIGINT` (two's complement both ways): for values that use
/// the whole `u64` range, such as a key's flags.
pub(crate) fn bits(value: u64) -> i64 {
    i64::from_ne_bytes(value.to_ne_bytes())
}

/// The `u64` whose 64 bits [`bits`] stored.
pub(crate) fn from_bits(value: i64) -> u64 {
    u64::from_ne_bytes(value.to_ne_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_are_checked_and_named() {
        assert_eq!(bigint("term", 7).unwrap(), 7);
        let err = bigint("term", u64::MAX).unwrap_err().to_string();
        assert!(err.contains("term") && err.contains("BIGINT"), "{err}");
        assert_eq!(unsigned("t", "index", 5).unwrap(), 5);
        let err = unsigned("demo_kv", "index", -1).unwrap_err().to_string();
        assert!(err.contains("demo_kv") && err.contains("index"), "{err}");
        assert_eq!(int32("t", "priority", -3).unwrap(), -3);
        assert!(int32("t", "priority", i64::from(i32::MAX) + 1).is_err());
    }

    #[test]
    fn bits_keep_all_64() {
        for v in [0, 7, u64::MAX, 1 << 63, (1 << 63) - 1] {
            assert_eq!(from_bits(bits(v)), v);
        }
        assert_eq!(bits(u64::MAX), -1);
    }
}
