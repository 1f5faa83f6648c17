//! `tenure pause GROUP` / `tenure resume GROUP` for a spreading group: the group's own row
//! and every shard's lease paused (or resumed) in one transaction (`tenure::Spread::pause`).
//! A name is a group while it has live members (`tenure status` lists it), and after: a group
//! keeps its row, so a group with no live member is paused too (a member that starts later
//! takes nothing until it is resumed).

use crate::exit::{Failure, Outcome, OK};
use crate::output::print_json;
use serde::Serialize;
use std::collections::BTreeMap;
use tenure::{Applied, Effect, Spread, Store};

#[derive(Serialize)]
struct GroupAdminAnswer {
    action: &'static str,
    group: String,
    /// The largest shard count its live members give (absent without a live member).
    #[serde(skip_serializing_if = "Option::is_none")]
    shards: Option<u32>,
    /// How many shards' leases changed (the others already were as asked).
    changed: usize,
}

/// A spreading group an operator acts on.
pub(super) struct Group {
    /// The largest shard count its live members give; `None` without a live member.
    shards: Option<u32>,
}

/// `name` as a group: one with live members, or one whose row exists (a member ran in it
/// once) while no live holder has a lease of that name. A name that is no lease but whose
/// first shard is, with no group row (a group of a version before the layer kept its own
/// rows), is refused: pausing it would pause a lease named like the group instead.
pub(super) async fn group_of(store: &Store, name: &str) -> Result<Option<Group>, Failure> {
    let groups: BTreeMap<String, u32> = tenure::spread::groups(store).await?;
    if let Some(&n) = groups.get(name) {
        return Ok(Some(Group { shards: Some(n) }));
    }
    let snapshot = store.get(name).await?;
    let held = snapshot
        .leases
        .iter()
        .any(|l| l.holder.is_some() && l.expires_at > snapshot.now);
    if !held && tenure::spread::exists(store, name).await? {
        return Ok(Some(Group { shards: None }));
    }
    let shard = !store
        .get(&tenure::spread::shard_name(name, 0))
        .await?
        .leases
        .is_empty();
    if snapshot.leases.is_empty() && shard {
        return Err(Failure::usage(format!(
            "{name}: a spreading group with no live member (nothing runs); pause or resume its shards by name ({name}/0 …), or start a member first"
        )));
    }
    Ok(None)
}

/// Pauses or resumes `group`: its row and every shard's lease.
pub(super) async fn act(
    global: &crate::cli::Global,
    store: Store,
    name: &str,
    group: Group,
    pause: bool,
    actor: &str,
) -> Outcome {
    let spread = Spread::new(store, name, group.shards.unwrap_or(1))?;
    let applied: Vec<Applied> = if pause {
        spread.pause(actor).await?
    } else {
        spread.resume(actor).await?
    };
    let changed = applied
        .iter()
        .filter(|a| a.effect != Effect::NoChange)
        .count();
    if global.json {
        print_json(&GroupAdminAnswer {
            action: if pause { "pause" } else { "resume" },
            group: name.to_string(),
            shards: group.shards,
            changed,
        });
        return Ok(OK);
    }
    let shards = match group.shards {
        Some(n) => format!("the group's {n} shards"),
        None => "the group (no live member)".to_string(),
    };
    if pause {
        println!(
            "{name}: paused {shards} ({changed} changed); each owner stops its shard's work at its next renew and no member takes a shard, whatever its --shards, until `tenure resume {name}`"
        );
    } else {
        println!("{name}: resumed {shards} ({changed} changed); the members take them at their next renew");
    }
    Ok(OK)
}
