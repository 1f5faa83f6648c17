//! A lease row as the statements read it, and its checked conversion into a [`Lease`]; the
//! checked conversion of a value the other way, into a `BIGINT` parameter.

use crate::error::{Error, Result};
use crate::model::{DbTime, Lease};

/// The raw column values of a lease row, before they become a [`Lease`].
pub(crate) struct RawLease {
    pub name: String,
    pub holder: Option<String>,
    pub term: i64,
    pub acquired_us: i64,
    pub renewed_us: i64,
    pub expires_us: i64,
    pub ttl_ms: i64,
    pub metadata: Option<String>,
    pub handover_to: Option<String>,
    pub paused: bool,
}

impl RawLease {
    pub(super) fn into_lease(self, table: &str) -> Result<Lease> {
        let unsigned = |v: i64, what: &str| {
            u64::try_from(v).map_err(|_| Error::Corrupt {
                table: table.to_string(),
                reason: format!("negative {what} {v} for {:?}", self.name),
            })
        };
        Ok(Lease {
            term: unsigned(self.term, "term")?,
            ttl_ms: unsigned(self.ttl_ms, "ttl_ms")?,
            holder: self.holder,
            acquired_at: DbTime(self.acquired_us),
            renewed_at: DbTime(self.renewed_us),
            expires_at: DbTime(self.expires_us),
            metadata: self.metadata,
            handover_to: self.handover_to,
            paused: self.paused,
            name: self.name,
        })
    }
}

/// `value` (a term, an index, milliseconds) as the signed `BIGINT` it is stored in: checked,
/// never wrapped into a negative number.
pub(crate) fn bigint(what: &'static str, value: u64) -> Result<i64> {
    i64::try_from(value).map_err(|_| Error::Invalid {
        what,
        value: value.to_string(),
        rule: "at most 9223372036854775807 (a BIGINT)",
    })
}
