//! A group's name is no election's or lock's: one rule, applied on every path that takes a
//! lease for someone who is not one of the group's members, and the join's check the other
//! way round.
//!
//! [`refusal_in`] is the rule, inside the caller's own transaction: `tenure run`, `lock`,
//! `every` and `serve --campaign` run it through [`check_no_group`] before they campaign, and
//! the Consul layer runs it in the transaction of every `?acquire=` (a front end that takes
//! leases for its clients — Consul's, and the etcd API's to come — calls it in its own
//! transaction, so that the check and the acquisition see one moment). A group's own members
//! never ask: their shards are theirs.

use super::statements::live_groups;
use crate::backend::tx::{Arg, Body, Outcome, Schema, Tx};
use crate::candidates::Candidates;
use crate::error::{Error, Result};
use crate::model::DbTime;
use crate::store::Store;

/// The rule a live group's name breaks for an election or a lock.
pub const GROUP_NAME: &str =
    "is a live spreading group's name (tenure spread); an election's or lock's name must be no group's name";

/// The rule a live group's shard breaks for anyone but the group's members.
pub const SHARD_NAME: &str =
    "is a shard of a live spreading group (GROUP/i): only the group's members take it (tenure spread)";

/// Why `name` may not be taken as a lease by anyone but a group's members at `now` (the
/// transaction's instant), if it may not: it is the name of a group with live members
/// ([`GROUP_NAME`]), or of one of its shards, `GROUP/i` with `i` below the largest shard
/// count its live members give ([`SHARD_NAME`]). One statement, in `tx`.
///
/// # Errors
/// Database errors.
pub(crate) async fn refusal_in(
    tx: &mut dyn Tx,
    name: &str,
    now: DbTime,
) -> Result<Option<&'static str>> {
    Ok(refusals_in(tx, &[name], now).await?.map(|(_, rule)| rule))
}

/// [`refusal_in`] for many names at once (a batch of locks): the first of `names` (in their
/// order) that may not be taken, with the rule it breaks, if any. One statement in `tx` (the
/// names and their groups as its parameters: keep `names` to a chunk of a thousand or so).
///
/// # Errors
/// Database errors.
pub(crate) async fn refusals_in(
    tx: &mut dyn Tx,
    names: &[&str],
    now: DbTime,
) -> Result<Option<(String, &'static str)>> {
    let shard_of = |name: &str| {
        name.rsplit_once('/')
            .and_then(|(group, _)| Some((group.to_string(), super::shard_of(group, name)?)))
    };
    let mut asked: Vec<String> = names.iter().map(|n| (*n).to_string()).collect();
    asked.extend(names.iter().filter_map(|n| shard_of(n).map(|(g, _)| g)));
    asked.sort_unstable();
    asked.dedup();
    let sql = live_groups(tx.prefix(), tx.dialect(), Some(asked.len()));
    let mut args = vec![Arg::Int(now.0)];
    args.extend(asked.iter().map(|n| Arg::Text(n)));
    let mut live = std::collections::HashMap::new();
    for row in tx.fetch(&sql, &args).await? {
        let shards = u64::try_from(row.int("shards")?).unwrap_or(0);
        live.insert(row.text("name")?, shards);
    }
    if live.is_empty() {
        return Ok(None);
    }
    for name in names {
        if live.contains_key(*name) {
            return Ok(Some(((*name).to_string(), GROUP_NAME)));
        }
        if let Some((group, i)) = shard_of(name) {
            if live
                .get(&group)
                .is_some_and(|&shards| u64::from(i) < shards)
            {
                return Ok(Some(((*name).to_string(), SHARD_NAME)));
            }
        }
    }
    Ok(None)
}

/// Refuses `name` for an election or a lock when it belongs to a live spreading group: the
/// group's own name, or one of its shards' (`GROUP/i`, `i` below the group's shard count),
/// which the group's members take and give back. The edge check of `tenure run`, `lock`,
/// `every` and `serve --campaign` (`refusal_in` in a read of its own); the other half of
/// the rule is [`Spread::join`](super::Spread::join)'s.
///
/// # Errors
/// [`Error::Invalid`] naming the rule; [`Error::Timeout`], database errors.
pub async fn check_no_group(store: &Store, name: &str) -> Result<()> {
    let mut body = Check {
        name,
        refusal: None,
    };
    store.transaction(&mut body).await?;
    match body.refusal {
        Some(rule) => Err(Error::Invalid {
            what: "name",
            value: name.to_string(),
            rule,
        }),
        None => Ok(()),
    }
}

/// [`refusal_in`] in a read transaction of its own.
struct Check<'a> {
    name: &'a str,
    refusal: Option<&'static str>,
}

#[async_trait::async_trait]
impl Body for Check<'_> {
    fn schema(&self) -> Option<&'static Schema> {
        Some(&super::statements::SCHEMA)
    }

    fn writes(&self) -> bool {
        false
    }

    fn op(&self) -> &'static str {
        "spread_names"
    }

    fn name(&self) -> Option<&str> {
        Some(self.name)
    }

    async fn run(&mut self, tx: &mut dyn Tx) -> Result<Outcome> {
        let now = tx.now().await?;
        self.refusal = refusal_in(tx, self.name, now).await?;
        Ok(Outcome::Commit)
    }
}

/// Refuses a group whose name is a live election's or lock's: a lease by that name with a
/// live holder, or live registrations of the name in the candidate registry (an elector
/// campaigning or observing). A vacant lease — its holder gone (a lock released, a Consul
/// session destroyed) and no live candidate — does not block: lease rows are never deleted,
/// and a name once used that way may become a group's.
pub(super) async fn check_name_is_free(store: &Store, group: &str) -> Result<()> {
    let taken = |rule| Error::Invalid {
        what: "group",
        value: group.to_string(),
        rule,
    };
    let snapshot = store.get(group).await?;
    let now = snapshot.now;
    if snapshot
        .leases
        .iter()
        .any(|l| l.holder.is_some() && l.expires_at > now)
    {
        return Err(taken(
            "is the name of a held lease (an election or a lock); a group's name must be no lease's name",
        ));
    }
    let roster = Candidates::new(store.clone()).list(group).await?;
    if roster.candidates.iter().any(|c| c.is_live(roster.now)) {
        return Err(taken(
            "has live candidates of an election by that name; a group's name must be no election's name",
        ));
    }
    Ok(())
}
