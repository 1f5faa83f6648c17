//! A lease row as the statements read it, and its checked conversion into a [`Lease`] (the
//! other way, into a `BIGINT` parameter: the seam's `int::bigint`).

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
