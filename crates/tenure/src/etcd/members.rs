//! The members of the one etcd a database is: every `tenure serve` that speaks etcd's API on
//! it joins with its id, name and URLs, heartbeats, and is listed while it does (its row ends
//! by the database's clock, like a lease).

use super::error::Result;
use super::proto::etcdserverpb::Member;
use super::rows::{EtcdTx, MemberRow};
use super::rules::lease::live;
use crate::model::DbTime;

fn shown(row: MemberRow) -> Member {
    Member {
        id: row.id,
        name: row.name,
        peer_ur_ls: row.peer_urls,
        client_ur_ls: row.client_urls,
        is_learner: false,
    }
}

/// Joins (or re-joins) `member` at `now`, living `ttl_ms` past it.
pub(super) async fn join(
    tx: &mut EtcdTx<'_>,
    member: &Member,
    ttl_ms: u64,
    now: DbTime,
) -> Result<Member> {
    let row = MemberRow {
        id: member.id,
        name: member.name.clone(),
        peer_urls: member.peer_ur_ls.clone(),
        client_urls: member.client_ur_ls.clone(),
        started_at: now,
        expires_at: now.plus_ms(ttl_ms),
    };
    tx.write_member(&row, now).await?;
    Ok(shown(row))
}

/// Keeps member `id` listed `ttl_ms` past `now`; `false` if it had ended (then it joins again).
pub(super) async fn heartbeat(
    tx: &mut EtcdTx<'_>,
    id: u64,
    ttl_ms: u64,
    now: DbTime,
) -> Result<bool> {
    Ok(tx.heartbeat_member(id, now.plus_ms(ttl_ms), now).await?)
}

/// The members that live at `now`, by id.
pub(super) async fn list(tx: &mut EtcdTx<'_>, now: DbTime) -> Result<Vec<Member>> {
    let mut rows = tx.live_members(now).await?;
    // By id as etcd lists them (the rows hold the ids' bits in a signed column).
    rows.sort_by_key(|m| m.id);
    Ok(rows
        .into_iter()
        .filter(|m| live(m.expires_at, now))
        .map(shown)
        .collect())
}
