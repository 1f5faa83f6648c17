//! `tenure pause GROUP` / `tenure resume GROUP` for a spreading group: every shard paused (or
//! resumed) in one transaction (`tenure::Spread::pause`). A name is a group while it has live
//! members (`tenure status` lists it).

use crate::exit::{Failure, Outcome, OK};
use crate::output::print_json;
use serde::Serialize;
use std::collections::BTreeMap;
use tenure::{Applied, Effect, Spread, Store};

#[derive(Serialize)]
struct GroupAdminAnswer {
    action: &'static str,
    group: String,
    shards: u32,
    /// How many shards changed (the others already were as asked).
    changed: usize,
}

/// The shard count of `name` if it is a live group. A name that is no lease but whose first
/// shard is (a group with no live member) is refused: pausing it would make the group's name
/// a lease's, which no group may then take.
pub(super) async fn group_of(store: &Store, name: &str) -> Result<Option<u32>, Failure> {
    let groups: BTreeMap<String, u32> = tenure::spread::groups(store).await?;
    if let Some(&n) = groups.get(name) {
        return Ok(Some(n));
    }
    let lease = !store.get(name).await?.leases.is_empty();
    let shard = !store
        .get(&tenure::spread::shard_name(name, 0))
        .await?
        .leases
        .is_empty();
    if !lease && shard {
        return Err(Failure::usage(format!(
            "{name}: a spreading group with no live member (nothing runs); pause or resume its shards by name ({name}/0 …), or start a member first"
        )));
    }
    Ok(None)
}

/// Pauses or resumes every shard of `group`.
pub(super) async fn act(
    global: &crate::cli::Global,
    store: Store,
    group: &str,
    shards: u32,
    pause: bool,
    actor: &str,
) -> Outcome {
    let spread = Spread::new(store, group, shards)?;
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
            group: group.to_string(),
            shards,
            changed,
        });
    } else if pause {
        println!(
            "{group}: paused the group's {shards} shards ({changed} changed); each owner stops its shard's work at its next renew and no member takes a shard until `tenure resume {group}`"
        );
    } else {
        println!("{group}: resumed the group's {shards} shards ({changed} changed); the members take them at their next renew");
    }
    Ok(OK)
}
