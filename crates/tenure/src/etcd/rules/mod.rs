//! The etcd layer's rules with no IO, tested without a database: which keys a request names
//! ([`span`]), whether a Txn's compare holds ([`compare`]), how a Range's answer is shaped
//! ([`range`]), what the keys were at a past revision ([`history`]), and the leases' rules of
//! time ([`lease`]). The request checks are `validate.rs`'s; the rows they run over, `rows.rs`.

pub(crate) mod compare;
pub(crate) mod history;
pub(crate) mod lease;
pub(crate) mod range;
pub(crate) mod span;

/// A key as a test writes it.
#[cfg(test)]
pub(crate) fn kv(
    key: &str,
    value: &str,
    create: i64,
    modified: i64,
    version: i64,
) -> crate::etcd::proto::mvccpb::KeyValue {
    crate::etcd::proto::mvccpb::KeyValue {
        key: key.as_bytes().to_vec(),
        value: value.as_bytes().to_vec(),
        create_revision: create,
        mod_revision: modified,
        version,
        lease: 0,
    }
}
