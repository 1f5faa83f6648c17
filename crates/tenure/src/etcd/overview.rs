//! What an operator sees of the etcd on a database ([`Etcd::overview`](super::Etcd::overview)):
//! the revision and the compaction floor, the leases that live with what they have left by the
//! database's clock, and the keys of etcd's Lock and Election recipes with who holds each —
//! read in one transaction, at one revision, and bounded: a store of a million leases answers
//! with `limit` of them and a count of the rest.
//!
//! A recipe's key is `<prefix><lease in hex>` with that lease (`concurrency.Mutex`,
//! `concurrency.Election`, `etcdctl lock`/`elect`, etcd's `v3lock`/`v3election` and the
//! layer's own recipes all name their keys so), and the key of its prefix with the lowest
//! create revision holds the lock or leads: its create revision is the lock's fencing token.
//! The SQL finds them by that shape (each engine spells "the key ends in `/` and its lease in
//! hex" its own way), so that a store's other keys cost no transfer.

use super::error::Result;
use super::rows::{EtcdTx, LeaseRow};
use super::rules::span::{prefix_end, Span};
use crate::backend::tx::{Arg, BackendKind, Dialect};
use crate::model::DbTime;
use std::collections::BTreeMap;
use std::time::Duration;

/// The etcd on a database as an operator sees it (see [`Etcd::overview`](super::Etcd::overview)).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Overview {
    /// The database's clock at the read.
    pub now: DbTime,
    /// The revision of the last write (1: nothing was ever written).
    pub revision: i64,
    /// The oldest revision a read or a watch may start from (0: nothing was compacted).
    pub floor: i64,
    /// The leases that live, earliest end first, at most the limit.
    pub leases: Vec<LeaseSummary>,
    /// How many more leases live than `leases` shows.
    pub more_leases: u64,
    /// The keys of the Lock and Election recipes, in key order, at most the limit.
    pub recipe_keys: Vec<RecipeKey>,
    /// How many more recipe keys there are than `recipe_keys` shows.
    pub more_recipe_keys: u64,
}

impl Overview {
    /// Whether the etcd on this database was never used: no write, no live lease.
    pub fn is_unused(&self) -> bool {
        self.revision <= 1 && self.leases.is_empty() && self.more_leases == 0
    }
}

/// A lease that lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseSummary {
    /// Its id.
    pub id: i64,
    /// The TTL it was granted, in seconds (each keep-alive renews it to this).
    pub granted_ttl: i64,
    /// What it has left by the database's clock.
    pub remaining: Duration,
    /// How many keys are attached to it.
    pub keys: u64,
}

/// A key of a Lock or Election recipe: `prefix` followed by its lease in hex.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecipeKey {
    /// The lock's or election's prefix (its name and `/`).
    pub prefix: Vec<u8>,
    /// The key.
    pub key: Vec<u8>,
    /// The lease it lives with.
    pub lease: i64,
    /// Its create revision: for the owner, the lock's fencing token (`ETCD_LOCK_REV`).
    pub create_revision: i64,
    /// Whether it holds the lock or leads: it has the lowest create revision of every key
    /// under `prefix` (the recipes' rule).
    pub owner: bool,
}

/// The overview's statements, built with the layer's.
#[derive(Debug)]
pub(super) struct Sql {
    leases_count: String,
    /// The live leases with their key counts (a LIMIT is appended).
    leases: String,
    recipe_keys_count: String,
    /// The recipe keys in key order (a LIMIT is appended).
    recipe_keys: String,
    /// The key of a span with the lowest create revision.
    first_created: super::statements::Spanned,
}

/// The condition "the key is `…/<its lease in hex>`", as each engine spells it.
fn recipe_shape(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Postgres => {
            "substring(kv_key from octet_length(kv_key) - length(to_hex(lease))) \
             = convert_to('/' || to_hex(lease), 'UTF8')"
        }
        BackendKind::MySql => {
            "RIGHT(kv_key, LENGTH(HEX(lease)) + 1) = CONCAT('/', LOWER(HEX(lease)))"
        }
        _ => "substr(kv_key, -(length(printf('%x', lease)) + 1)) = CAST(printf('/%x', lease) AS BLOB)",
    }
}

