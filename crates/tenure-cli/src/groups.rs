//! Spreading groups as `tenure status --json` and `GET /v1/groups` show them: each group's
//! assignment (member → shards, the shards nobody owns), all read in one transaction.

use serde::Serialize;
use std::collections::BTreeMap;

/// A spreading group's assignment: each live member's shards, and the shards nobody owns.
#[derive(Serialize)]
pub(crate) struct GroupJson {
    pub(crate) group: String,
    pub(crate) shards: u32,
    pub(crate) members: BTreeMap<String, Vec<u32>>,
    pub(crate) unowned: Vec<u32>,
    /// The paused shards (`tenure pause GROUP`), only when there are any.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) paused: Vec<u32>,
}

/// Every group with live members, by name (`tenure::spread::assignments`: one transaction).
pub(crate) async fn read(store: &tenure::Store) -> Result<Vec<GroupJson>, tenure::Error> {
    let all = tenure::spread::assignments(store).await?;
    Ok(all
        .into_iter()
        .map(|a| GroupJson {
            group: a.group,
            shards: a.shards,
            members: a.members,
            unowned: a.unowned,
            paused: a.paused,
        })
        .collect())
}
