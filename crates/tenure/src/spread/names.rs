//! A group's name is no election's or lock's: the checks at the edges, and which registrations
//! of a group's name are its members.

use super::{groups, shard_of, METADATA};
use crate::candidates::{Candidate, Candidates};
use crate::error::{Error, Result};
use crate::store::Store;

/// The shard count a member's registration metadata gives (`spread:shards=N`).
pub(super) fn shards_in(metadata: Option<&str>) -> Option<u32> {
    metadata?.strip_prefix(METADATA)?.parse().ok()
}

/// Whether registration metadata is a group member's.
pub(super) fn is_member_metadata(metadata: Option<String>) -> bool {
    shards_in(metadata.as_deref()).is_some()
}

/// Whether a registration is a group member's: an observer with the layer's metadata (an
/// elector campaigning for the group's name, or observing it, is not).
pub(super) fn is_member(c: &Candidate) -> bool {
    c.observer && shards_in(c.metadata.as_deref()).is_some()
}

/// Refuses `name` for an election or a lock when it belongs to a live spreading group: the
/// group's own name (its members register under it), or one of its shards' (`GROUP/i`, `i`
/// below the group's shard count), which the group's members take and give back. The edge
/// check of `tenure run`, `lock`, `every` and `serve --campaign`; the other half of the rule
/// is [`Spread::join`](super::Spread::join)'s.
///
/// # Errors
/// [`Error::Invalid`] naming the rule; [`Error::Timeout`], database errors.
pub async fn check_no_group(store: &Store, name: &str) -> Result<()> {
    let groups = groups(store).await?;
    let invalid = |rule| Error::Invalid {
        what: "name",
        value: name.to_string(),
        rule,
    };
    if groups.contains_key(name) {
        return Err(invalid(
            "is a live spreading group's name (tenure spread); an election's or lock's name must be no group's name",
        ));
    }
    let shard = groups
        .iter()
        .any(|(group, &n)| shard_of(group, name).is_some_and(|i| i < n));
    if shard {
        return Err(invalid(
            "is a shard of a live spreading group (GROUP/i): only the group's members take it (tenure spread)",
        ));
    }
    Ok(())
}

/// Refuses a group whose name is an election's or a lock's: a lease by that name exists, or
/// a live registration of the name is not a member's (an elector campaigning or observing).
pub(super) async fn check_name_is_free(store: &Store, group: &str) -> Result<()> {
    let taken = |rule| Error::Invalid {
        what: "group",
        value: group.to_string(),
        rule,
    };
    if !store.get(group).await?.leases.is_empty() {
        return Err(taken(
            "is the name of a lease (an election or a lock); a group's name must be no lease's name",
        ));
    }
    let roster = Candidates::new(store.clone()).list(group).await?;
    let now = roster.now;
    if roster
        .candidates
        .iter()
        .any(|c| c.is_live(now) && !is_member(c))
    {
        return Err(taken(
            "has live candidates of an election by that name; a group's name must be no election's name",
        ));
    }
    Ok(())
}
