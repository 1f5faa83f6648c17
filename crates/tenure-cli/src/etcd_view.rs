//! The etcd on the database as `tenure status` (its `etcd` section) and `GET /v1/etcd` show
//! it: the library's `Etcd::overview` — revision, compaction floor, live leases, the Lock and
//! Election recipes' keys with their owners — bounded by [`LIMIT`] rows of each, as JSON and
//! as text. (Cargo feature `etcd`.)

use crate::output::{human_duration, print_table};
use serde::Serialize;
use std::time::Duration;
use tenure::etcd::{Etcd, Overview};

/// How many leases and how many recipe keys `tenure status` shows (and `GET /v1/etcd`
/// without `limit`); the rest are counted.
pub(crate) const LIMIT: u32 = 100;

/// The etcd section.
#[derive(Serialize)]
pub(crate) struct EtcdJson {
    /// The revision of the last write (1: none yet).
    pub(crate) revision: i64,
    /// The compaction floor: older revisions are gone (0: never compacted).
    pub(crate) compact_revision: i64,
    /// The live leases, earliest end first.
    pub(crate) leases: Vec<LeaseJson>,
    /// How many more leases live.
    pub(crate) more_leases: u64,
    /// The keys of the Lock and Election recipes, in key order.
    pub(crate) recipe_keys: Vec<RecipeKeyJson>,
    /// How many more recipe keys there are.
    pub(crate) more_recipe_keys: u64,
}

/// A live lease.
#[derive(Serialize)]
pub(crate) struct LeaseJson {
    /// The lease id (an `int64`).
    pub(crate) id: i64,
    /// The same in hex, as etcdctl prints it (and as JavaScript can hold it).
    pub(crate) hex: String,
    /// The TTL it was granted, in seconds.
    pub(crate) granted_ttl: i64,
    /// What it has left by the database's clock.
    pub(crate) remaining_ms: u64,
    /// How many keys live with it.
    pub(crate) keys: u64,
}

/// A lock's or an election's key.
#[derive(Serialize)]
pub(crate) struct RecipeKeyJson {
    /// The lock's or election's prefix (its name and `/`).
    pub(crate) prefix: String,
    pub(crate) key: String,
    /// The lease in hex (the key's last part).
    pub(crate) lease: String,
    /// The key's create revision: the owner's is the lock's fencing token.
    pub(crate) create_revision: i64,
    /// Whether it holds the lock or leads (the lowest create revision under its prefix).
    pub(crate) owner: bool,
}

/// Bytes as text: as they are when they are printable UTF-8, else escaped (`\xff`).
fn shown(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) if !text.chars().any(char::is_control) => text.to_string(),
        _ => bytes.escape_ascii().to_string(),
    }
}

fn hex(id: i64) -> String {
    if id < 0 {
        format!("-{:x}", id.unsigned_abs())
    } else {
        format!("{id:x}")
    }
}

impl From<&Overview> for EtcdJson {
    fn from(o: &Overview) -> EtcdJson {
        EtcdJson {
            revision: o.revision,
            compact_revision: o.floor,
            leases: o
                .leases
                .iter()
                .map(|l| LeaseJson {
                    id: l.id,
                    hex: hex(l.id),
                    granted_ttl: l.granted_ttl,
                    remaining_ms: u64::try_from(l.remaining.as_millis()).unwrap_or(u64::MAX),
                    keys: l.keys,
                })
                .collect(),
            more_leases: o.more_leases,
            recipe_keys: o
                .recipe_keys
                .iter()
                .map(|k| RecipeKeyJson {
                    prefix: shown(&k.prefix),
                    key: shown(&k.key),
                    lease: hex(k.lease),
                    create_revision: k.create_revision,
                    owner: k.owner,
                })
                .collect(),
            more_recipe_keys: o.more_recipe_keys,
        }
    }
}

/// The overview of the etcd on `store`'s database, at most `limit` of each.
///
/// # Errors
/// The store's (`SchemaMissing` where the etcd tables do not exist).
pub(crate) async fn read(store: &tenure::Store, limit: u32) -> Result<Overview, tenure::Error> {
    Etcd::new(store.clone())
        .overview(limit)
        .await
        .map_err(|e| match e {
            tenure::etcd::Error::Store(e) => e,
            // A read refuses nothing but the store's failures.
            _ => tenure::Error::Unsupported("an etcd overview refused"),
        })
}

/// The section `tenure status` shows: `None` where the etcd tables do not exist (an older
/// database, or one whose tables were made by hand without them) or were never used.
///
/// # Errors
/// The store's, but a missing table.
pub(crate) async fn section(store: &tenure::Store) -> Result<Option<EtcdJson>, tenure::Error> {
    match read(store, LIMIT).await {
        Ok(o) if o.is_unused() => Ok(None),
        Ok(o) => Ok(Some(EtcdJson::from(&o))),
        Err(tenure::Error::SchemaMissing { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The section as text.
pub(crate) fn print(etcd: &EtcdJson) {
    println!();
    let floor = match etcd.compact_revision {
        0 => "never compacted".to_string(),
        r => format!("compacted below {r}"),
    };
    println!("etcd: revision {}, {floor}", etcd.revision);
    if !etcd.leases.is_empty() {
        let rows: Vec<Vec<String>> = etcd
            .leases
            .iter()
            .map(|l| {
                vec![
                    l.hex.clone(),
                    format!("{}s", l.granted_ttl),
                    human_duration(Duration::from_millis(l.remaining_ms)),
                    l.keys.to_string(),
                ]
            })
            .collect();
        println!();
        print_table(&["ETCD LEASE", "TTL", "LEFT", "KEYS"], &rows);
    }
    more(etcd.more_leases, "lease");
    if !etcd.recipe_keys.is_empty() {
        let rows: Vec<Vec<String>> = etcd
            .recipe_keys
            .iter()
            .map(|k| {
                vec![
                    k.prefix.clone(),
                    k.key.clone(),
                    k.lease.clone(),
                    k.create_revision.to_string(),
                    if k.owner { "yes" } else { "waits" }.into(),
                ]
            })
            .collect();
        println!();
        print_table(
            &["LOCK/ELECTION", "KEY", "LEASE", "CREATE REV", "OWNER"],
            &rows,
        );
    }
    more(etcd.more_recipe_keys, "lock/election key");
}

fn more(n: u64, what: &str) {
    match n {
        0 => {}
        1 => println!("(1 more {what})"),
        n => println!("({n} more {what}s)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_ids_read_well() {
        assert_eq!(shown(b"jobs/nightly/694d"), "jobs/nightly/694d");
        assert_eq!(shown(b"a\xffb"), "a\\xffb");
        assert_eq!(shown(b"a\nb"), "a\\nb");
        assert_eq!(hex(0x694d_7b3c), "694d7b3c");
        assert_eq!(hex(-255), "-ff");
    }
}