impl Sql {
    /// The statements on the tables `kv` and `lease`.
    pub(super) fn new(kv: &str, lease: &str, d: &Dialect, kind: BackendKind) -> Sql {
        let live = format!("expires_at > {}", (d.from_us)(&(d.param)(1)));
        // Lease ids are positive (etcd's own and this layer's choice; a negative one given by a
        // client is shown as a lease, its keys not as a recipe's).
        let recipe = format!("lease > 0 AND {}", recipe_shape(kind));
        Sql {
            leases_count: format!("SELECT COUNT(*) AS n FROM {lease} WHERE {live}"),
            leases: format!(
                "SELECT id, ttl_s, {} AS granted_us, {} AS expires_us, \
                 (SELECT COUNT(*) FROM {kv} WHERE {kv}.lease = {lease}.id) AS n_keys \
                 FROM {lease} WHERE {live} ORDER BY expires_at, id",
                (d.to_us)("granted_at"),
                (d.to_us)("expires_at"),
            ),
            recipe_keys_count: format!("SELECT COUNT(*) AS n FROM {kv} WHERE {recipe}"),
            recipe_keys: format!(
                "SELECT kv_key, create_revision, lease FROM {kv} WHERE {recipe} ORDER BY kv_key"
            ),
            first_created: super::statements::Spanned::new(
                d,
                &format!("SELECT kv_key FROM {kv} WHERE"),
                " ORDER BY create_revision, kv_key LIMIT 1",
                1,
            ),
        }
    }
}

/// A count as an unsigned number (a `COUNT(*)` is never negative).
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The overview at `revision` (the read's, which the caller checks did not move), at most
/// `limit` leases and `limit` recipe keys.
pub(super) async fn read(tx: &mut EtcdTx<'_>, revision: i64, limit: u32) -> Result<Overview> {
    let now = tx.now().await?;
    let floor = tx.read_floor().await?;
    let sql = &tx.s.overview;
    let at = [Arg::Int(now.0)];
    let live = first_int(tx, &sql.leases_count, &at).await?;
    let leases = format!("{} LIMIT {limit}", sql.leases);
    let rows = tx.tx.fetch(&leases, &at).await?;
    let mut shown = Vec::with_capacity(rows.len());
    for row in &rows {
        let lease = LeaseRow {
            id: row.int("id")?,
            ttl: row.int("ttl_s")?,
            granted_at: DbTime(row.int("granted_us")?),
            expires_at: DbTime(row.int("expires_us")?),
        };
        let left = lease.expires_at.0.saturating_sub(now.0).max(0);
        shown.push(LeaseSummary {
            id: lease.id,
            granted_ttl: lease.ttl,
            remaining: Duration::from_micros(count(left)),
            keys: count(row.int("n_keys")?),
        });
    }
    let all_keys = first_int(tx, &sql.recipe_keys_count, &[]).await?;
    let keys = format!("{} LIMIT {limit}", sql.recipe_keys);
    let rows = tx.tx.fetch(&keys, &[]).await?;
    let mut recipe_keys = Vec::with_capacity(rows.len());
    for row in &rows {
        let (key, lease) = (row.bytes("kv_key")?, row.int("lease")?);
        let suffix = format!("/{lease:x}").len() - 1;
        let prefix = key[..key.len() - suffix].to_vec();
        recipe_keys.push(RecipeKey {
            prefix,
            key,
            lease,
            create_revision: row.int("create_revision")?,
            owner: false,
        });
    }
    mark_owners(tx, &mut recipe_keys).await?;
    Ok(Overview {
        now,
        revision,
        floor,
        more_leases: count(live).saturating_sub(shown.len() as u64),
        leases: shown,
        more_recipe_keys: count(all_keys).saturating_sub(recipe_keys.len() as u64),
        recipe_keys,
    })
}

/// Marks the key of each prefix that holds it: one read per prefix shown.
async fn mark_owners(tx: &mut EtcdTx<'_>, keys: &mut [RecipeKey]) -> Result<()> {
    let first_created = &tx.s.overview.first_created;
    let mut owners: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
    for key in keys.iter_mut() {
        if !owners.contains_key(&key.prefix) {
            let span = Span::new(&key.prefix, &prefix_end(&key.prefix));
            let owner = match first_created.pick(&span) {
                Some((sql, args)) => {
                    let rows = tx.tx.fetch(sql, &args).await?;
                    rows.first().map(|r| r.bytes("kv_key")).transpose()?
                }
                None => None,
            };
            owners.insert(key.prefix.clone(), owner);
        }
        key.owner = owners.get(&key.prefix).and_then(Option::as_deref) == Some(key.key.as_slice());
    }
    Ok(())
}

async fn first_int(tx: &mut EtcdTx<'_>, sql: &str, args: &[Arg<'_>]) -> Result<i64> {
    let rows = tx.tx.fetch(sql, args).await?;
    Ok(match rows.first() {
        Some(row) => row.int("n")?,
        None => 0,
    })
}
